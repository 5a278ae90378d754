//! The one rule both stores follow to cut a session at a message (rewind and fork).

use std::collections::HashSet;

use crate::error::AgentError;
use crate::message::Message;

use super::records::RunRecord;

/// What a cut keeps: the first `keep_messages` messages and the runs named in `kept_runs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutPlan {
    /// How many messages, from the start of the transcript, stay.
    pub keep_messages: usize,
    /// Ids of the runs that stay, in the order they were given.
    pub kept_runs: Vec<String>,
    /// Ids of the runs that go, with their events, steps and requests.
    pub dropped_runs: Vec<String>,
}

/// Decides what a cut through `through_message_id` keeps.
///
/// The messages up to and including that message stay. A run stays only when it is terminal and
/// both its input and its last message are among the kept messages; every other run goes.
/// `not_found` when the message is not in the transcript.
pub fn select_cut(
    session_id: &str,
    messages: &[Message],
    runs: &[RunRecord],
    through_message_id: &str,
) -> Result<CutPlan, AgentError> {
    let position = messages
        .iter()
        .position(|message| message.id == through_message_id)
        .ok_or_else(|| {
            AgentError::not_found(format!(
                "session {session_id} has no message {through_message_id}"
            ))
        })?;
    let keep_messages = position + 1;
    let kept_ids: HashSet<&str> = messages[..keep_messages]
        .iter()
        .map(|message| message.id.as_str())
        .collect();
    let within = |id: &Option<String>| id.as_deref().is_some_and(|id| kept_ids.contains(id));
    let (mut kept_runs, mut dropped_runs) = (Vec::new(), Vec::new());
    for run in runs {
        if run.status.is_terminal() && within(&run.input_message_id) && within(&run.last_message_id)
        {
            kept_runs.push(run.run_id.clone());
        } else {
            dropped_runs.push(run.run_id.clone());
        }
    }
    Ok(CutPlan {
        keep_messages,
        kept_runs,
        dropped_runs,
    })
}
