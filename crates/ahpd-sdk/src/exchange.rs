//! What a backend asks of the host and what comes back: approvals and their outcomes,
//! questions' outcomes, calls of tools a client runs, and the secrets clients push.

use std::collections::HashMap;

use ahp_types::common::{JsonObject, StringOrMarkdown};
use ahp_types::state::{
    ChatInputAnswer, ChatInputResponseKind, FileEditCollection, ToolCallCancellationReason,
    ToolCallRiskAssessment, ToolInput,
};

/// A request for a person's approval of one tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    /// The turn the call belongs to.
    pub turn_id: String,
    /// The backend's own id of the call (already started with `chat/toolCallStart`).
    pub tool_call_id: String,
    /// What the call will do, shown to the person.
    pub invocation_message: StringOrMarkdown,
    /// The call's input, when it is worth showing.
    pub tool_input: Option<ToolInput>,
    /// A title for the question.
    pub confirmation_title: Option<StringOrMarkdown>,
    /// File edits the call would make, for the person to see before answering.
    pub edits: Option<FileEditCollection>,
    /// Why the backend asks, when it knows (a write outside the workspace, a destructive
    /// command).
    pub risk_assessment: Option<ToolCallRiskAssessment>,
    /// Whether a client may change the call's input before approving; the backend then checks
    /// the edited input again.
    pub editable: Option<bool>,
    /// Backend metadata shown with the question (the call's `_meta` while it waits).
    pub meta: Option<JsonObject>,
}

/// How an approval ended.
#[derive(Debug, Clone, PartialEq)]
pub enum ApprovalOutcome {
    /// Go ahead, possibly with input the person edited.
    Approved {
        /// Input the person edited, replacing the proposed input.
        edited_input: Option<String>,
        /// The option the person picked.
        option_id: Option<String>,
        /// Why the call may run, as the chat shows it: `setting` when the host allowed it
        /// without asking, else what the approving client said (`not-needed` when it said
        /// nothing).
        confirmed: ahp_types::state::ToolCallConfirmationReason,
    },
    /// Do not run the call.
    Denied {
        /// Why, when known.
        reason: Option<ToolCallCancellationReason>,
        /// What the person wrote with the denial (its `reasonMessage`, else its
        /// `userSuggestion`), when they wrote something.
        message: Option<String>,
    },
    /// The turn ended, was cancelled or closed before anyone answered.
    Cancelled,
}

/// The choices the host offers with an approval it puts to a person, for a tool shown as
/// `display_name`. Public so a backend rebuilding a turn from its own store shows the same ones.
pub fn approval_options(display_name: &str) -> Vec<ahp_types::state::ConfirmationOption> {
    use ahp_types::state::{ConfirmationOption, ConfirmationOptionKind};
    vec![
        ConfirmationOption {
            id: "allow-once".into(),
            label: "Allow once".into(),
            kind: ConfirmationOptionKind::Approve,
            group: Some(1),
        },
        ConfirmationOption {
            id: "allow-session".into(),
            label: format!("Allow {display_name} for this session"),
            kind: ConfirmationOptionKind::Approve,
            group: Some(1),
        },
        ConfirmationOption {
            id: "deny".into(),
            label: "Deny".into(),
            kind: ConfirmationOptionKind::Deny,
            group: Some(2),
        },
    ]
}

/// How a question ended.
#[derive(Debug, Clone, PartialEq)]
pub struct InputOutcome {
    /// `accept`, `decline` or `cancel`.
    pub response: ChatInputResponseKind,
    /// The answers, keyed by question id, when accepted.
    pub answers: Option<HashMap<String, ChatInputAnswer>>,
}

/// A secret value (a pushed token, a vault entry). Its debug form never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself; call only where it is used.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A call of a tool a client runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientToolCall {
    /// The turn the call belongs to.
    pub turn_id: String,
    /// The backend's id of the call.
    pub tool_call_id: String,
    /// The client that runs it.
    pub client_id: String,
    /// The tool's name as the client announced it.
    pub tool_name: String,
    /// The input, as JSON text.
    pub input: String,
}
