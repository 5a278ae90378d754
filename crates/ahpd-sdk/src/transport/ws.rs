//! The WebSocket listener (axum): origin check (HTTP 403 before the upgrade for any web origin
//! not allowed), connection-token check (401), `426` for plain HTTP, one JSON-RPC message per
//! text frame, close code 1009 for a message over the size limit. What a connection must do
//! before the token check, and how many may wait there, is in `admission`.

use std::net::SocketAddr;
use std::time::Duration;

use async_trait::async_trait;
use axum::Router;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{FromRequestParts, State};
use axum::http::{HeaderMap, StatusCode, Uri, request::Parts};
use axum::response::{IntoResponse, Response};
use futures::stream::{SplitSink, SplitStream};
use futures::{SinkExt, StreamExt};
use tokio_util::sync::CancellationToken;

use super::admission::{self, Admission, Limits};
use crate::error::HostError;
use crate::host::{Host, HostHandle};
use crate::transport::peer::{Inbound, Peer, PeerError, PeerReader, PeerWriter};

/// Where and how to listen.
#[derive(Clone)]
pub struct WsConfig {
    /// The address to bind. Default: `127.0.0.1:9187`.
    pub addr: SocketAddr,
    /// The connection token clients must present (`?tkn=` or `Authorization: Bearer`).
    pub token: Option<String>,
    /// Allow a non-loopback address without a token (the daemon's
    /// `--without-connection-token`).
    pub allow_without_token: bool,
    /// Web origins whose pages may connect (`https://vscode.dev`). An upgrade carrying any other
    /// `Origin` header is refused with 403, token or not; clients that are not browsers send
    /// none. Empty by default.
    pub allowed_origins: Vec<String>,
    /// How long a connection has to send its request line and headers before it is closed.
    /// Default: 10 s.
    pub header_timeout: Duration,
    /// How many connections may wait at once without having passed the token check; when one
    /// more arrives, the one waiting longest is closed. Default: 64.
    pub max_pending: usize,
}

impl std::fmt::Debug for WsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsConfig")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("allow_without_token", &self.allow_without_token)
            .field("allowed_origins", &self.allowed_origins)
            .field("header_timeout", &self.header_timeout)
            .field("max_pending", &self.max_pending)
            .finish()
    }
}

impl Default for WsConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 9187)),
            token: None,
            allow_without_token: false,
            allowed_origins: Vec::new(),
            header_timeout: admission::DEFAULT_HEADER_TIMEOUT,
            max_pending: admission::DEFAULT_MAX_PENDING,
        }
    }
}

impl WsConfig {
    /// Loopback on the given port (0 picks a free one), no token.
    pub fn loopback(port: u16) -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            ..Self::default()
        }
    }

    /// The same, with a token.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The same, letting pages of these web origins connect.
    pub fn with_allowed_origins(mut self, origins: impl IntoIterator<Item = String>) -> Self {
        self.allowed_origins = origins.into_iter().collect();
        self
    }
}

/// Who may upgrade a connection: the token to present and the web origins let in.
#[derive(Clone, Default)]
pub struct Access {
    /// The token, when one is required.
    pub token: Option<String>,
    /// Origins let in, each normalised by [`normalise_origin`].
    pub allowed_origins: Vec<String>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("allowed_origins", &self.allowed_origins)
            .finish()
    }
}

impl Access {
    /// A token (or none) and the origins let in, as written in a configuration.
    pub fn new(token: Option<String>, allowed_origins: &[String]) -> Self {
        Self {
            token,
            allowed_origins: allowed_origins
                .iter()
                .map(|o| normalise_origin(o))
                .collect(),
        }
    }
}

