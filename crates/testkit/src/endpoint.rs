//! The scripted OpenAI-compatible endpoint: a real HTTP server on `127.0.0.1:0`.
//!
//! It runs on a thread and tokio runtime of its own, so it answers whatever runtime (or paused
//! clock) the test uses, and it stops when the [`Endpoint`] is dropped.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Response, StatusCode};
use bytes::Bytes;
use futures::StreamExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tower::Service;

use crate::reply::{Frame, Reply};

/// One request the endpoint received, as it arrived.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// The HTTP method, upper-case (`POST`).
    pub method: String,
    /// The path without the query (`/v1/chat/completions`).
    pub path: String,
    /// The query string without `?`, empty when none.
    pub query: String,
    /// Every header, names lower-case, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The body as text (lossy UTF-8).
    pub body: String,
    /// The body parsed as JSON, `Value::Null` when it is empty or not JSON.
    pub json: Value,
}

impl RecordedRequest {
    /// The first value of a header (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether this is a `POST …/chat/completions`.
    pub fn is_chat(&self) -> bool {
        self.method == "POST" && self.path.ends_with("/chat/completions")
    }

    /// Whether this is a `GET …/models`.
    pub fn is_models(&self) -> bool {
        self.method == "GET" && self.path.ends_with("/models")
    }
}

/// Chooses a reply from the request when the script's queue is empty.
pub type Responder = Arc<dyn Fn(&RecordedRequest) -> Reply + Send + Sync>;

/// Builds an [`Endpoint`]. Defaults:
///
/// - path prefix `/v1`, so [`Endpoint::base_url`] is `http://127.0.0.1:<port>/v1`;
/// - `POST <prefix>/chat/completions` answers from the queue of [`EndpointBuilder::reply`] in
///   order; once the queue is empty, from the fallback, which by default is HTTP 500 with the body
///   `testkit: the script has no reply left for this request`;
/// - `GET <prefix>/models` answers from its own queue ([`EndpointBuilder::models_reply`]), then
///   with `{"object":"list","data":[…]}` listing the ids given to [`EndpointBuilder::models`]
///   (none by default);
/// - any other method or path answers 404 `testkit: no route for <METHOD> <path>`;
/// - every request is recorded, whatever the route.
pub struct EndpointBuilder {
    prefix: String,
    chat: VecDeque<Reply>,
    chat_fallback: Responder,
    models: VecDeque<Reply>,
    models_list: Value,
    strict_tool_pairing: bool,
    ip: std::net::IpAddr,
}

impl Default for EndpointBuilder {
    fn default() -> Self {
        Self {
            prefix: "/v1".to_owned(),
            chat: VecDeque::new(),
            chat_fallback: Arc::new(|_| {
                Reply::status(
                    500,
                    "testkit: the script has no reply left for this request",
                )
            }),
            models: VecDeque::new(),
            models_list: json!({ "object": "list", "data": [] }),
            strict_tool_pairing: false,
            ip: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        }
    }
}

impl fmt::Debug for EndpointBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointBuilder")
            .field("prefix", &self.prefix)
            .field("chat", &self.chat.len())
            .field("models", &self.models.len())
            .finish_non_exhaustive()
    }
}

impl EndpointBuilder {
    /// The local address to listen on instead of loopback (a bridge's gateway, so a container
    /// on that bridge reaches it); still a port the system picks.
    pub fn bind(mut self, ip: std::net::IpAddr) -> Self {
        self.ip = ip;
        self
    }

