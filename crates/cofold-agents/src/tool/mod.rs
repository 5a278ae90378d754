//! The tool contract: a definition with a JSON Schema input, declared effects, optional subject,
//! written-path and preview functions, and a handler run with a [`ToolContext`].

use crate::error::AgentError;
use crate::id::is_valid_name;
use crate::model::ModelToolDefinition;
use crate::question::Question;
use crate::schema::{Issue, Schema};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

mod context;
mod preview;

pub use crate::abort::{AbortController, AbortReason, AbortSignal};
pub use context::{Kv, KvScopes, Resources, ToolContext};
pub use preview::{FileChange, Preview, PreviewFn};

/// What a tool's calls may do; policies and permission modes decide from these.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolEffects {
    /// It reads something (a file, a folder); modes judge the read's target.
    #[serde(default)]
    pub reads: bool,
    /// A call can change something.
    #[serde(default)]
    pub writes: bool,
    /// It talks to the network.
    #[serde(default)]
    pub network: bool,
    /// What the default policy asks about before running.
    #[serde(default)]
    pub destructive: bool,
}

/// A function from validated input to the string rules match against.
pub type SubjectFn = Arc<dyn Fn(&Value) -> Option<String> + Send + Sync>;
/// A function from validated input to the absolute path of the one file a call writes.
pub type WritesFn = Arc<dyn Fn(&Value) -> Option<PathBuf> + Send + Sync>;

/// Runs a tool call.
#[async_trait]
pub trait ToolHandler: Send + Sync {
    /// Executes one call with validated input. `Ok` is what the model reads; `Err(Failed)` an
    /// error result; `Err(NeedsInput)` pauses the run for answers.
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError>;
}

/// A handler made from an async closure; see [`handler_fn`].
struct FnHandler<F>(F);

#[async_trait]
impl<F, Fut> ToolHandler for FnHandler<F>
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send,
{
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        (self.0)(input, ctx).await
    }
}

/// Wraps an async closure `|input, ctx| async { … }` as a [`ToolHandler`].
pub fn handler_fn<F, Fut>(f: F) -> Arc<dyn ToolHandler>
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    Arc::new(FnHandler(f))
}

/// What a tool hands back: the text the model reads and optional detail kept on the step.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// The text the model reads.
    pub content: String,
    /// Structured detail kept on the step record, never shown to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
}

impl ToolOutput {
    /// Output with content and detail.
    pub fn with_detail(content: impl Into<String>, detail: Value) -> ToolOutput {
        ToolOutput {
            content: content.into(),
            detail: Some(detail),
        }
    }
}

impl From<String> for ToolOutput {
    fn from(content: String) -> Self {
        ToolOutput {
            content,
            detail: None,
        }
    }
}

impl From<&str> for ToolOutput {
    fn from(content: &str) -> Self {
        ToolOutput {
            content: content.to_owned(),
            detail: None,
        }
    }
}

/// Why a tool call did not produce a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// A refusal or failure, as one sentence the model reads.
    #[error("{message}")]
    Failed {
        /// The sentence.
        message: String,
        /// A name for the kind of failure (the step's `original.detail.name`; `Error` when absent).
        name: Option<String>,
    },
    /// Pause the run until a person answers these questions.
    #[error("the tool needs answers to {} question(s) before it can go on", questions.len())]
    NeedsInput {
        /// The questions to ask.
        questions: Vec<Question>,
    },
}

impl ToolError {
    /// A failure whose message is `error`'s display text.
    pub fn failed(error: impl fmt::Display) -> ToolError {
        ToolError::Failed {
            message: error.to_string(),
            name: None,
        }
    }

    /// A failure with a name for its kind.
    pub fn failed_named(name: impl Into<String>, error: impl fmt::Display) -> ToolError {
        ToolError::Failed {
            message: error.to_string(),
            name: Some(name.into()),
        }
    }

    /// Pauses the run for answers to `questions`.
    pub fn pause_for_input(questions: Vec<Question>) -> ToolError {
        ToolError::NeedsInput { questions }
    }
}

/// Pauses the run for answers to `questions` (the same as [`ToolError::pause_for_input`]).
pub fn pause_for_input(questions: Vec<Question>) -> ToolError {
    ToolError::NeedsInput { questions }
}

impl From<String> for ToolError {
    fn from(message: String) -> Self {
        ToolError::Failed {
            message,
            name: None,
        }
    }
}

impl From<&str> for ToolError {
    fn from(message: &str) -> Self {
        ToolError::Failed {
            message: message.to_owned(),
            name: None,
        }
    }
}

impl From<std::io::Error> for ToolError {
    fn from(error: std::io::Error) -> Self {
        ToolError::failed(error)
    }
}

/// Everything a tool is made from.
#[derive(Clone)]
pub struct ToolDef {
    /// The name the model calls it by; matches `^[A-Za-z0-9_-]{1,64}$`.
    pub name: String,
    /// What it does, for the model; not blank.
    pub description: String,
    /// The JSON Schema of its input; top-level `"type": "object"`.
    pub input: Value,
    /// What its calls may do.
    pub effects: ToolEffects,
    /// The string rules match against, from validated input.
    pub subject: Option<SubjectFn>,
    /// The absolute path of the one file a call writes, from validated input.
    pub writes: Option<WritesFn>,
    /// What a call with validated input would do, worked out without doing it.
    pub preview: Option<PreviewFn>,
    /// Runs calls.
    pub handler: Arc<dyn ToolHandler>,
}

