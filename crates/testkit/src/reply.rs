//! What the scripted endpoint answers: a [`Reply`] per request, made of [`Frame`]s when it streams.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::watch;

/// A switch a test flips to let a held stream (or a held reply) go on.
///
/// The endpoint stops at a gate and writes nothing more until [`Gate::open`] is called, so a test
/// can observe a half-sent stream or cancel a request in flight without sleeping. A gate also
/// reports when the endpoint has reached it ([`Gate::reached`]). Once open, a gate stays open;
/// clones share the same state.
#[derive(Clone, Debug)]
pub struct Gate {
    open: Arc<watch::Sender<bool>>,
    reached: Arc<watch::Sender<bool>>,
}

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

impl Gate {
    /// A closed gate nobody has reached yet.
    pub fn new() -> Self {
        Self {
            open: Arc::new(watch::channel(false).0),
            reached: Arc::new(watch::channel(false).0),
        }
    }

    /// Lets everything waiting at this gate continue, now and later.
    pub fn open(&self) {
        self.open.send_replace(true);
    }

    /// Whether [`Gate::open`] was called.
    pub fn is_open(&self) -> bool {
        *self.open.borrow()
    }

    /// Resolves once the endpoint has arrived at this gate (immediately if it already has).
    pub async fn reached(&self) {
        let mut rx = self.reached.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = rx.wait_for(|v| *v).await;
    }

    /// Whether the endpoint has arrived at this gate.
    pub fn is_reached(&self) -> bool {
        *self.reached.borrow()
    }

    /// Marks the gate reached and waits until it is open. Used by the endpoint.
    pub(crate) async fn pass(&self) {
        self.reached.send_replace(true);
        let mut rx = self.open.subscribe();
        let _ = rx.wait_for(|v| *v).await;
    }
}

/// One step of a streamed body.
#[derive(Clone, Debug)]
pub enum Frame {
    /// A JSON chunk, written as `data: <compact json>\n\n` in one write.
    Chunk(Value),
    /// Bytes written exactly as given, in one write (malformed lines, comments, CRLF endings, an
    /// event split across writes).
    Raw(Bytes),
    /// The terminator `data: [DONE]\n\n`.
    Done,
    /// Stop here until the gate opens.
    Gate(Gate),
    /// Break the body: the connection is closed without finishing the chunked encoding, so the
    /// client sees a body that broke off.
    Cut,
}

impl Frame {
    /// A raw frame from text.
    pub fn raw(text: impl Into<String>) -> Self {
        Frame::Raw(Bytes::from(text.into()))
    }

    /// A raw frame from bytes (may hold invalid UTF-8 or half a character).
    pub fn bytes(bytes: impl Into<Bytes>) -> Self {
        Frame::Raw(bytes.into())
    }

    /// The bytes this frame writes, or `None` for the control frames (gate, cut).
    pub fn to_bytes(&self) -> Option<Bytes> {
        match self {
            Frame::Chunk(v) => Some(Bytes::from(format!("data: {v}\n\n"))),
            Frame::Raw(b) => Some(b.clone()),
            Frame::Done => Some(Bytes::from_static(b"data: [DONE]\n\n")),
            Frame::Gate(_) | Frame::Cut => None,
        }
    }
}

impl From<Value> for Frame {
    fn from(v: Value) -> Self {
        Frame::Chunk(v)
    }
}

/// How one request is answered.
#[derive(Clone, Debug)]
pub enum Reply {
    /// A `200 text/event-stream` body written frame by frame.
    Stream {
        /// The frames, in order.
        frames: Vec<Frame>,
        /// Extra response headers.
        headers: Vec<(String, String)>,
    },
    /// A complete body with a status and content type.
    Body {
        /// The HTTP status.
        status: u16,
        /// The `content-type` header.
        content_type: String,
        /// The body, sent whole with a `content-length`.
        body: Bytes,
        /// Extra response headers.
        headers: Vec<(String, String)>,
    },
    /// Close the connection without answering anything (the client's send fails).
    HangUp,
    /// Wait at the gate before answering (nothing, not even headers, is sent before it opens).
    Held(Gate, Box<Reply>),
}