    /// The path the routes live under (`/v1` by default; `""` for none).
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.trim_end_matches('/').to_owned();
        self
    }

    /// Queues the answer to the next unanswered `POST …/chat/completions`.
    pub fn reply(mut self, reply: Reply) -> Self {
        self.chat.push_back(reply);
        self
    }

    /// Queues several chat answers in order.
    pub fn replies(mut self, replies: impl IntoIterator<Item = Reply>) -> Self {
        self.chat.extend(replies);
        self
    }

    /// The chat answer once the queue is empty, for every later request.
    pub fn fallback(mut self, reply: Reply) -> Self {
        self.chat_fallback = Arc::new(move |_| reply.clone());
        self
    }

    /// Chooses the chat answer from the request once the queue is empty.
    pub fn respond_with(
        mut self,
        responder: impl Fn(&RecordedRequest) -> Reply + Send + Sync + 'static,
    ) -> Self {
        self.chat_fallback = Arc::new(responder);
        self
    }

    /// The catalogue: `GET …/models` lists these ids (as [`crate::chunk::model_entry`]).
    pub fn models<S: AsRef<str>>(mut self, ids: impl IntoIterator<Item = S>) -> Self {
        let data: Vec<Value> = ids
            .into_iter()
            .map(|id| crate::chunk::model_entry(id.as_ref()))
            .collect();
        self.models_list = json!({ "object": "list", "data": data });
        self
    }

    /// The catalogue body, given whole (any JSON, such as an OpenRouter-style list).
    pub fn models_body(mut self, body: Value) -> Self {
        self.models_list = body;
        self
    }

    /// Queues the answer to the next `GET …/models` (errors, held or broken answers).
    pub fn models_reply(mut self, reply: Reply) -> Self {
        self.models.push_back(reply);
        self
    }

    /// Answers HTTP 400 (OpenAI's error shape, the sentence of [`crate::tool_pairing_fault`]) to
    /// a chat request whose assistant tool calls are not each followed by their result, as real
    /// servers do, without using a scripted reply. The request is still recorded.
    pub fn strict_tool_pairing(mut self) -> Self {
        self.strict_tool_pairing = true;
        self
    }

    /// Binds `127.0.0.1:0` (or the [`EndpointBuilder::bind`] address) and starts serving on a
    /// thread of its own.
    ///
    /// Callable from sync or async code. Fails only when the loopback socket cannot be bound or
    /// the thread cannot start.
    pub fn start(self) -> std::io::Result<Endpoint> {
        let listener = std::net::TcpListener::bind((self.ip, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            script: Mutex::new(Script {
                chat: self.chat,
                chat_fallback: self.chat_fallback,
                models: self.models,
                models_list: self.models_list,
            }),
            requests: Mutex::new(Vec::new()),
            arrived: Notify::new(),
            closed: Mutex::new(0),
            closed_notify: Notify::new(),
            prefix: self.prefix.clone(),
            strict_tool_pairing: self.strict_tool_pairing,
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let serve_shared = shared.clone();
        std::thread::Builder::new()
            .name(format!("testkit-endpoint-{}", addr.port()))
            .spawn(move || runtime.block_on(serve(listener, serve_shared, stop_rx)))?;
        Ok(Endpoint {
            addr,
            prefix: self.prefix,
            shared,
            stop: stop_tx,
        })
    }
}

struct Script {
    chat: VecDeque<Reply>,
    chat_fallback: Responder,
    models: VecDeque<Reply>,
    models_list: Value,
}

struct Shared {
    script: Mutex<Script>,
    requests: Mutex<Vec<RecordedRequest>>,
    arrived: Notify,
    closed: Mutex<usize>,
    closed_notify: Notify,
    prefix: String,
    strict_tool_pairing: bool,
}

// A poisoned lock only means another test thread panicked; the data is still usable.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running scripted endpoint. Dropping it stops the server and closes its connections.
pub struct Endpoint {
    addr: SocketAddr,
    prefix: String,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("addr", &self.addr)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

impl Endpoint {
    /// A builder with the defaults listed on [`EndpointBuilder`].
    pub fn builder() -> EndpointBuilder {
        EndpointBuilder::default()
    }

    /// Starts an endpoint that answers chat requests with these replies in order.
    pub fn with_replies(replies: impl IntoIterator<Item = Reply>) -> std::io::Result<Self> {
        Self::builder().replies(replies).start()
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL a client is configured with: `http://127.0.0.1:<port><prefix>`.
    pub fn base_url(&self) -> String {
        format!("http://{}{}", self.addr, self.prefix)
    }

    /// The full URL of the chat route (`<base>/chat/completions`).
    pub fn chat_url(&self) -> String {
        format!("{}/chat/completions", self.base_url())
    }

    /// Queues another chat reply after the ones already queued.
    pub fn push_reply(&self, reply: Reply) {
        lock(&self.shared.script).chat.push_back(reply);
    }

    /// Queues another `/models` reply.
    pub fn push_models_reply(&self, reply: Reply) {
        lock(&self.shared.script).models.push_back(reply);
    }

    /// How many queued chat replies are still unused.
    pub fn pending_replies(&self) -> usize {
        lock(&self.shared.script).chat.len()
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The chat requests received so far.
    pub fn chat_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.is_chat())
            .collect()
    }

    /// The JSON bodies of the chat requests received so far.
    pub fn chat_bodies(&self) -> Vec<Value> {
        self.chat_requests().into_iter().map(|r| r.json).collect()
    }

    /// Drops the requests recorded so far (a long benchmark that would otherwise hold every
    /// request it made); [`Endpoint::request_count`] starts again from zero.
    pub fn forget_requests(&self) {
        lock(&self.shared.requests).clear();
    }

    /// How many requests arrived (all routes).
    pub fn request_count(&self) -> usize {
        lock(&self.shared.requests).len()
    }

    /// Waits until at least `n` requests have arrived (all routes) and returns them.
    pub async fn wait_for_requests(&self, n: usize) -> Vec<RecordedRequest> {
        loop {
            let notified = self.shared.arrived.notified();
            {
                let reqs = lock(&self.shared.requests);
                if reqs.len() >= n {
                    return reqs.clone();
                }
            }
            notified.await;
        }
    }
}

impl Endpoint {
    /// How many client connections have ended (closed by either side, or broken by a script).
    pub fn closed_connections(&self) -> usize {
        *lock(&self.shared.closed)
    }

    /// Waits until at least `n` client connections have ended. A client that drops a response
    /// half-read closes its connection, so this is how a test sees a body released early.
    pub async fn wait_for_closed_connections(&self, n: usize) {
        loop {
            let notified = self.shared.closed_notify.notified();
            if *lock(&self.shared.closed) >= n {
                return;
            }
            notified.await;
        }
    }
}

async fn serve(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let router = Router::new().fallback(handle).with_state(shared.clone());
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|v| *v) => return,
        };
        let Ok((socket, _)) = accepted else { continue };
        without_nagle(&socket);
        let router = router.clone();
        let mut stop = stop.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            // A reply of `HangUp` fires this to drop the connection without an answer.
            let hang_up = Arc::new(Notify::new());
            let conn_hang_up = hang_up.clone();
            let service =
                hyper::service::service_fn(move |mut req: Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(HangUpHandle(hang_up.clone()));
                    let mut router = router.clone();
                    async move {
                        let resp: Result<Response<Body>, Infallible> =
                            router.call(req.map(Body::new)).await;
                        resp
                    }
                });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection(TokioIo::new(socket), service);
            tokio::select! {
                _ = conn => {}
                _ = conn_hang_up.notified() => {}
                _ = stop.wait_for(|v| *v) => {}
            }
            *lock(&shared.closed) += 1;
            shared.closed_notify.notify_waiters();
        });
    }
}

