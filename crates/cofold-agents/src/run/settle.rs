//! Leaving a valid conversation whatever ended a run.
//!
//! Every OpenAI-compatible server refuses a conversation in which a tool call is not followed by
//! its result, so no end of a run may leave one behind: not an error exit in this process
//! ([`Runner::answer_open_calls`]), not a panic, not a killed daemon ([`Runner::close_left_open`],
//! run when the dead run is settled). A call that never reached its executor is said to be not
//! run and its step, if any, is never marked `uncertain`; a call whose tool was running gets
//! "outcome unknown"; a call whose tool finished but whose result was not yet stored gets the
//! result its step recorded.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::batch::tool_message;
use super::tool_call::{bound, error_result};
use super::{Hold, ResumeOptions, Runner, resume};
use crate::agent::Agent;
use crate::error::{AgentError, ErrorCode};
use crate::event::{OutcomeKind, RunOutcome};
use crate::id::Timestamp;
use crate::message::{Message, Part, Role, ToolResult, tool_calls_of};
use crate::pairing::{NOT_RUN_TEXT, OUTCOME_UNKNOWN_TEXT};
use crate::store::{RunRef, RunStatus, StepPatch, StepRecord, StepStatus, ToolStep};

/// The result of an open call when a run ends in this process before the call ran.
pub(crate) const ENDED_BEFORE_TEXT: &str = "not run: the run ended before this call started";

/// The result of an open call when a run ends in this process while the call ran.
pub(crate) const ENDED_DURING_TEXT: &str = "outcome unknown: the run ended while this call ran";

/// What the open calls of a run that stopped abruptly are answered with.
pub(crate) struct OpenCallTexts {
    /// For the calls whose tool was running.
    pub(crate) ran: &'static str,
    /// For the calls that never reached their tool.
    pub(crate) not_run: &'static str,
}

/// The daemon (or the process holding the run) stopped.
pub(crate) const DAEMON_STOPPED: OpenCallTexts = OpenCallTexts {
    ran: OUTCOME_UNKNOWN_TEXT,
    not_run: NOT_RUN_TEXT,
};

/// The run's task panicked.
pub(crate) const RUN_CRASHED: OpenCallTexts = OpenCallTexts {
    ran: "outcome unknown: the run stopped on an internal error while this call ran",
    not_run: "not run: the run stopped on an internal error before this call started",
};

impl Runner {
    /// Answers the calls of the batch in progress that have no result yet, so that a run ending
    /// on an error (a hook, a failed write, a lost tool) leaves a transcript a model can read.
    pub(crate) async fn answer_open_calls(&mut self) {
        let answers: Vec<Message> = self
            .batch
            .unanswered()
            .map(|(call, ran)| {
                let text = if ran {
                    ENDED_DURING_TEXT
                } else {
                    ENDED_BEFORE_TEXT
                };
                tool_message(error_result(call, text))
            })
            .collect();
        if answers.is_empty() {
            return;
        }
        if let Err(error) = self.append(&answers).await {
            self.agent.warn(&format!(
                "the open calls of run {} stay unanswered in the store: {}",
                self.run_id(),
                error.message
            ));
        }
    }

    /// Closes what a run that stopped abruptly left open: its `started` model steps become
    /// `failed`, its `started` tool steps `uncertain` (their tool was running), and every call of
    /// the last batch without a result is answered right after it. Returns the tool step that
    /// was running, if any.
    pub(crate) async fn close_left_open(
        &mut self,
        steps: &[StepRecord],
        texts: &OpenCallTexts,
    ) -> Result<Option<ToolStep>, AgentError> {
        let mut running: Option<ToolStep> = None;
        let mut finished: HashMap<String, ToolResult> = HashMap::new();
        let mut ran: HashSet<String> = HashSet::new();
        let max = self.agent.limits().max_tool_output_chars;
        for step in steps {
            let status = match step {
                StepRecord::Model(m) if m.status == StepStatus::Started => StepStatus::Failed,
                StepRecord::Tool(t) if t.status == StepStatus::Started => {
                    ran.insert(t.call_id.clone());
                    running = Some(t.clone());
                    StepStatus::Uncertain
                }
                StepRecord::Tool(t) => {
                    if let Some(result) = recorded_result(t, max) {
                        finished.insert(t.call_id.clone(), result);
                    }
                    continue;
                }
                StepRecord::Model(_) => continue,
            };
            let patch = StepPatch {
                status: Some(status),
                ended_at: Some(Timestamp::now()),
                ..StepPatch::default()
            };
            self.store
                .update_step(&self.run_ref(), step.invocation_id(), &patch)
                .await?;
        }

        // The open batch is never covered by a summary, so the context view holds it.
        let history = self.store.list_context_messages(self.session_id()).await?;
        let Some(at) = history
            .iter()
            .rposition(|m| m.role == Role::Assistant && !tool_calls_of(m).is_empty())
        else {
            return Ok(running);
        };
        let answered: HashSet<&str> = history[at + 1..]
            .iter()
            .flat_map(|m| m.parts.iter())
            .filter_map(|p| match p {
                Part::ToolResult(result) => Some(result.call_id.as_str()),
                _ => None,
            })
            .collect();
        let answers: Vec<Message> = tool_calls_of(&history[at])
            .into_iter()
            .filter(|call| !answered.contains(call.call_id.as_str()))
            .map(|call| match finished.remove(&call.call_id) {
                Some(result) => tool_message(result),
                None if ran.contains(&call.call_id) => tool_message(error_result(call, texts.ran)),
                None => tool_message(error_result(call, texts.not_run)),
            })
            .collect();
        if answers.is_empty() {
            return Ok(running);
        }
        if history[at + 1..].iter().any(|m| m.role != Role::Tool) {
            // Something was written after the batch: an answer stored now would not follow its
            // call, so it is left to the guard that pairs results when a request is built.
            self.agent.warn(&format!(
                "session {} holds unanswered calls followed by other messages; requests will \
                 answer them in place",
                self.session_id()
            ));
            return Ok(running);
        }
        self.append(&answers).await?;
        Ok(running)
    }

