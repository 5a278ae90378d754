//! A batch of calls: the calls of one assistant message, strictly in order.

use std::collections::HashSet;

use super::pause::Parked;
use super::tool_call::{CallResult, error_result};
use super::{Exit, Flow, INTERRUPT_MARKER, INTERRUPT_TOOL_TEXT, Runner};
use crate::event::{EventBody, OutcomeKind, StopReason};
use crate::message::{Message, MessageSource, Part, Role, ToolCall, ToolResult};
use crate::policy::DenialBy;

/// The reason a call refused by `maxToolCalls` carries.
pub(crate) const TOOL_LIMIT_TEXT: &str = "Tool call limit reached";

/// The result of every call after a hook stopped the run.
pub(crate) const STOPPED_TEXT: &str = "Not executed: the run was stopped";

/// The calls of the batch in progress: those with no result in the transcript yet, and those
/// that reached their executor. A run that ends early answers the open ones from this.
#[derive(Debug, Default)]
pub(crate) struct OpenBatch {
    open: Vec<ToolCall>,
    ran: HashSet<String>,
}

impl OpenBatch {
    /// A new batch of `calls`, none answered or run yet.
    pub(crate) fn begin(&mut self, calls: &[ToolCall]) {
        self.open = calls.to_vec();
        self.ran.clear();
    }

    /// Notes that `call_id` reached its executor.
    pub(crate) fn ran(&mut self, call_id: &str) {
        self.ran.insert(call_id.to_owned());
    }

    /// Notes the calls `messages` answer.
    pub(crate) fn answered(&mut self, messages: &[Message]) {
        let answered: HashSet<&str> = messages
            .iter()
            .flat_map(|m| m.parts.iter())
            .filter_map(|p| match p {
                Part::ToolResult(result) => Some(result.call_id.as_str()),
                _ => None,
            })
            .collect();
        if !answered.is_empty() {
            self.open
                .retain(|call| !answered.contains(call.call_id.as_str()));
        }
    }

    /// The calls still without a result, each with whether it reached its executor.
    pub(crate) fn unanswered(&self) -> impl Iterator<Item = (&ToolCall, bool)> {
        self.open
            .iter()
            .map(|call| (call, self.ran.contains(&call.call_id)))
    }
}

/// The `role: tool` message carrying one result.
pub(crate) fn tool_message(result: ToolResult) -> Message {
    Runner::message(
        Role::Tool,
        MessageSource::Tool,
        vec![Part::ToolResult(result)],
    )
}

impl Runner {
    /// Runs `calls` in order. `parked` is set when the first call is the one a resumed run was
    /// waiting on: it is decided by the command, not run again, and is exempt from the checks.
    pub(crate) async fn run_batch(
        &mut self,
        calls: Vec<ToolCall>,
        mut parked: Option<Parked>,
    ) -> Flow<()> {
        self.batch.begin(&calls);
        let max = self.agent.limits().max_tool_calls;
        let mut limit_hit = false;
        for (index, call) in calls.iter().enumerate() {
            let decided = index == 0 && parked.is_some();
            if !decided && self.signal().is_aborted() {
                return Err(self.cut_batch(&calls[index..]).await);
            }
            if !decided && (limit_hit || self.tally.tool_calls >= max) {
                limit_hit = true;
                self.add_denial(call, call.input.clone(), TOOL_LIMIT_TEXT, DenialBy::Limit);
                self.emit(EventBody::ToolDenied {
                    call_id: call.call_id.clone(),
                    name: call.name.clone(),
                    reason: "max_tool_calls".into(),
                })
                .await?;
                self.append(&[tool_message(error_result(call, TOOL_LIMIT_TEXT))])
                    .await?;
                continue;
            }
            let mut result = match parked.take() {
                Some(waiting) => self.wait_and_apply(waiting).await?,
                None => self.one_call(call).await?,
            };
            loop {
                match result {
                    CallResult::Answered { result, stop } => {
                        self.append(&[tool_message(result)]).await?;
                        if stop.is_some() {
                            let rest: Vec<Message> = calls[index + 1..]
                                .iter()
                                .map(|later| tool_message(error_result(later, STOPPED_TEXT)))
                                .collect();
                            if !rest.is_empty() {
                                self.append(&rest).await?;
                            }
                            return Err(Exit::Finish(OutcomeKind::Stopped {
                                reason: StopReason::Hook,
                            }));
                        }
                        break;
                    }
                    CallResult::Aborted => return Err(self.cut_batch(&calls[index..]).await),
                    waiting => {
                        let parked = self.pause(call, waiting).await?;
                        result = self.wait_and_apply(parked).await?;
                    }
                }
            }
        }
        if limit_hit {
            return Err(Exit::Finish(OutcomeKind::Stopped {
                reason: StopReason::MaxToolCalls,
            }));
        }
        Ok(())
    }

    /// Answers every call of a cut batch as interrupted, writes the marker, and exits with the
    /// abort's outcome.
    pub(crate) async fn cut_batch(&mut self, calls: &[ToolCall]) -> Exit {
        let mut messages: Vec<Message> = calls
            .iter()
            .map(|call| tool_message(error_result(call, INTERRUPT_TOOL_TEXT)))
            .collect();
        messages.push(Runner::message(
            Role::User,
            MessageSource::System,
            vec![Part::text(INTERRUPT_MARKER)],
        ));
        match self.append(&messages).await {
            Ok(()) => Exit::Finish(self.abort_outcome()),
            Err(error) => Exit::Error(error),
        }
    }
}
