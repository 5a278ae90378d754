//! A short-lived protocol client for `status` and `restart`, built on the official `ahp` client.

use std::time::Duration;

use ahp::client::{Client, ClientConfig};
use ahp_ws::WebSocketTransport;

use crate::token::encode;

/// Connects to `address` (a `ws://` URL), presenting `token` when there is one, and initializes.
pub(crate) async fn connect(address: &str, token: Option<&str>) -> Result<Client, String> {
    let url = crate::token::url_with_token(address, token);
    let transport = WebSocketTransport::connect(&url).await.map_err(|e| {
        format!(
            "cannot connect to {address}: {}",
            scrub(&e.to_string(), token)
        )
    })?;
    let config = ClientConfig {
        default_request_timeout: Some(Duration::from_secs(5)),
        ..ClientConfig::default()
    };
    let client = Client::connect(transport, config)
        .await
        .map_err(|e| format!("cannot connect to {address}: {e}"))?;
    let client_id = format!("ahpd-cli-{}", uuid::Uuid::new_v4().simple());
    client
        .initialize(client_id, vec!["1.0.0".into()], Vec::new())
        .await
        .map_err(|e| format!("{address} did not answer initialize: {e}"))?;
    Ok(client)
}

/// Whether the daemon at `address` answers `ping`.
pub async fn answers_ping(address: &str, token: Option<&str>) -> bool {
    let Ok(client) = connect(address, token).await else {
        return false;
    };
    let ok = client.ping().await.is_ok();
    client.shutdown().await;
    ok
}

/// A transport error may echo the URL; the token must not reach the screen.
pub(crate) fn scrub(text: &str, token: Option<&str>) -> String {
    match token {
        Some(t) if !t.is_empty() => text
            .replace(t, "<redacted>")
            .replace(&encode(t), "<redacted>"),
        _ => text.to_owned(),
    }
}