impl Reply {
    /// A streamed reply: the frames as given, then `data: [DONE]` unless the frames already end
    /// with [`Frame::Done`] or a [`Frame::Cut`]. Use [`Reply::stream_exact`] to send no terminator.
    pub fn stream<I, F>(frames: I) -> Self
    where
        I: IntoIterator<Item = F>,
        F: Into<Frame>,
    {
        let mut frames: Vec<Frame> = frames.into_iter().map(Into::into).collect();
        if !matches!(frames.last(), Some(Frame::Done | Frame::Cut)) {
            frames.push(Frame::Done);
        }
        Reply::Stream {
            frames,
            headers: Vec::new(),
        }
    }

    /// A streamed reply of exactly these frames: no `[DONE]` is added (a stream that just ends).
    pub fn stream_exact<I, F>(frames: I) -> Self
    where
        I: IntoIterator<Item = F>,
        F: Into<Frame>,
    {
        Reply::Stream {
            frames: frames.into_iter().map(Into::into).collect(),
            headers: Vec::new(),
        }
    }

    /// A typical streamed answer of `text`: a role chunk, the text in pieces of up to 8
    /// characters, `finish_reason: "stop"`, a usage chunk (10 prompt tokens, 1 per piece), and
    /// `[DONE]`.
    pub fn text_stream(text: &str) -> Self {
        let pieces = crate::chunk::pieces(text, 8);
        let mut frames = vec![Frame::Chunk(crate::chunk::role())];
        frames.extend(pieces.iter().map(|p| Frame::Chunk(crate::chunk::text(p))));
        frames.push(Frame::Chunk(crate::chunk::finish("stop")));
        frames.push(Frame::Chunk(crate::chunk::usage(10, pieces.len() as u64)));
        Reply::stream(frames)
    }

    /// A `200 application/json` reply.
    pub fn json(body: Value) -> Self {
        Reply::json_status(200, body)
    }

    /// A JSON reply with any status.
    pub fn json_status(status: u16, body: Value) -> Self {
        Reply::Body {
            status,
            content_type: "application/json".to_owned(),
            body: Bytes::from(body.to_string()),
            headers: Vec::new(),
        }
    }

    /// A non-streaming `chat.completion` whose message is `text` (finish `stop`, usage 10 + 1).
    pub fn completion_text(text: &str) -> Self {
        Reply::json(crate::chunk::completion(
            serde_json::json!({ "role": "assistant", "content": text }),
            "stop",
        ))
    }

    /// A plain-text reply with any status, such as `Reply::status(401, "nope")`.
    pub fn status(status: u16, body: &str) -> Self {
        Reply::Body {
            status,
            content_type: "text/plain; charset=utf-8".to_owned(),
            body: Bytes::from(body.to_owned()),
            headers: Vec::new(),
        }
    }

    /// An error in OpenAI's shape: `{"error":{"message","type","code"}}` with the status.
    pub fn api_error(status: u16, message: &str) -> Self {
        let kind = match status {
            401 | 403 => "authentication_error",
            429 => "rate_limit_exceeded",
            s if s >= 500 => "server_error",
            _ => "invalid_request_error",
        };
        Reply::json_status(
            status,
            serde_json::json!({
                "error": { "message": message, "type": kind, "param": null, "code": kind }
            }),
        )
    }

    /// Holds this reply until `gate` opens.
    pub fn held(self, gate: &Gate) -> Self {
        Reply::Held(gate.clone(), Box::new(self))
    }

    /// Adds a response header (ignored by [`Reply::HangUp`]; applied inside [`Reply::Held`]).
    pub fn header(mut self, name: &str, value: &str) -> Self {
        match &mut self {
            Reply::Stream { headers, .. } | Reply::Body { headers, .. } => {
                headers.push((name.to_owned(), value.to_owned()));
            }
            Reply::HangUp => {}
            Reply::Held(gate, inner) => {
                return Reply::Held(
                    gate.clone(),
                    Box::new((**inner).clone().header(name, value)),
                );
            }
        }
        self
    }
}
