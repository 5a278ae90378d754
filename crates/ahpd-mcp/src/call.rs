//! One tool call: the request, its time limit, its cancellation (`notifications/cancelled`
//! reaches the server when the caller gives up), and the result read into text, structured
//! content and images.

use std::future::Future;
use std::time::Duration;

use rmcp::ServiceError;
use rmcp::model::CallToolRequestParams;
use serde_json::{Map, Value};

use crate::server::{Server, Status};

/// An image a tool returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// Its media type, e.g. `image/png`.
    pub mime_type: String,
    /// Its bytes, base64.
    pub data: String,
}

/// What a call gave back.
#[derive(Debug, Clone, PartialEq)]
pub struct CallOutput {
    /// The text blocks (and a note for each block that is not text or an image).
    pub text: String,
    /// The structured content, when the tool returned any.
    pub structured: Option<Value>,
    /// The image blocks.
    pub images: Vec<Image>,
    /// The tool reported an error (`isError`): the text says what.
    pub is_error: bool,
}

/// Why a call gave nothing back.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// The server is not ready.
    #[error("the MCP server {server} is not running ({status})")]
    NotRunning {
        /// The server's name.
        server: String,
        /// Its state word, with the reason when it failed.
        status: String,
    },
    /// No answer within the time limit; the server was told to cancel.
    #[error("the MCP server {server} did not answer within {seconds} s; the call was cancelled")]
    TimedOut {
        /// The server's name.
        server: String,
        /// The limit.
        seconds: f64,
    },
    /// The caller gave up (the turn was stopped); the server was told to cancel.
    #[error("the call was cancelled")]
    Cancelled,
    /// The server answered with a protocol error, or the connection failed.
    #[error("the MCP server {server} failed the call: {message}")]
    Failed {
        /// The server's name.
        server: String,
        /// What it said.
        message: String,
    },
}

impl Server {
    /// Calls `tool` with `arguments`; gives up at `timeout` (the entry's limit when `None`) or
    /// when `stop` resolves. Either way the server receives `notifications/cancelled`.
    pub async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        timeout: Option<Duration>,
        stop: impl Future<Output = ()>,
    ) -> Result<CallOutput, CallError> {
        let peer = self.peer.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let Some(peer) = peer else {
            let status = match self.state().status {
                Status::Failed(why) => format!("failed: {why}"),
                other => other.word().to_owned(),
            };
            return Err(CallError::NotRunning {
                server: self.name.clone(),
                status,
            });
        };
        let limit = timeout.unwrap_or(self.spec.call_timeout);
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        // Dropping the request future before its answer sends `notifications/cancelled`.
        let result = tokio::select! {
            r = peer.call_tool(params) => r,
            () = tokio::time::sleep(limit) => return Err(CallError::TimedOut {
                server: self.name.clone(),
                seconds: limit.as_secs_f64(),
            }),
            () = stop => return Err(CallError::Cancelled),
        };
        match result {
            Ok(result) => {
                let content = serde_json::to_value(&result.content).unwrap_or(Value::Null);
                Ok(read_content(
                    &content,
                    result.structured_content,
                    result.is_error.unwrap_or(false),
                ))
            }
            Err(error) => {
                if !matches!(error, ServiceError::McpError(_)) {
                    self.connection_broken();
                }
                Err(CallError::Failed {
                    server: self.name.clone(),
                    message: error.to_string(),
                })
            }
        }
    }
}

/// Reads content blocks from their wire form, which stays the same across SDK versions.
fn read_content(content: &Value, structured: Option<Value>, is_error: bool) -> CallOutput {
    let mut text = Vec::new();
    let mut images = Vec::new();
    for block in content.as_array().into_iter().flatten() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                if let Some(t) = block.get("text").and_then(Value::as_str) {
                    text.push(t.to_owned());
                }
            }
            Some("image") => {
                let mime = block.get("mimeType").and_then(Value::as_str);
                let data = block.get("data").and_then(Value::as_str);
                if let (Some(mime), Some(data)) = (mime, data) {
                    images.push(Image {
                        mime_type: mime.to_owned(),
                        data: data.to_owned(),
                    });
                }
            }
            Some("resource") => {
                let res = block.get("resource");
                let uri = res.and_then(|r| r.get("uri")).and_then(Value::as_str);
                match res.and_then(|r| r.get("text")).and_then(Value::as_str) {
                    Some(t) => text.push(t.to_owned()),
                    None => text.push(format!("[a binary resource: {}]", uri.unwrap_or("?"))),
                }
            }
            Some("resource_link") => {
                let uri = block.get("uri").and_then(Value::as_str).unwrap_or("?");
                text.push(format!("[a resource: {uri}]"));
            }
            Some(other) => text.push(format!("[{other} content, not shown]")),
            None => {}
        }
    }
    CallOutput {
        text: text.join("\n"),
        structured,
        images,
        is_error,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn blocks_read_into_text_and_images() {
        let out = read_content(
            &json!([
                {"type": "text", "text": "one"},
                {"type": "image", "mimeType": "image/png", "data": "iVBO"},
                {"type": "resource", "resource": {"uri": "file:///a", "text": "two"}},
                {"type": "audio", "mimeType": "audio/wav", "data": "UklG"}
            ]),
            Some(json!({"n": 1})),
            false,
        );
        assert_eq!(out.text, "one\ntwo\n[audio content, not shown]");
        assert_eq!(out.images.len(), 1);
        assert_eq!(out.structured, Some(json!({"n": 1})));
    }
}
