//! The words runs, stored records and events share: where a run stands, what a paused run waits
//! for, and a refused call. They sit below the store, the events and the policy so that each of
//! those can name them without importing the others.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a run stands, on its record and on its handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// The loop is working (or the process died while it was).
    Running,
    /// Finished with a final message.
    Completed,
    /// Paused on a pending request.
    Awaiting,
    /// Stopped by a limit, a hook or the policy.
    Stopped,
    /// Cancelled by the caller.
    Cancelled,
    /// Ended by an error.
    Failed,
}

impl RunStatus {
    /// True for a run that will not move again by itself: neither `running` nor `awaiting`.
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunStatus::Running | RunStatus::Awaiting)
    }

    /// The status as written on disk and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Awaiting => "awaiting",
            RunStatus::Stopped => "stopped",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Failed => "failed",
        }
    }
}

/// What a pending request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// A person approves or denies a tool call.
    Approval,
    /// A person answers questions.
    Input,
}

/// Who refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DenialBy {
    /// Unknown tool, arguments not JSON, schema failure, an invalid hook change.
    Invalid,
    /// A `before_tool` deny or stop.
    Hook,
    /// A `Deny` decision (rule or mode).
    Policy,
    /// A person's refusal, a declined question, the automatic deny of a cancel while waiting.
    User,
    /// Calls refused by `maxToolCalls`.
    Limit,
}

/// One refused call, as the run's denials record keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Denial {
    /// The call id.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The model's arguments as proposed (absent when not JSON), or the validated input of a
    /// person's refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// Why.
    pub reason: String,
    /// Who refused.
    pub by: DenialBy,
}