/// Turns Nagle's algorithm off on an accepted connection: a streamed chunk is a small write,
/// and with Nagle on it can wait for the client's delayed ACK (about 40 ms on Linux), which
/// would make every scripted turn look slow to the code under test.
fn without_nagle(socket: &tokio::net::TcpStream) {
    if let Err(e) = socket.set_nodelay(true) {
        tracing::debug!(error = %e, "could not set TCP_NODELAY on an accepted connection");
    }
}

#[derive(Clone)]
struct HangUpHandle(Arc<Notify>);

async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response<Body> {
    let hang_up = req.extensions().get::<HangUpHandle>().cloned();
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let recorded = RecordedRequest {
        method: parts.method.as_str().to_owned(),
        path: parts.uri.path().to_owned(),
        query: parts.uri.query().unwrap_or_default().to_owned(),
        headers: parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        json: serde_json::from_str(&text).unwrap_or(Value::Null),
        body: text,
    };
    let chat_path = format!("{}/chat/completions", shared.prefix);
    let models_path = format!("{}/models", shared.prefix);
    let reply = {
        let mut script = lock(&shared.script);
        let fault =
            (shared.strict_tool_pairing && recorded.method == "POST" && recorded.path == chat_path)
                .then(|| crate::pairing::tool_pairing_fault(&recorded.json))
                .flatten();
        if let Some(fault) = fault {
            Reply::api_error(400, &fault)
        } else if recorded.method == "POST" && recorded.path == chat_path {
            match script.chat.pop_front() {
                Some(r) => r,
                None => (script.chat_fallback)(&recorded),
            }
        } else if recorded.method == "GET" && recorded.path == models_path {
            match script.models.pop_front() {
                Some(r) => r,
                None => Reply::json(script.models_list.clone()),
            }
        } else {
            Reply::status(
                404,
                &format!(
                    "testkit: no route for {} {}",
                    recorded.method, recorded.path
                ),
            )
        }
    };
    lock(&shared.requests).push(recorded);
    shared.arrived.notify_waiters();
    answer(reply, hang_up).await
}

