//! Model contracts: what a run asks of a model, what it gets back, and the adapter and provider
//! traits that hosts implement. The run loop never calls a provider; hosts do.

use crate::abort::AbortSignal;
use crate::error::AgentError;
use crate::message::Message;
use async_trait::async_trait;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// What a model takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelFeatures {
    /// Tool definitions and tool calls.
    #[serde(default)]
    pub tools: bool,
    /// Streamed replies.
    #[serde(default)]
    pub streaming: bool,
    /// Image parts in input.
    #[serde(default)]
    pub images: bool,
    /// Structured output (declared only; no request mapping).
    #[serde(default)]
    pub structured_output: bool,
    /// Reasoning effort and reasoning output.
    #[serde(default)]
    pub reasoning: bool,
}

/// A reasoning effort a provider may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    /// `minimal`.
    Minimal,
    /// `low`.
    Low,
    /// `medium`.
    Medium,
    /// `high`.
    High,
    /// `xhigh`.
    Xhigh,
    /// `max`.
    Max,
}

impl ReasoningEffort {
    /// Every effort, from least to most.
    pub const ALL: [ReasoningEffort; 6] = [
        ReasoningEffort::Minimal,
        ReasoningEffort::Low,
        ReasoningEffort::Medium,
        ReasoningEffort::High,
        ReasoningEffort::Xhigh,
        ReasoningEffort::Max,
    ];

    /// The name as sent to a provider.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
            ReasoningEffort::Xhigh => "xhigh",
            ReasoningEffort::Max => "max",
        }
    }

    /// The effort named `name`, if it is one.
    pub fn parse(name: &str) -> Option<ReasoningEffort> {
        ReasoningEffort::ALL
            .into_iter()
            .find(|effort| effort.as_str() == name)
    }
}

/// Reasoning settings of a request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningParams {
    /// How hard to think.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<ReasoningEffort>,
    /// A token budget for reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// Sampling and length settings of a request; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelParams {
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// The most tokens the reply may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    /// A sampling seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// Reasoning settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningParams>,
}

impl ModelParams {
    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        *self == ModelParams::default()
    }
}

/// Tokens a model step used. `input_tokens` counts every prompt token, cached ones included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    pub input_tokens: u64,
    /// Reply tokens.
    pub output_tokens: u64,
    /// Prompt tokens read from a cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Prompt tokens written to a cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
    /// Reasoning tokens (part of the output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

impl Usage {
    /// Usage with only input and output counts.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        }
    }
}

/// Prices per million tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelPricing {
    /// Per million prompt tokens.
    pub input_per_million: f64,
    /// Per million reply tokens.
    pub output_per_million: f64,
    /// Per million cached prompt tokens read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_per_million: Option<f64>,
    /// Per million prompt tokens written to a cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_million: Option<f64>,
    /// Always `USD`.
    pub currency: String,
}

impl ModelPricing {
    /// USD prices for input and output.
    pub fn usd(input_per_million: f64, output_per_million: f64) -> ModelPricing {
        ModelPricing {
            input_per_million,
            output_per_million,
            cache_read_per_million: None,
            cache_write_per_million: None,
            currency: "USD".into(),
        }
    }
}

/// Why a reply ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end.
    Stop,
    /// The model called tools.
    ToolCalls,
    /// The length limit.
    Length,
    /// A content filter.
    ContentFilter,
    /// Anything else.
    Other,
}

/// A tool as a model request lists it: `{ "name", "description", "input" }` in that order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelToolDefinition {
    /// The tool name.
    pub name: String,
    /// The description.
    pub description: String,
    /// The input JSON Schema.
    pub input: Value,
}

/// One request to a model. The signal is never serialized.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelRequest {
    /// The system prompt.
    pub instructions: String,
    /// The transcript to send.
    pub messages: Vec<Message>,
    /// The tools on offer.
    pub tools: Vec<ModelToolDefinition>,
    /// Sampling settings.
    #[serde(default)]
    pub params: ModelParams,
    /// A provider cache key (the session id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_key: Option<String>,
    /// Fires when the run is cancelled.
    #[serde(skip)]
    pub signal: AbortSignal,
}

impl PartialEq for ModelRequest {
    fn eq(&self, other: &Self) -> bool {
        self.instructions == other.instructions
            && self.messages == other.messages
            && self.tools == other.tools
            && self.params == other.params
            && self.cache_key == other.cache_key
    }
}

