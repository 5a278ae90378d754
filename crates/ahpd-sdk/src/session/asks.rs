//! The requests a session's backends wait on: approvals and questions put to a person, and
//! calls of tools a client runs, each under its `inputNeeded` entry id; and the tools a person
//! allowed for the rest of the session. The actor opens, answers and settles them through
//! this part only.

use std::collections::HashMap;
use std::sync::Arc;

use ahp_types::state::ToolCallResult;
use tokio::sync::oneshot;

use crate::session::exchange::{ApprovalOutcome, InputOutcome};

/// What a backend waits for, and where the answer goes.
pub(crate) enum PendingKind {
    Approval {
        reply: oneshot::Sender<ApprovalOutcome>,
        /// The rule "allow for this session" stores for this call.
        scope: String,
    },
    Input {
        reply: oneshot::Sender<InputOutcome>,
        required: Vec<String>,
    },
    ClientTool {
        reply: oneshot::Sender<ToolCallResult>,
        client_id: String,
        tool_call_id: String,
        timer: Option<tokio::task::JoinHandle<()>>,
    },
}

/// One open request: the chat and turn it belongs to, and what it waits for.
pub(crate) struct Pending {
    pub chat: Arc<str>,
    pub turn_id: String,
    pub kind: PendingKind,
}

/// The open requests of one session, by entry id.
#[derive(Default)]
pub(crate) struct Asks {
    open: HashMap<String, Pending>,
    /// The rules a person allowed for the rest of the session (see `scopes`); kept here too
    /// for a session without a configuration to hold them.
    allowed: Vec<String>,
}

impl Asks {
    /// Opens a request under its entry id.
    pub(crate) fn open(&mut self, entry: String, pending: Pending) {
        self.open.insert(entry, pending);
    }

    pub(crate) fn get(&self, entry: &str) -> Option<&Pending> {
        self.open.get(entry)
    }

    /// Takes a request out to answer or settle it.
    pub(crate) fn take(&mut self, entry: &str) -> Option<Pending> {
        self.open.remove(entry)
    }

    pub(crate) fn is_open(&self, entry: &str) -> bool {
        self.open.contains_key(entry)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    /// Whether `entry` is an approval open on this chat's turn.
    pub(crate) fn approval_open(&self, entry: &str, chat: &str, turn_id: &str) -> bool {
        matches!(self.open.get(entry), Some(p) if &*p.chat == chat && p.turn_id == turn_id && matches!(p.kind, PendingKind::Approval { .. }))
    }

    /// Whether `entry` is a call of a tool `client_id` runs.
    pub(crate) fn run_by(&self, entry: &str, client_id: &str) -> bool {
        matches!(self.open.get(entry), Some(p) if matches!(&p.kind, PendingKind::ClientTool { client_id: c, .. } if c == client_id))
    }

    /// Every entry id.
    pub(crate) fn all(&self) -> Vec<String> {
        self.open.keys().cloned().collect()
    }

    /// The entries of one turn of a chat.
    pub(crate) fn of_turn(&self, chat: &str, turn_id: &str) -> Vec<String> {
        self.entries(|p| &*p.chat == chat && p.turn_id == turn_id)
    }

    /// The entries of one chat.
    pub(crate) fn of_chat(&self, chat: &str) -> Vec<String> {
        self.entries(|p| &*p.chat == chat)
    }

    /// The calls of tools one client runs.
    pub(crate) fn of_client(&self, client_id: &str) -> Vec<String> {
        self.entries(
            |p| matches!(&p.kind, PendingKind::ClientTool { client_id: c, .. } if c == client_id),
        )
    }

    fn entries(&self, keep: impl Fn(&Pending) -> bool) -> Vec<String> {
        self.open
            .iter()
            .filter(|(_, p)| keep(p))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// A person allowed what this rule covers for the rest of the session.
    pub(crate) fn allow_for_session(&mut self, rule: String) {
        if !self.allowed.contains(&rule) {
            self.allowed.push(rule);
        }
    }

    pub(crate) fn allowed_for_session(&self) -> &[String] {
        &self.allowed
    }
}
