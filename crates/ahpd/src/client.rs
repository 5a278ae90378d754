//! A short-lived protocol client for `status` and `restart`, built on the official `ahp` client.

use std::time::Duration;

use ahp::client::{Client, ClientConfig};
use ahp_ws::WebSocketTransport;

/// Connects to `address` (a `ws://` URL), presenting `token` when there is one, and initializes.
pub async fn connect(address: &str, token: Option<&str>) -> Result<Client, String> {
    let url = match token {
        Some(t) => format!("{address}/?tkn={}", encode(t)),
        None => address.to_owned(),
    };
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

/// Percent-encodes everything but unreserved characters.
pub(crate) fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
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
