//! Connecting the official `ahp` client over `ahp-ws`, as end-to-end tests do.

use ahp::{Client, ClientConfig, ClientError};
use ahp_types::commands::InitializeResult;
use ahp_ws::{WebSocketTransport, WebSocketTransportError};

/// Why a test client could not connect.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The WebSocket handshake with the URL failed.
    #[error("cannot open a WebSocket to {url}: {source}")]
    WebSocket {
        /// The URL dialled.
        url: String,
        /// The transport's error.
        source: WebSocketTransportError,
    },
    /// The client started but a protocol call failed.
    #[error("the ahp client failed: {0}")]
    Client(#[from] ClientError),
}

/// Opens a WebSocket to `url` (`ws://127.0.0.1:<port>/…`) and starts the official client on it,
/// with the client's default configuration (30 s request timeout). Sends nothing yet.
pub async fn connect_ahp(url: &str) -> Result<Client, ConnectError> {
    connect_ahp_with(url, ClientConfig::default()).await
}

/// [`connect_ahp`] with a client configuration of the caller's.
pub async fn connect_ahp_with(url: &str, config: ClientConfig) -> Result<Client, ConnectError> {
    let transport =
        WebSocketTransport::connect(url)
            .await
            .map_err(|source| ConnectError::WebSocket {
                url: url.to_owned(),
                source,
            })?;
    Ok(Client::connect(transport, config).await?)
}

/// Connects and performs `initialize` as `client_id`, offering the protocol versions `ahp-types`
/// supports and subscribing to `subscriptions` at once. Returns the client and the server's answer.
pub async fn connect_ahp_initialized(
    url: &str,
    client_id: &str,
    subscriptions: &[&str],
) -> Result<(Client, InitializeResult), ConnectError> {
    let client = connect_ahp(url).await?;
    let versions = ahp_types::version::SUPPORTED_PROTOCOL_VERSIONS
        .iter()
        .map(|v| (*v).to_owned())
        .collect();
    let subs = subscriptions.iter().map(|s| (*s).to_owned()).collect();
    let init = client
        .initialize(client_id.to_owned(), versions, subs)
        .await?;
    Ok((client, init))
}
