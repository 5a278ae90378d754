//! Messages, their parts, and the input of a run.

use crate::error::AgentError;
use crate::id::{Timestamp, new_id};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// Who a message is from, as a model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    /// Instructions.
    System,
    /// A person (or a runtime marker addressed to the model).
    User,
    /// The model.
    Assistant,
    /// A tool result.
    Tool,
}

/// What produced a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MessageSource {
    /// A person's input or a steer.
    Input,
    /// An assistant reply.
    Model,
    /// Tool results.
    Tool,
    /// A hook.
    Hook,
    /// A compaction summary.
    Summary,
    /// Written by the runtime: the compaction ask, the interrupt marker.
    System,
}

/// One message of a transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// The message id.
    pub id: String,
    /// Who it is from.
    pub role: Role,
    /// Its content, in order.
    pub parts: Vec<Part>,
    /// What produced it.
    pub source: MessageSource,
    /// When it was made.
    pub created_at: Timestamp,
    /// Only on summary messages: the ids the summary stands for, older summaries included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarizes: Option<Vec<String>>,
}

impl Message {
    /// A message with a fresh id and the current time.
    pub fn new(role: Role, source: MessageSource, parts: Vec<Part>) -> Message {
        Message {
            id: new_id(),
            role,
            parts,
            source,
            created_at: Timestamp::now(),
            summarizes: None,
        }
    }

    /// A `user` message from `input` holding one text part.
    pub fn user_text(text: impl Into<String>) -> Message {
        Message::new(Role::User, MessageSource::Input, vec![Part::text(text)])
    }

    /// An `assistant` message from `model` holding one text part.
    pub fn assistant_text(text: impl Into<String>) -> Message {
        Message::new(
            Role::Assistant,
            MessageSource::Model,
            vec![Part::text(text)],
        )
    }

    /// The same message with another id.
    pub fn with_id(mut self, id: impl Into<String>) -> Message {
        self.id = id.into();
        self
    }
}

/// A piece of a message, serialized with a `type` tag (`text`, `image`, `reasoning`, `toolCall`,
/// `toolResult`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Part {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image: exactly one of base64 `data` or `url`.
    Image {
        /// The media type, for example `image/png`.
        mime_type: String,
        /// The image bytes, base64.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        /// Where the image is.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
    },
    /// Model reasoning, ignored by [`text_of`]. Requests carry it only on the messages of the
    /// running tool loop (after the person's last message); the model adapter decides whether a
    /// provider is sent it.
    Reasoning {
        /// The reasoning text.
        text: String,
    },
    /// A call the model made.
    ToolCall(ToolCall),
    /// The answer to a call.
    ToolResult(ToolResult),
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Part {
        Part::Text { text: text.into() }
    }

    /// A reasoning part.
    pub fn reasoning(text: impl Into<String>) -> Part {
        Part::Reasoning { text: text.into() }
    }

    /// An image part carrying base64 data.
    pub fn image_data(mime_type: impl Into<String>, data: impl Into<String>) -> Part {
        Part::Image {
            mime_type: mime_type.into(),
            data: Some(data.into()),
            url: None,
        }
    }

    /// An image part pointing at a URL.
    pub fn image_url(mime_type: impl Into<String>, url: impl Into<String>) -> Part {
        Part::Image {
            mime_type: mime_type.into(),
            data: None,
            url: Some(url.into()),
        }
    }

    /// The `type` tag this part serializes with.
    pub fn kind(&self) -> &'static str {
        match self {
            Part::Text { .. } => "text",
            Part::Image { .. } => "image",
            Part::Reasoning { .. } => "reasoning",
            Part::ToolCall(_) => "toolCall",
            Part::ToolResult(_) => "toolResult",
        }
    }
}

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    /// The call id (minted when the provider gave none).
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The parse of `raw`; absent when `raw` is not JSON (JSON `null` parses and is present).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub input: Option<Value>,
    /// The exact argument string.
    pub raw: String,
}

impl ToolCall {
    /// A call from its raw argument string; `input` is its parse when it is JSON.
    pub fn from_raw(
        call_id: impl Into<String>,
        name: impl Into<String>,
        raw: impl Into<String>,
    ) -> ToolCall {
        let raw = raw.into();
        let input = serde_json::from_str(&raw).ok();
        ToolCall {
            call_id: call_id.into(),
            name: name.into(),
            input,
            raw,
        }
    }

    /// A call from a JSON value; `raw` is its serialization.
    pub fn from_input(
        call_id: impl Into<String>,
        name: impl Into<String>,
        input: Value,
    ) -> ToolCall {
        let raw = input.to_string();
        ToolCall {
            call_id: call_id.into(),
            name: name.into(),
            input: Some(input),
            raw,
        }
    }
}

/// The answer to a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// The call this answers.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// What the model reads (bounded, possibly changed by a hook).
    pub content: String,
    /// Whether this is an error result.
    pub is_error: bool,
}