    /// Settles a run whose process died while it was running (its writer claim is now this
    /// process's): steps and calls closed, then `failed interrupted`.
    pub(crate) async fn settle_dead_run(&mut self, steps: &[StepRecord]) -> AgentError {
        match self.close_left_open(steps, &DAEMON_STOPPED).await {
            Ok(Some(tool)) => AgentError::new(
                ErrorCode::Interrupted,
                format!(
                    "the daemon stopped while call {} of tool \"{}\" ran",
                    tool.call_id, tool.name
                ),
            )
            .with_detail(
                serde_json::json!({ "invocationId": tool.invocation_id, "callId": tool.call_id }),
            ),
            Ok(None) => AgentError::new(
                ErrorCode::Interrupted,
                "the daemon stopped before the run finished",
            ),
            Err(error) => error,
        }
    }
}

/// The result a finished tool step recorded, as the model would have read it.
fn recorded_result(step: &ToolStep, max_chars: usize) -> Option<ToolResult> {
    let (content, is_error) = match (&step.transformed, &step.original) {
        (Some(t), _) => (t.content.clone(), t.is_error),
        (None, Some(o)) => (bound(o.content.clone(), max_chars), o.is_error),
        (None, None) => return None,
    };
    Some(ToolResult {
        call_id: step.call_id.clone(),
        name: step.name.clone(),
        content,
        is_error,
    })
}

/// Settles the session's run whose writer is gone: when the run holding the session's writer
/// claim is `running` but no task of this process runs it, it is settled through [`resume`]
/// (its open calls answered, `failed interrupted`, the claim released) and its outcome is
/// returned. A holder that is alive is left alone: in this process the in-process hold refuses
/// the resume; in another, the store refuses the claim. `Ok(None)` when nothing was settled.
///
/// A host may call this when it opens a session (at startup, or on its first use); `run` does
/// it by itself when a dead run's claim is in its way.
pub async fn settle_dead_runs(
    agent: &Agent,
    session_id: &str,
) -> Result<Option<RunOutcome>, AgentError> {
    let store = agent.store();
    // A store that can tell its holders' processes apart names a dead one; otherwise the holder
    // is the session's, and whether it is alive is left to the hold and the claim below.
    let holder = match store.dead_writer(session_id).await? {
        Some(dead) => dead,
        None => {
            let Some(session) = store.get_session(session_id).await? else {
                return Ok(None);
            };
            let Some(holder) = session.active_writer_run_id else {
                return Ok(None);
            };
            holder
        }
    };
    let run = RunRef::new(session_id, holder.clone());
    match store.get_run(&run).await? {
        Some(record) if record.status == RunStatus::Running => {}
        Some(record) if record.status.is_terminal() => {
            // A run that ended but still holds the claim stopped between its last two writes;
            // unless a task of this process is about to release it, the claim is let go.
            let key = Arc::as_ptr(store) as *const () as usize;
            if Hold::take(key, session_id, &holder).is_some() {
                store.release_writer(session_id, &holder).await?;
            }
            return Ok(None);
        }
        _ => return Ok(None),
    }
    let handle = resume(agent, ResumeOptions::new(session_id, holder));
    let outcome = handle.outcome().await;
    let busy = matches!(
        &outcome.kind,
        OutcomeKind::Failed { error } if error.code == ErrorCode::WriterBusy
    );
    Ok((!busy).then_some(outcome))
}
