//! The HTTP transport seam (`Fetch`) and its default, a reqwest client that never follows
//! redirects and connects only to the addresses it is handed (S14–S16).
//!
//! By itself the default transport uses no proxy at all. Given a [`ClientSource`] (the engine
//! passes one made from the same network settings as its model client: proxy variables, an
//! explicit proxy, extra CA certificates), it builds its clients from that instead. A request
//! that a proxy then carries is still guarded by web_fetch before it is sent: the name is
//! resolved and every address checked against the internal ranges, and a refused name never
//! reaches the proxy. What the pin cannot do through a proxy is hold the connection to the
//! checked addresses: the proxy resolves the name again on its own, so a name whose answer
//! changes between the check and the proxy's lookup, and whatever the proxy itself can reach,
//! are the proxy's to police. Hosts that `NO_PROXY` exempts are connected to directly and stay
//! pinned.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};

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

/// Makes the client builders a [`ReqwestFetch`] starts from: proxies and trusted certificates
/// set, nothing else. Called once per pinned request, as each pin needs a client of its own.
type MakeBuilder = dyn Fn() -> Result<reqwest::ClientBuilder, SourceError> + Send + Sync;

/// Why a [`ClientSource`] could not make a client builder: one line a request then fails with
/// (an unusable proxy URL, an unreadable certificate file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SourceError(pub String);

/// Where a [`ReqwestFetch`] gets its client builders, so the web tools reach the network the
/// way the rest of the process does (the engine builds one from its model client's settings).
#[derive(Clone)]
pub struct ClientSource(Arc<MakeBuilder>);

impl ClientSource {
    /// A source calling `make` for each builder; its error is what a request then fails with.
    pub fn new(
        make: impl Fn() -> Result<reqwest::ClientBuilder, SourceError> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(make))
    }
}

impl fmt::Debug for ClientSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The builder may hold a proxy's credentials: only say that one is there.
        f.write_str("ClientSource")
    }
}

/// Two sources are the same when they are clones of one another.
impl PartialEq for ClientSource {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ClientSource {}

/// The default transport: reqwest with rustls (the bundled and the system's roots), no
/// redirects, and, when the request carries `connect_to`, a resolver that knows only those
/// addresses. Without a [`ClientSource`] it uses no proxy.
///
/// With a source whose builders name a proxy, a pinned request the proxy applies to goes to the
/// proxy with the URL's name: web_fetch has resolved and checked that name before, and refuses
/// internal addresses before anything is sent, but the proxy resolves the name again and connects
/// where it likes, so the pin does not hold through it. Hosts the proxy settings exempt
/// (`NO_PROXY`) are connected to directly, at the checked addresses only.
#[derive(Debug, Clone, Default)]
pub struct ReqwestFetch {
    source: Option<ClientSource>,
    /// The client for unpinned requests of a transport with a source, built on first use.
    shared: Arc<OnceLock<reqwest::Client>>,
}

impl ReqwestFetch {
    /// A new default transport, with no proxy.
    pub fn new() -> Self {
        Self::default()
    }

    /// A transport whose clients start from `source`'s builders.
    pub fn with_source(source: ClientSource) -> Self {
        Self {
            source: Some(source),
            shared: Arc::default(),
        }
    }

    fn builder(&self) -> Result<reqwest::ClientBuilder, FetchError> {
        let b = match &self.source {
            Some(source) => (source.0)().map_err(|e| FetchError::message(e.0))?,
            None => reqwest::Client::builder().no_proxy(),
        };
        Ok(b.redirect(reqwest::redirect::Policy::none()))
    }

    /// The client for unpinned requests (search providers), built once.
    fn shared_client(&self) -> Result<reqwest::Client, FetchError> {
        static PLAIN: OnceLock<reqwest::Client> = OnceLock::new();
        let cell = match &self.source {
            Some(_) => self.shared.as_ref(),
            None => &PLAIN,
        };
        if let Some(client) = cell.get() {
            return Ok(client.clone());
        }
        let client = self.builder()?.build().map_err(|e| describe(&e))?;
        Ok(cell.get_or_init(|| client).clone())
    }

    /// A client whose only answer for the URL's host is the checked set. The port in the pinned
    /// addresses is 0, so reqwest keeps the URL's own port. A proxy that applies to the URL
    /// gets the name instead and resolves it itself (see the module's notes).
    fn pinned_client(
        &self,
        url: &url::Url,
        addresses: &[IpAddr],
    ) -> Result<reqwest::Client, FetchError> {
        let mut b = self.builder()?;
        if let Some(url::Host::Domain(domain)) = url.host() {
            let sockets: Vec<SocketAddr> =
                addresses.iter().map(|ip| SocketAddr::new(*ip, 0)).collect();
            b = b.resolve_to_addrs(domain, &sockets);
        }
        b.build().map_err(|e| describe(&e))
    }
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
                    self.pinned_client(&req.url, addresses)?
                }
                None => self.shared_client()?,
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