/// A model's reply: an assistant message (source `model`) holding only reasoning, text and
/// tool-call parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelReply {
    /// The assistant message.
    pub message: Message,
    /// Tokens used.
    pub usage: Usage,
    /// Why it ended.
    pub finish: FinishReason,
    /// The provider's own answer, for debugging and the `afterModel` hook (a streamed reply's is
    /// the list of its chunks' data, as text); never stored nor sent back, and dropped by the run
    /// once the hook has seen it.
    #[serde(skip)]
    pub raw: Option<Value>,
}

/// One event of a streamed reply. A stream must end with `Done`.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelStreamEvent {
    /// A fragment of reply text.
    TextDelta {
        /// The fragment.
        text: String,
    },
    /// A fragment of reasoning.
    ReasoningDelta {
        /// The fragment.
        text: String,
    },
    /// A fragment of a tool call's arguments.
    ToolCallDelta {
        /// Which call of the reply.
        index: u32,
        /// The call id, on the first fragment.
        call_id: Option<String>,
        /// The tool name, on the first fragment.
        name: Option<String>,
        /// The argument fragment.
        arguments: String,
    },
    /// The whole reply.
    Done {
        /// The reply.
        reply: ModelReply,
    },
}

/// A model a run talks to.
#[async_trait]
pub trait ModelAdapter: Send + Sync {
    /// The adapter id, for example `openai-compat:m`.
    fn id(&self) -> &str;
    /// The provider's model id.
    fn model_id(&self) -> &str;
    /// What the model takes.
    fn features(&self) -> ModelFeatures;
    /// Prices, when known.
    fn pricing(&self) -> Option<ModelPricing>;
    /// One whole reply.
    async fn complete(&self, request: ModelRequest) -> Result<ModelReply, AgentError>;
    /// A streamed reply, when the adapter streams.
    fn stream(
        &self,
        request: ModelRequest,
    ) -> Option<BoxStream<'static, Result<ModelStreamEvent, AgentError>>> {
        let _ = request;
        None
    }
}

/// Options of [`ModelProvider::list_models`].
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// Stops the listing when fired.
    pub signal: Option<AbortSignal>,
    /// Gives up after this long.
    pub timeout: Option<Duration>,
}

/// Which model to make an adapter for, with optional overrides.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelSpec {
    /// The provider's model id.
    pub id: String,
    /// Features, overriding the provider's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<ModelFeatures>,
    /// Request settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<ModelParams>,
    /// Prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pricing: Option<ModelPricing>,
}

impl ModelSpec {
    /// A spec naming only the model.
    pub fn new(id: impl Into<String>) -> ModelSpec {
        ModelSpec {
            id: id.into(),
            ..ModelSpec::default()
        }
    }
}

/// A catalogue entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    /// The provider's model id.
    pub id: String,
    /// A display name.
    pub name: String,
    /// What it takes.
    pub features: ModelFeatures,
    /// The context window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u64>,
    /// The longest reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// Prices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pricing: Option<ModelPricing>,
}

/// A source of models (an endpoint with a key).
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// The provider id.
    fn id(&self) -> &str;
    /// The catalogue.
    async fn list_models(&self, options: ListOptions) -> Result<Vec<ModelInfo>, AgentError>;
    /// An adapter for one model; synchronous, looks nothing up.
    fn model(&self, spec: ModelSpec) -> Arc<dyn ModelAdapter>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wire_names_are_exact() {
        assert_eq!(
            serde_json::to_value(FinishReason::ToolCalls).expect("json"),
            json!("tool_calls")
        );
        assert_eq!(
            serde_json::to_value(FinishReason::ContentFilter).expect("json"),
            json!("content_filter")
        );
        let names: Vec<Value> = ReasoningEffort::ALL
            .iter()
            .map(|e| serde_json::to_value(e).expect("json"))
            .collect();
        assert_eq!(
            names,
            [
                json!("minimal"),
                json!("low"),
                json!("medium"),
                json!("high"),
                json!("xhigh"),
                json!("max")
            ]
        );
        let features = serde_json::to_value(ModelFeatures {
            structured_output: true,
            ..ModelFeatures::default()
        })
        .expect("json");
        assert_eq!(features["structuredOutput"], true);
    }

    #[test]
    fn a_request_serializes_without_its_signal() {
        let request = ModelRequest {
            instructions: "be brief".into(),
            cache_key: Some("s".into()),
            ..ModelRequest::default()
        };
        let json = serde_json::to_value(&request).expect("json");
        assert_eq!(
            json,
            json!({"instructions": "be brief", "messages": [], "tools": [], "params": {}, "cacheKey": "s"})
        );
    }
}