/// An origin as browsers send it: scheme and host lower-cased, no trailing slash, the default
/// port of `http`/`https` dropped, so `HTTPS://VSCode.dev/` and `https://vscode.dev:443` match.
pub fn normalise_origin(origin: &str) -> String {
    let o = origin.trim().trim_end_matches('/');
    let Some((scheme, rest)) = o.split_once("://") else {
        return o.to_ascii_lowercase();
    };
    let scheme = scheme.to_ascii_lowercase();
    let mut host = rest.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => Some(":80"),
        "https" => Some(":443"),
        _ => None,
    };
    if let Some(port) = default_port
        && let Some(bare) = host.strip_suffix(port)
    {
        host = bare.to_owned();
    }
    format!("{scheme}://{host}")
}

/// A running listener.
pub struct WsServer {
    local_addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for WsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsServer")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl WsServer {
    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stop listening (open connections keep running until the host shuts down).
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Resolves when the listener has stopped.
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

#[derive(Clone)]
struct WsState {
    host: HostHandle,
    access: Access,
    max: usize,
}

/// Compares in time that depends only on the lengths, so a wrong guess tells nothing of how
/// much of it was right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

/// The credentials of an `Authorization: Bearer <token>` header; the scheme is matched without
/// regard to case (RFC 9110 host cases 11.1 (docs/acceptance.md)).
fn bearer_token(headers: &HeaderMap) -> Option<String> {
    let value = headers.get("authorization")?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_owned())
}

fn query_token(uri: &Uri) -> Option<String> {
    uri.query()?.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == "tkn").then(|| percent_decode(v))
    })
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(v) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a log line says of a request's target: its path only. The query string is left out
/// whatever its parameters are called or however they are spelled (`?tkn=`, `?TKN=`,
/// `?%74kn=`), as are header values; a path that holds the token itself (decoded or not) is
/// not shown either, and a long one is cut.
fn logged_path(uri: &Uri, token: Option<&str>) -> String {
    const MOST: usize = 200;
    let path = uri.path();
    if let Some(t) = token.filter(|t| !t.is_empty())
        && (path.contains(t) || percent_decode(path).contains(t))
    {
        return "<a path holding the connection token>".to_owned();
    }
    if path.len() <= MOST {
        return path.to_owned();
    }
    let mut end = MOST;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &path[..end])
}

/// A refused `Origin` as a log line may show it: browsers send only `scheme://host[:port]`, so
/// a value of any other shape (which only a program that is not a browser sends) is not
/// repeated, being any header value at all, nor is one that holds the token.
fn logged_origin<'a>(normalised: &'a str, token: Option<&str>) -> &'a str {
    if token.is_some_and(|t| !t.is_empty() && normalised.contains(&t.to_ascii_lowercase())) {
        return "<an origin holding the connection token>";
    }
    let plain = normalised.split_once("://").is_some_and(|(scheme, host)| {
        !scheme.is_empty()
            && scheme.bytes().all(|b| b.is_ascii_lowercase())
            && !host.is_empty()
            && host.len() <= 260
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
    });
    if plain || normalised == "null" {
        normalised
    } else {
        "<not a web origin>"
    }
}

/// A refusal before the upgrade, closing the connection: a client that was refused has
/// nothing more to send on it, and keeping it open would let it hold a seat.
fn refusal(status: StatusCode, text: &'static str) -> Response {
    (status, [(axum::http::header::CONNECTION, "close")], text).into_response()
}

