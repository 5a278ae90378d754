//! Hooks: optional async callbacks around model and tool steps, and a synchronous event
//! observer. Every method has a default that changes nothing.

use crate::event::Event;
use crate::message::ToolCall;
use crate::model::{ModelReply, ModelRequest};
use crate::tool::{KvScopes, Tool};
use async_trait::async_trait;
use serde_json::Value;

/// What hooks and policies see of the run.
#[derive(Debug, Clone)]
pub struct RunInfo {
    /// The run id.
    pub run_id: String,
    /// The session id.
    pub session_id: String,
    /// The agent id.
    pub agent_id: String,
    /// The 1-based number of the current model step.
    pub step: u32,
    /// Key-value handles.
    pub kv: KvScopes,
}

/// What `before_model` decides.
#[derive(Debug, Clone)]
pub enum BeforeModel {
    /// Send this request (possibly changed).
    Continue(ModelRequest),
    /// Do not call the model; the run stops with reason `policy`.
    Abort {
        /// Why.
        reason: String,
    },
}

/// What `after_model` decides.
// The reply travels by value once per step; boxing it would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum AfterModel {
    /// Use this reply (possibly changed).
    Continue(ModelReply),
    /// Stop the run with reason `policy`; the reply's usage still counts.
    Abort {
        /// Why.
        reason: String,
    },
}

/// What `before_tool` decides about one call.
#[derive(Debug, Clone, PartialEq)]
pub enum BeforeTool {
    /// Nothing to add; the policy decides.
    Allow,
    /// Use this input instead (validated again, defaults filled).
    Modify {
        /// The new input.
        input: Value,
    },
    /// Refuse the call; the model reads the reason.
    Deny {
        /// Why.
        reason: String,
    },
    /// Ask a person first, optionally with a prompt.
    Approval {
        /// What to show the person.
        prompt: Option<String>,
    },
    /// Refuse the call and end the run after this batch (`stopped hook`).
    Stop {
        /// Why.
        reason: String,
    },
}

/// What `after_tool` makes of a result.
#[derive(Debug, Clone, PartialEq)]
pub struct AfterTool {
    /// The content the model reads.
    pub output: String,
    /// Overrides whether the result is an error.
    pub is_error: Option<bool>,
    /// Stops the run after this call, with this reason.
    pub stop: Option<String>,
}

impl AfterTool {
    /// Keeps the output as it is.
    pub fn keep(output: String) -> AfterTool {
        AfterTool {
            output,
            is_error: None,
            stop: None,
        }
    }
}

/// A hook's failure. The run fails `hook_error` with this message after the hook's name; an
/// `on_event` failure is only reported through the agent's `warn`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HookError {
    /// One sentence saying what went wrong.
    pub message: String,
}

impl HookError {
    /// A failure with this message.
    pub fn new(message: impl Into<String>) -> HookError {
        HookError {
            message: message.into(),
        }
    }
}

impl From<String> for HookError {
    fn from(message: String) -> HookError {
        HookError { message }
    }
}

impl From<&str> for HookError {
    fn from(message: &str) -> HookError {
        HookError::new(message)
    }
}

/// Callbacks around a run. An `Err` from an async method fails the run `hook_error` with the
/// message prefixed by the hook's name (`beforeModel: `, `afterModel: `, `beforeTool: `,
/// `afterTool: `).
#[async_trait]
pub trait Hooks: Send + Sync {
    /// Before each model call.
    async fn before_model(
        &self,
        request: ModelRequest,
        run: &RunInfo,
    ) -> Result<BeforeModel, HookError> {
        let _ = run;
        Ok(BeforeModel::Continue(request))
    }

    /// After each model reply.
    async fn after_model(&self, reply: ModelReply, run: &RunInfo) -> Result<AfterModel, HookError> {
        let _ = run;
        Ok(AfterModel::Continue(reply))
    }

    /// Before each call of a known tool whose input passed the schema.
    async fn before_tool(
        &self,
        call: &ToolCall,
        tool: &Tool,
        run: &RunInfo,
    ) -> Result<BeforeTool, HookError> {
        let _ = (call, tool, run);
        Ok(BeforeTool::Allow)
    }

    /// After each execution, with the bounded content.
    async fn after_tool(
        &self,
        call: &ToolCall,
        tool: &Tool,
        output: String,
        is_error: bool,
        run: &RunInfo,
    ) -> Result<AfterTool, HookError> {
        let _ = (call, tool, is_error, run);
        Ok(AfterTool::keep(output))
    }

    /// After each event is persisted and published. Must not block; an `Err` is reported through
    /// the agent's `warn` and otherwise ignored.
    fn on_event(&self, event: &Event) -> Result<(), HookError> {
        let _ = event;
        Ok(())
    }
}

/// Hooks that change nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHooks;

impl Hooks for NoHooks {}