impl ToolDef {
    /// A definition with no effects, no subject and no written path.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input: Value,
        handler: Arc<dyn ToolHandler>,
    ) -> ToolDef {
        ToolDef {
            name: name.into(),
            description: description.into(),
            input,
            effects: ToolEffects::default(),
            subject: None,
            writes: None,
            preview: None,
            handler,
        }
    }

    /// The same definition with these effects.
    pub fn effects(mut self, effects: ToolEffects) -> ToolDef {
        self.effects = effects;
        self
    }

    /// The same definition with a subject function.
    pub fn subject(
        mut self,
        f: impl Fn(&Value) -> Option<String> + Send + Sync + 'static,
    ) -> ToolDef {
        self.subject = Some(Arc::new(f));
        self
    }

    /// The same definition with a written-path function.
    pub fn writes(
        mut self,
        f: impl Fn(&Value) -> Option<PathBuf> + Send + Sync + 'static,
    ) -> ToolDef {
        self.writes = Some(Arc::new(f));
        self
    }

    /// The same definition with a preview function. It must reach its answer by the same code
    /// the handler runs, so what a person approves is what the call does.
    pub fn preview(mut self, f: impl Fn(&Value) -> Preview + Send + Sync + 'static) -> ToolDef {
        self.preview = Some(Arc::new(f));
        self
    }
}

impl fmt::Debug for ToolDef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolDef")
            .field("name", &self.name)
            .field("effects", &self.effects)
            .field("subject", &self.subject.is_some())
            .field("writes", &self.writes.is_some())
            .field("preview", &self.preview.is_some())
            .finish_non_exhaustive()
    }
}

/// The `source` of a tool given to an agent directly.
pub const AGENT_SOURCE: &str = "agent";

/// A checked tool: immutable and cheap to clone.
#[derive(Clone)]
pub struct Tool {
    def: Arc<ToolDef>,
    schema: Schema,
    source: Arc<str>,
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.def.name)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Tool {
    /// Checks a definition: the name pattern, a non-blank description, a top-level
    /// `"type": "object"` input, then the schema (`invalid_options` with one sentence each).
    pub fn new(def: ToolDef) -> Result<Tool, AgentError> {
        if !is_valid_name(&def.name) {
            return Err(AgentError::invalid_options(format!(
                "tool name \"{}\" must be 1 to 64 letters, digits, underscores or hyphens",
                def.name
            )));
        }
        if def.description.trim().is_empty() {
            return Err(AgentError::invalid_options(format!(
                "tool \"{}\" needs a description",
                def.name
            )));
        }
        if def.input.get("type").and_then(Value::as_str) != Some("object") {
            return Err(AgentError::invalid_options(format!(
                "tool \"{}\": its input schema must have \"type\": \"object\" at the top",
                def.name
            )));
        }
        let schema = Schema::compile(&def.input)
            .map_err(|error| error.with_detail(serde_json::json!({ "tool": def.name })))?;
        Ok(Tool {
            def: Arc::new(def),
            schema,
            source: Arc::from(AGENT_SOURCE),
        })
    }

    /// The tool name.
    pub fn name(&self) -> &str {
        &self.def.name
    }

    /// The description the model reads.
    pub fn description(&self) -> &str {
        &self.def.description
    }

    /// The input schema as given.
    pub fn input(&self) -> &Value {
        &self.def.input
    }

    /// The compiled input schema.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// The declared effects.
    pub fn effects(&self) -> ToolEffects {
        self.def.effects
    }

    /// The whole definition.
    pub fn def(&self) -> &ToolDef {
        &self.def
    }

    /// `agent`, or the id of the capability that contributed the tool.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The same tool with another `source`.
    pub fn with_source(&self, source: &str) -> Tool {
        Tool {
            def: self.def.clone(),
            schema: self.schema.clone(),
            source: Arc::from(source),
        }
    }

    /// Whether the tool declares a subject function.
    pub fn has_subject(&self) -> bool {
        self.def.subject.is_some()
    }

    /// The subject of a call with validated input; `None` when the tool has none.
    pub fn subject(&self, input: &Value) -> Option<String> {
        self.def.subject.as_ref().and_then(|f| f(input))
    }

    /// Whether the tool declares a written-path function.
    pub fn has_writes(&self) -> bool {
        self.def.writes.is_some()
    }

    /// The path a call with validated input writes; `None` when the tool has no such function or
    /// the input names no file.
    pub fn writes(&self, input: &Value) -> Option<PathBuf> {
        self.def.writes.as_ref().and_then(|f| f(input))
    }

    /// Whether the tool can describe a call before it runs.
    pub fn has_preview(&self) -> bool {
        self.def.preview.is_some()
    }

    /// What a call with validated input would do; `None` when the tool offers no preview. The
    /// function may read files, so callers on an async runtime run it on the blocking pool.
    pub fn preview(&self, input: &Value) -> Option<Preview> {
        self.def.preview.as_ref().map(|f| f(input))
    }

    /// Validates input against the schema, returning it with defaults filled, or every issue.
    pub fn validate(&self, input: &Value) -> Result<Value, Vec<Issue>> {
        self.schema.validate(input)
    }

    /// Runs the handler.
    pub async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        self.def.handler.execute(input, ctx).await
    }

    /// What a model request lists: `{ "name", "description", "input" }` in that order.
    pub fn model_definition(&self) -> ModelToolDefinition {
        ModelToolDefinition {
            name: self.def.name.clone(),
            description: self.def.description.clone(),
            input: self.schema.as_value().clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_errors_build_from_error_text() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        assert_eq!(
            ToolError::from(io),
            ToolError::Failed {
                message: "no such file".into(),
                name: None
            }
        );
        assert_eq!(ToolError::from("nope").to_string(), "nope");
        assert!(matches!(
            pause_for_input(vec![]),
            ToolError::NeedsInput { .. }
        ));
    }
}