async fn handle(
    State(st): State<WsState>,
    headers: HeaderMap,
    uri: Uri,
    mut parts: Parts,
) -> Response {
    let token = st.access.token.as_deref();
    // A page in a browser can open a WebSocket to any local port, and its requests carry its
    // origin; other clients send none. So an origin is let in only when configured, and this
    // comes before the token so a page that learned the token still cannot use it.
    if let Some(origin) = headers.get("origin") {
        let origin = origin.to_str().map(normalise_origin).unwrap_or_default();
        if !st.access.allowed_origins.contains(&origin) {
            tracing::info!(origin = %logged_origin(&origin, token), path = %logged_path(&uri, token), "a connection from a web page was refused: its origin is not in allowedOrigins");
            return refusal(
                StatusCode::FORBIDDEN,
                "connections from web pages are refused unless their origin is allowed\n",
            );
        }
    }
    if let Some(expected) = &st.access.token {
        let presented = query_token(&uri).or_else(|| bearer_token(&headers));
        let ok = presented.is_some_and(|p| constant_time_eq(p.as_bytes(), expected.as_bytes()));
        if !ok {
            tracing::info!(path = %logged_path(&uri, token), "a connection without the right token was refused");
            return refusal(
                StatusCode::UNAUTHORIZED,
                "a valid connection token is required\n",
            );
        }
    }
    // Past the checks: this connection no longer counts among those that may be closed to make
    // room for newcomers.
    if let Some(admission) = parts.extensions.get::<Admission>() {
        admission.pass();
    }
    let ws = match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(ws) => ws,
        Err(_) => {
            return (
                StatusCode::UPGRADE_REQUIRED,
                "this endpoint speaks the Agent Host Protocol over WebSocket\n",
            )
                .into_response();
        }
    };
    let label = logged_path(&uri, token);
    let max = st.max;
    // A message up to twice the limit is read whole and answered with 1009; one larger fails in
    // the socket, which is told apart and answered the same way. One frame may be as large as
    // a whole message, so a single-frame message meets the message limit, not a smaller one.
    let socket_limit = max.saturating_mul(2).max(1024);
    ws.max_message_size(socket_limit)
        .max_frame_size(socket_limit)
        .on_upgrade(move |socket| async move {
            let host = st.host;
            crate::connection::run(host.inner.clone(), ws_peer(socket, max, label)).await;
        })
}

async fn entry(state: State<WsState>, req: axum::extract::Request) -> Response {
    let (parts, _body) = req.into_parts();
    let headers = parts.headers.clone();
    let uri = parts.uri.clone();
    handle(state, headers, uri, parts).await
}

fn ws_peer(socket: WebSocket, max: usize, label: String) -> Peer {
    let (sink, stream) = socket.split();
    Peer {
        reader: Box::new(WsReader { stream, max }),
        writer: Box::new(WsWriter { sink }),
        label,
    }
}

struct WsReader {
    stream: SplitStream<WebSocket>,
    max: usize,
}

#[async_trait]
impl PeerReader for WsReader {
    async fn next(&mut self) -> Option<Inbound> {
        loop {
            match self.stream.next().await? {
                Ok(Message::Text(t)) => {
                    return Some(if t.len() > self.max {
                        Inbound::Oversized
                    } else {
                        Inbound::Frame(t.as_str().to_owned())
                    });
                }
                Ok(Message::Binary(b)) => {
                    if b.len() > self.max {
                        return Some(Inbound::Oversized);
                    }
                    return Some(Inbound::Frame(String::from_utf8_lossy(&b).into_owned()));
                }
                Err(e) if is_too_large(&e) => return Some(Inbound::Oversized),
                Ok(Message::Close(_)) | Err(_) => return None,
                Ok(_) => continue,
            }
        }
    }
}

/// Whether a read failed because a frame or message was over the size the socket accepts,
/// which the connection answers with close code 1009 like any other oversized message.
fn is_too_large(e: &axum::Error) -> bool {
    std::error::Error::source(e)
        .and_then(|inner| inner.downcast_ref::<tungstenite::Error>())
        .is_some_and(|inner| matches!(inner, tungstenite::Error::Capacity(_)))
}

struct WsWriter {
    sink: SplitSink<WebSocket, Message>,
}

#[async_trait]
impl PeerWriter for WsWriter {
    async fn send(&mut self, frame: &str) -> Result<(), PeerError> {
        self.sink
            .send(Message::Text(frame.into()))
            .await
            .map_err(|e| PeerError(e.to_string()))
    }

    async fn feed(&mut self, frame: &str) -> Result<(), PeerError> {
        self.sink
            .feed(Message::Text(frame.into()))
            .await
            .map_err(|e| PeerError(e.to_string()))
    }

    async fn flush(&mut self) -> Result<(), PeerError> {
        self.sink
            .flush()
            .await
            .map_err(|e| PeerError(e.to_string()))
    }