/// Reads a field that is present as `Some`, even when it holds JSON `null`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// Joins the text parts of a message with no separator (reasoning is left out).
pub fn text_of(message: &Message) -> String {
    message
        .parts
        .iter()
        .filter_map(|part| match part {
            Part::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The tool-call parts of a message, in order.
pub fn tool_calls_of(message: &Message) -> Vec<&ToolCall> {
    message
        .parts
        .iter()
        .filter_map(|part| match part {
            Part::ToolCall(call) => Some(call),
            _ => None,
        })
        .collect()
}

/// The input of a run: a string (one text part) or a list of text and image parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Input {
    /// Plain text.
    Text(String),
    /// Text and image parts.
    Parts(Vec<Part>),
}

impl Input {
    /// The parts of the input message, or one sentence saying why the input is refused: only
    /// text and image parts are allowed, and an image has exactly one of `data` or `url`.
    pub fn into_parts(self) -> Result<Vec<Part>, AgentError> {
        match self {
            Input::Text(text) => Ok(vec![Part::Text { text }]),
            Input::Parts(parts) => {
                for (index, part) in parts.iter().enumerate() {
                    match part {
                        Part::Text { .. } => {}
                        Part::Image { data, url, .. } => {
                            if data.is_some() == url.is_some() {
                                return Err(AgentError::invalid_options(format!(
                                    "input part {index} is an image and must have exactly one of data or url"
                                )));
                            }
                        }
                        other => {
                            return Err(AgentError::invalid_options(format!(
                                "input part {index} is a {} part; input takes only text and image parts",
                                other.kind()
                            )));
                        }
                    }
                }
                Ok(parts)
            }
        }
    }
}

impl From<String> for Input {
    fn from(text: String) -> Self {
        Input::Text(text)
    }
}

impl From<&str> for Input {
    fn from(text: &str) -> Self {
        Input::Text(text.to_owned())
    }
}

impl From<Vec<Part>> for Input {
    fn from(parts: Vec<Part>) -> Self {
        Input::Parts(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parts_serialize_with_a_type_tag_in_camel_case() {
        let call = Part::ToolCall(ToolCall::from_raw("c1", "echo", "{\"text\":\"hi\"}"));
        assert_eq!(
            serde_json::to_value(&call).expect("json"),
            json!({"type": "toolCall", "callId": "c1", "name": "echo", "input": {"text": "hi"}, "raw": "{\"text\":\"hi\"}"})
        );
        let result = Part::ToolResult(ToolResult {
            call_id: "c1".into(),
            name: "echo".into(),
            content: "x".into(),
            is_error: false,
        });
        assert_eq!(
            serde_json::to_value(&result).expect("json"),
            json!({"type": "toolResult", "callId": "c1", "name": "echo", "content": "x", "isError": false})
        );
        let image = Part::image_data("image/png", "AAAA");
        assert_eq!(
            serde_json::to_value(&image).expect("json"),
            json!({"type": "image", "mimeType": "image/png", "data": "AAAA"})
        );
    }

    #[test]
    fn a_null_input_stays_present_and_a_missing_one_absent() {
        let with_null: Part = serde_json::from_value(
            json!({"type": "toolCall", "callId": "c", "name": "n", "input": null, "raw": "null"}),
        )
        .expect("part");
        assert_eq!(
            with_null,
            Part::ToolCall(ToolCall {
                call_id: "c".into(),
                name: "n".into(),
                input: Some(Value::Null),
                raw: "null".into()
            })
        );
        let round = serde_json::to_value(&with_null).expect("json");
        assert_eq!(round["input"], Value::Null);
        assert!(round.as_object().expect("object").contains_key("input"));
        let missing: Part = serde_json::from_value(
            json!({"type": "toolCall", "callId": "c", "name": "n", "raw": "{"}),
        )
        .expect("part");
        assert_eq!(missing, Part::ToolCall(ToolCall::from_raw("c", "n", "{")));
    }

    #[test]
    fn text_of_joins_text_and_skips_reasoning() {
        let message = Message::new(
            Role::Assistant,
            MessageSource::Model,
            vec![
                Part::reasoning("hmm"),
                Part::text("a"),
                Part::text("b"),
                Part::ToolCall(ToolCall::from_input("c", "t", json!({}))),
            ],
        );
        assert_eq!(text_of(&message), "ab");
        assert_eq!(tool_calls_of(&message).len(), 1);
        let json = serde_json::to_value(&message).expect("json");
        assert_eq!(json["source"], "model");
        assert!(json.get("createdAt").is_some());
        assert!(json.get("summarizes").is_none());
    }

    #[test]
    fn input_takes_text_and_images_only() {
        assert_eq!(
            Input::from("hi").into_parts().expect("parts"),
            vec![Part::text("hi")]
        );
        let both = Part::Image {
            mime_type: "image/png".into(),
            data: Some("A".into()),
            url: Some("u".into()),
        };
        let error = Input::Parts(vec![both]).into_parts().expect_err("refused");
        assert_eq!(
            error.message,
            "input part 0 is an image and must have exactly one of data or url"
        );
        let error = Input::Parts(vec![Part::reasoning("x")])
            .into_parts()
            .expect_err("refused");
        assert_eq!(
            error.message,
            "input part 0 is a reasoning part; input takes only text and image parts"
        );
    }
}
