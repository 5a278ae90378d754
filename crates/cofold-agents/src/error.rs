//! The one error type of the runtime and the error summary that failed outcomes carry.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

/// What went wrong, as a stable machine-readable code (serialized in snake_case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// A bad agent, tool, capability, command, answer or configuration value.
    InvalidOptions,
    /// An event whose `seq` is not the run's last `seq` + 1.
    SeqGap,
    /// A write by a run that does not hold the session's claim, or by a superseded process.
    WriterMismatch,
    /// An unknown session, run, request, message or invocation; a wrong request id.
    NotFound,
    /// A taken session or run id; a message id already in the session.
    AlreadyExists,
    /// A request needs tools or images the model does not take.
    UnsupportedFeature,
    /// HTTP 401 or 403.
    Auth,
    /// HTTP 429 after the retries.
    RateLimit,
    /// HTTP 5xx after the retries; an error chunk in a stream.
    Server,
    /// No connection, no answer in time, a body that broke.
    Network,
    /// An answer of the wrong shape; another 4xx; a stream with no end; an empty summary.
    InvalidResponse,
    /// A model request stopped by the run's cancel.
    Aborted,
    /// A hook failed.
    HookError,
    /// A capability's `tools` or `instructions` failed.
    CapabilityError,
    /// Another run holds the session; a second hold of a run in one process.
    WriterBusy,
    /// Anything else (a store failure, a bug).
    Internal,
    /// A resumed run had died during a tool call.
    UncertainInvocation,
    /// A resumed run had died elsewhere, or left no outcome.
    Interrupted,
    /// Another process took this run over.
    Superseded,
    /// A command to a closed handle; a steer still queued when the run ends.
    NotRunning,
}

impl ErrorCode {
    /// Every code, in the order of the specification's table.
    pub const ALL: [ErrorCode; 20] = [
        ErrorCode::InvalidOptions,
        ErrorCode::SeqGap,
        ErrorCode::WriterMismatch,
        ErrorCode::NotFound,
        ErrorCode::AlreadyExists,
        ErrorCode::UnsupportedFeature,
        ErrorCode::Auth,
        ErrorCode::RateLimit,
        ErrorCode::Server,
        ErrorCode::Network,
        ErrorCode::InvalidResponse,
        ErrorCode::Aborted,
        ErrorCode::HookError,
        ErrorCode::CapabilityError,
        ErrorCode::WriterBusy,
        ErrorCode::Internal,
        ErrorCode::UncertainInvocation,
        ErrorCode::Interrupted,
        ErrorCode::Superseded,
        ErrorCode::NotRunning,
    ];

    /// The code as written on the wire, for example `invalid_options`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidOptions => "invalid_options",
            ErrorCode::SeqGap => "seq_gap",
            ErrorCode::WriterMismatch => "writer_mismatch",
            ErrorCode::NotFound => "not_found",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::UnsupportedFeature => "unsupported_feature",
            ErrorCode::Auth => "auth",
            ErrorCode::RateLimit => "rate_limit",
            ErrorCode::Server => "server",
            ErrorCode::Network => "network",
            ErrorCode::InvalidResponse => "invalid_response",
            ErrorCode::Aborted => "aborted",
            ErrorCode::HookError => "hook_error",
            ErrorCode::CapabilityError => "capability_error",
            ErrorCode::WriterBusy => "writer_busy",
            ErrorCode::Internal => "internal",
            ErrorCode::UncertainInvocation => "uncertain_invocation",
            ErrorCode::Interrupted => "interrupted",
            ErrorCode::Superseded => "superseded",
            ErrorCode::NotRunning => "not_running",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The runtime's error: a code, one sentence for the reader, and optional structured detail.
///
/// `status` and `retryable` are only set by model adapters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(rename_all = "camelCase")]
#[error("{message}")]
pub struct AgentError {
    /// The machine-readable code.
    pub code: ErrorCode,
    /// The sentence a person or a model reads.
    pub message: String,
    /// Structured context, for example `{ "capability": "broken" }`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
    /// The HTTP status a model adapter saw, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Whether a model adapter thinks trying again may help.
    #[serde(default)]
    pub retryable: bool,
}

impl AgentError {
    /// An error with a code and a message, no detail, not retryable.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        AgentError {
            code,
            message: message.into(),
            detail: None,
            status: None,
            retryable: false,
        }
    }

    /// An `invalid_options` error.
    pub fn invalid_options(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidOptions, message)
    }

    /// A `not_found` error.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    /// An `already_exists` error.
    pub fn already_exists(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::AlreadyExists, message)
    }

    /// An `internal` error.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    /// The same error with `detail` set.
    pub fn with_detail(mut self, detail: Value) -> Self {
        self.detail = Some(detail);
        self
    }

    /// The same error with an HTTP status.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// The same error marked retryable (or not).
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// The summary a failed outcome carries: code, message and detail.
    pub fn info(&self) -> ErrorInfo {
        ErrorInfo {
            code: self.code,
            message: self.message.clone(),
            detail: self.detail.clone(),
        }
    }

    /// The detail a failed outcome carries when the error came from a model adapter:
    /// `{ "name": "ModelError", "code", "message", "status"?, "retryable" }`.
    pub fn model_error_detail(&self) -> Value {
        let mut map = serde_json::Map::new();
        map.insert("name".into(), Value::from("ModelError"));
        map.insert("code".into(), Value::from(self.code.as_str()));
        map.insert("message".into(), Value::from(self.message.clone()));
        if let Some(status) = self.status {
            map.insert("status".into(), Value::from(status));
        }
        map.insert("retryable".into(), Value::from(self.retryable));
        Value::Object(map)
    }
}

/// The error summary a failed outcome carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorInfo {
    /// The machine-readable code.
    pub code: ErrorCode,
    /// The sentence a person or a model reads.
    pub message: String,
    /// Structured context, when there is some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
}

impl From<AgentError> for ErrorInfo {
    fn from(error: AgentError) -> Self {
        ErrorInfo {
            code: error.code,
            message: error.message,
            detail: error.detail,
        }
    }
}

impl From<ErrorInfo> for AgentError {
    fn from(info: ErrorInfo) -> Self {
        AgentError {
            code: info.code,
            message: info.message,
            detail: info.detail,
            status: None,
            retryable: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialize_as_their_wire_names() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_value(code).expect("serializes");
            assert_eq!(json, Value::from(code.as_str()));
        }
    }

    #[test]
    fn model_error_detail_has_the_fixed_shape() {
        let error = AgentError::new(ErrorCode::Auth, "401 from x: nope").with_status(401);
        let detail = error.model_error_detail();
        let keys: Vec<&str> = detail
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["name", "code", "message", "status", "retryable"]);
        assert_eq!(detail["name"], "ModelError");
    }
}
