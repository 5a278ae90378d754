//! The HTTP transport seam (`Fetch`) and its default, a reqwest client that never follows
//! redirects, ignores proxies and connects only to the addresses it is handed (S14–S16).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::OnceLock;

use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;

/// One HTTP request for a transport.
#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// The method, e.g. GET.
    pub method: http::Method,
    /// The URL; its host stays the `Host` header and the TLS server name.
    pub url: url::Url,
    /// Header names and values.
    pub headers: Vec<(String, String)>,
    /// The body, if any.
    pub body: Option<Vec<u8>>,
    /// When set, the only addresses the transport may connect to (on the URL's port); the
    /// host name is then never resolved again.
    pub connect_to: Option<Vec<IpAddr>>,
}

/// A response with a streamed (already content-decoded) body.
pub struct FetchResponse {
    /// The HTTP status code.
    pub status: u16,
    /// The response headers.
    pub headers: http::HeaderMap,
    /// The body, chunk by chunk.
    pub body: BoxStream<'static, Result<Bytes, FetchError>>,
}

impl fmt::Debug for FetchResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FetchResponse")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

/// A transport failure: a short code such as `ECONNREFUSED` when one is known, and a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.reason())]
pub struct FetchError {
    /// `ENOTFOUND`, `ECONNREFUSED`, `ECONNRESET`, `EHOSTUNREACH`, `ENETUNREACH`, or none.
    pub code: Option<String>,
    /// What went wrong, for a reader.
    pub message: String,
}

impl FetchError {
    /// An error with a code and a message.
    pub fn with_code(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: Some(code.to_owned()),
            message: message.into(),
        }
    }

    /// An error with a message only.
    pub fn message(message: impl Into<String>) -> Self {
        Self {
            code: None,
            message: message.into(),
        }
    }

    /// The code when there is one, otherwise the message on one line.
    pub fn reason(&self) -> String {
        match &self.code {
            Some(code) => code.clone(),
            None => self
                .message
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" "),
        }
    }
}

/// Sends one HTTP request and never follows redirects. Injected in tests.
pub trait Fetch: Send + Sync {
    /// Sends `req` and returns the response head with a streamed body.
    fn fetch(&self, req: FetchRequest) -> BoxFuture<'_, Result<FetchResponse, FetchError>>;
}

/// The default transport: reqwest with rustls, no redirects, no proxies, and, when the request
/// carries `connect_to`, a resolver that knows only those addresses.
#[derive(Debug, Clone, Default)]
pub struct ReqwestFetch {
    _private: (),
}

impl ReqwestFetch {
    /// A new default transport.
    pub fn new() -> Self {
        Self::default()
    }
}

fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
}

/// The client for unpinned requests (search providers), built once.
fn shared_client() -> Result<reqwest::Client, FetchError> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    if let Some(client) = CLIENT.get() {
        return Ok(client.clone());
    }
    let client = builder().build().map_err(|e| describe(&e))?;
    Ok(CLIENT.get_or_init(|| client).clone())
}

/// A client whose only answer for the URL's host is the checked set. The port in the pinned
/// addresses is 0, so reqwest keeps the URL's own port.
fn pinned_client(url: &url::Url, addresses: &[IpAddr]) -> Result<reqwest::Client, FetchError> {
    let mut b = builder();
    if let Some(url::Host::Domain(domain)) = url.host() {
        let sockets: Vec<SocketAddr> = addresses.iter().map(|ip| SocketAddr::new(*ip, 0)).collect();
        b = b.resolve_to_addrs(domain, &sockets);
    }
    b.build().map_err(|e| describe(&e))
}

impl Fetch for ReqwestFetch {
    fn fetch(&self, req: FetchRequest) -> BoxFuture<'_, Result<FetchResponse, FetchError>> {
        Box::pin(async move {
            let client = match &req.connect_to {
                Some(addresses) => {
                    if let Some(ip) = literal_host(&req.url)
                        && !addresses.contains(&ip)
                    {
                        return Err(FetchError::message(format!(
                            "{ip} is not among the addresses this request may use"
                        )));
                    }
                    pinned_client(&req.url, addresses)?
                }
                None => shared_client()?,
            };
            let mut request = client.request(req.method, req.url);
            for (name, value) in &req.headers {
                request = request.header(name, value);
            }
            if let Some(body) = req.body {
                request = request.body(body);
            }
            let response = request.send().await.map_err(|e| describe(&e))?;
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let body = response
                .bytes_stream()
                .map(|chunk| chunk.map_err(|e| describe(&e)))
                .boxed();
            Ok(FetchResponse {
                status,
                headers,
                body,
            })
        })
    }
}

fn literal_host(url: &url::Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        url::Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        url::Host::Domain(_) => None,
    }
}

/// Turns a reqwest error into a code (from the I/O error underneath, when there is one) and a
/// one-line message made of the whole cause chain.
fn describe(error: &reqwest::Error) -> FetchError {
    let mut parts = vec![error.to_string()];
    let mut code = None;
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if code.is_none() {
            if let Some(io) = cause.downcast_ref::<std::io::Error>() {
                code = io_code(io);
            } else if cause.to_string().starts_with("dns error") {
                code = Some("ENOTFOUND");
            }
        }
        let text = cause.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = cause.source();
    }
    FetchError {
        code: code.map(str::to_owned),
        message: parts.join(": "),
    }
}

fn io_code(error: &std::io::Error) -> Option<&'static str> {
    use std::io::ErrorKind;
    Some(match error.kind() {
        ErrorKind::ConnectionRefused => "ECONNREFUSED",
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => "ECONNRESET",
        ErrorKind::HostUnreachable => "EHOSTUNREACH",
        ErrorKind::NetworkUnreachable => "ENETUNREACH",
        _ => return None,
    })
}
