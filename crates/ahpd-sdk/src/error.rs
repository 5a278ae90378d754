//! Errors the host returns to its embedder and the JSON-RPC error it sends to clients.

use serde_json::Value;

/// JSON-RPC error codes the host uses (from the protocol; listed here so every module spells them once).
pub mod codes {
    /// The frame was not JSON.
    pub const PARSE_ERROR: i32 = -32700;
    /// The message is not a valid request, or it came at the wrong time.
    pub const INVALID_REQUEST: i32 = -32600;
    /// The host does not serve this method.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// The params do not fit the method.
    pub const INVALID_PARAMS: i32 = -32602;
    /// Something failed inside the host or a backend.
    pub const INTERNAL_ERROR: i32 = -32603;
    /// No such session or chat channel.
    pub const SESSION_NOT_FOUND: i32 = -32001;
    /// No agent with that provider id.
    pub const PROVIDER_NOT_FOUND: i32 = -32002;
    /// A session with that URI already exists.
    pub const SESSION_ALREADY_EXISTS: i32 = -32003;
    /// None of the offered protocol versions is supported.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32005;
    /// A resource does not exist.
    pub const NOT_FOUND: i32 = -32008;
    /// A resource lies outside what the host serves.
    pub const PERMISSION_DENIED: i32 = -32009;
}

/// A JSON-RPC error as sent to a client: a code, one sentence, optional data.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} (code {code})")]
pub struct RpcError {
    /// The JSON-RPC error code.
    pub code: i32,
    /// One sentence for the reader.
    pub message: String,
    /// Structured detail, when the protocol defines some.
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with a code and a message and no data.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// `-32602`: the params do not fit.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_PARAMS, message)
    }

    /// `-32600`: not a valid request now.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_REQUEST, message)
    }

    /// `-32601`: the method is not served.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            codes::METHOD_NOT_FOUND,
            format!("this host does not serve the method {method}"),
        )
    }

    /// `-32603`: an internal or backend failure.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL_ERROR, message)
    }

    /// `-32603`: a request waited on an agent or a port longer than the host allows.
    pub fn timed_out(what: &str, limit: std::time::Duration) -> Self {
        Self::new(
            codes::INTERNAL_ERROR,
            format!(
                "{what} did not finish within {}; the host stopped waiting",
                crate::util::human_duration(limit)
            ),
        )
        .with_data(serde_json::json!({"timeoutMs": limit.as_millis() as u64}))
    }

    /// `-32001`: no such session or chat.
    pub fn session_not_found(uri: &str) -> Self {
        Self::new(
            codes::SESSION_NOT_FOUND,
            format!("no session or chat is open at {uri}"),
        )
    }

    /// The same error with structured data attached.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// Errors the host returns to the program embedding it.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Binding or serving a listener failed.
    #[error("could not listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: String,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// A non-loopback listener was asked for without a token and without opting out.
    #[error(
        "refusing to listen on {addr} without a connection token: pass a token or explicitly choose to run without one"
    )]
    TokenRequired {
        /// The address asked for.
        addr: String,
    },
    /// Reading or writing the stdio stream failed.
    #[error("the stdio connection failed: {0}")]
    Stdio(#[source] std::io::Error),
    /// Two agents claimed one provider id.
    #[error("two agents claim the provider id {0}; provider ids must be unique")]
    DuplicateProvider(String),
    /// An extension claimed a scheme or method that does not start with `x-`.
    #[error("extension names must start with x-: {0}")]
    ExtensionName(String),
    /// The session store could not be opened.
    #[error(transparent)]
    SessionStore(#[from] crate::store::sessionstore::SessionStoreError),
}