async fn answer(mut reply: Reply, hang_up: Option<HangUpHandle>) -> Response<Body> {
    loop {
        match reply {
            Reply::Held(gate, inner) => {
                gate.pass().await;
                reply = *inner;
            }
            Reply::HangUp => {
                if let Some(h) = hang_up {
                    h.0.notify_one();
                }
                // The connection task drops this future together with the connection.
                return futures::future::pending().await;
            }
            Reply::Body {
                status,
                content_type,
                body,
                headers,
            } => {
                return build(status, &content_type, &headers, Body::from(body));
            }
            Reply::Stream { frames, headers } => {
                let body = Body::from_stream(frame_stream(frames));
                return build(200, "text/event-stream", &headers, body);
            }
        }
    }
}

fn frame_stream(frames: Vec<Frame>) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::iter(frames).then(|frame| async move {
        // Returning Pending once makes hyper flush what it holds, so each frame leaves as its own
        // write and a cut comes after the bytes before it were sent.
        tokio::task::yield_now().await;
        match frame {
            Frame::Gate(gate) => {
                gate.pass().await;
                Ok(Bytes::new())
            }
            Frame::Cut => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "testkit: stream cut by the script",
            )),
            other => Ok(other.to_bytes().unwrap_or_default()),
        }
    })
    // Nothing is sent after a cut: the error ends the body and hyper closes the connection.
}

fn build(
    status: u16,
    content_type: &str,
    headers: &[(String, String)],
    body: Body,
) -> Response<Body> {
    let mut resp = Response::new(body);
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(content_type) {
        h.insert(axum::http::header::CONTENT_TYPE, v);
    }
    if content_type == "text/event-stream" {
        h.insert(
            axum::http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache"),
        );
    }
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) = (HeaderName::try_from(k.as_str()), HeaderValue::from_str(v)) {
            h.append(k, v);
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_nodelay() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local address");
        let (accepted, client) =
            tokio::join!(listener.accept(), tokio::net::TcpStream::connect(addr));
        let (socket, _) = accepted.expect("accept");
        let _client = client.expect("connect");
        // The kernel default is off, so this shows the helper is what turns it on.
        assert!(!socket.nodelay().expect("read TCP_NODELAY"));
        without_nagle(&socket);
        assert!(socket.nodelay().expect("read TCP_NODELAY"));
    }
}