    async fn close(&mut self, code: u16, reason: &str) {
        let _ = self
            .sink
            .send(Message::Close(Some(CloseFrame {
                code,
                reason: reason.into(),
            })))
            .await;
        let _ = self.sink.close().await;
    }
}

impl Host {
    /// An axum router that serves the protocol on any path, for embedding in a larger server.
    /// Pages of any web origin are refused; see [`Host::router_with`] to let some in.
    pub fn router(&self, token: Option<String>) -> Router {
        self.router_with(Access::new(token, &[]))
    }

    /// An axum router that serves the protocol on any path to the clients `access` lets in.
    pub fn router_with(&self, access: Access) -> Router {
        let st = WsState {
            host: self.handle(),
            access,
            max: self.handle().inner.options.max_frame_bytes,
        };
        Router::new().fallback(entry).with_state(st)
    }

    /// Bind and serve WebSocket connections in the background. A non-loopback address needs a
    /// token or `allow_without_token`.
    pub async fn serve_ws(&self, config: WsConfig) -> Result<WsServer, HostError> {
        let addr = config.addr;
        if !addr.ip().is_loopback() && config.token.is_none() && !config.allow_without_token {
            return Err(HostError::TokenRequired {
                addr: addr.to_string(),
            });
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| HostError::Listen {
                addr: addr.to_string(),
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| HostError::Listen {
            addr: addr.to_string(),
            source,
        })?;
        let router = self.router_with(Access::new(config.token, &config.allowed_origins));
        let limits = Limits {
            header_timeout: config.header_timeout,
            max_pending: config.max_pending,
        };
        let stop = CancellationToken::new();
        let host_stop = self.handle().inner.shutdown.clone();
        let stop2 = stop.clone();
        let task = tokio::spawn(async move {
            let shutdown = async move {
                tokio::select! {
                    _ = stop2.cancelled() => {}
                    _ = host_stop.cancelled() => {}
                }
            };
            admission::serve(listener, router, limits, shutdown).await;
        });
        tracing::info!(addr = %local_addr, "listening for WebSocket connections");
        Ok(WsServer {
            local_addr,
            stop,
            task,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_tokens() {
        assert_eq!(
            normalise_origin("HTTPS://VSCode.dev/"),
            "https://vscode.dev"
        );
        assert_eq!(
            normalise_origin("https://vscode.dev:443"),
            "https://vscode.dev"
        );
        assert_eq!(
            normalise_origin("http://localhost:3000"),
            "http://localhost:3000"
        );
        assert_eq!(normalise_origin("null"), "null");
        let mut h = HeaderMap::new();
        h.insert(
            "authorization",
            "bEaReR  s3cret ".parse().unwrap_or_else(|_| unreachable!()),
        );
        assert_eq!(bearer_token(&h).as_deref(), Some("s3cret"));
        h.insert(
            "authorization",
            "Basic s3cret".parse().unwrap_or_else(|_| unreachable!()),
        );
        assert_eq!(bearer_token(&h), None);
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        let uri: Uri = "/x?a=1&tkn=s%20e&b=2".parse().unwrap_or_default();
        assert_eq!(query_token(&uri).as_deref(), Some("s e"));
        assert_eq!(logged_path(&uri, Some("s e")), "/x");
        let uri: Uri = "/p%61th/s3cret?x".parse().unwrap_or_default();
        assert_eq!(
            logged_path(&uri, Some("path/s3cret")),
            "<a path holding the connection token>"
        );
        assert_eq!(logged_path(&uri, Some("other")), "/p%61th/s3cret");
        assert_eq!(
            logged_origin("https://vscode.dev:8443", None),
            "https://vscode.dev:8443"
        );
        assert_eq!(
            logged_origin("https://a/b?tkn=x", None),
            "<not a web origin>"
        );
        assert_eq!(
            logged_origin("https://s3cret.dev", Some("s3cret")),
            "<an origin holding the connection token>"
        );
    }
}
