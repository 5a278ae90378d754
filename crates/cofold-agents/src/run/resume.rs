//! Resuming a stored run: replay, then deliver a terminal outcome, settle a run
//! whose process died, or wait at a stored pause and go on from it.

use std::collections::HashSet;

use serde_json::Value;

use super::pause::Parked;
use super::{Exit, Hold, ResumeOptions, Runner, failed_outcome, stored_outcome};
use crate::error::{AgentError, ErrorCode};
use crate::event::{Event, OutcomeKind, RequestKind, RunOutcome, RunStatus};
use crate::message::{Message, Part, Role, ToolCall, tool_calls_of};
use crate::question::Question;
use crate::store::{PendingRequest, RunRecord, StepRecord, StepStatus};
use crate::tool::AbortSignal;
use crate::usage::{ZERO_USAGE, add_usage, cost_of, usd_to_micros};

impl Runner {
    /// The whole life of a `resume` task.
    pub(crate) async fn resume(mut self, opts: ResumeOptions, signal: Option<AbortSignal>) {
        let exit = self.reattach(opts, signal).await;
        self.conclude(exit).await;
    }

    /// The outcome of `kind` with a record's tally.
    fn record_outcome(record: &RunRecord, kind: OutcomeKind) -> RunOutcome {
        RunOutcome {
            kind,
            usage: record.usage,
            steps: record.steps,
            cost: record.cost,
            denials: record.denials.clone(),
        }
    }

    async fn reattach(&mut self, opts: ResumeOptions, signal: Option<AbortSignal>) -> Exit {
        // A resumed run is stopped like a fresh one: by its caller's signal, or by the time
        // limit, counted from the resume (the time nobody held the run cannot be counted).
        self.watch_aborts(signal);
        let run = self.run_ref();
        let record = match self.store.get_run(&run).await {
            Ok(Some(record)) => record,
            Ok(None) => {
                return Exit::Settle(failed_outcome(AgentError::not_found(format!(
                    "run {} is not in session {}",
                    run.run_id, run.session_id
                ))));
            }
            Err(error) => return Exit::Settle(failed_outcome(AgentError::internal(error.message))),
        };

        // Replay what is stored after `after_seq`; live events continue the numbering.
        // Only the tail is read: the events to replay, and the numbering from the log's end.
        let after = opts.after_seq.unwrap_or(0);
        let replay = match self.store.list_events(&run, Some(after)).await {
            Ok(events) => events,
            Err(error) => return Exit::Settle(Runner::record_outcome(&record, failed(error))),
        };
        let last = match replay.last() {
            Some(event) => event.seq,
            None => match self.store.last_event_seq(&run).await {
                Ok(seq) => seq,
                Err(error) => {
                    return Exit::Settle(Runner::record_outcome(&record, failed(error)));
                }
            },
        };
        self.next_seq = last + 1;
        for event in &replay {
            self.side.shared.publish(event);
        }

        if record.status.is_terminal() {
            return Exit::Settle(self.ended_outcome(&record, &replay, after).await);
        }
        let busy = |what: &str| {
            let error = AgentError::new(ErrorCode::WriterBusy, what.to_owned());
            Exit::Settle(Runner::record_outcome(
                &record,
                OutcomeKind::Failed {
                    error: error.info(),
                },
            ))
        };
        let Some(hold) = Hold::take(self.store_key(), &run.session_id, &run.run_id) else {
            return busy(&format!(
                "run {} is already held by this process",
                run.run_id
            ));
        };
        self.hold = Some(hold);
        let session = match self.store.get_session(&run.session_id).await {
            Ok(Some(session)) => session,
            Ok(None) => {
                let error =
                    AgentError::not_found(format!("session {} does not exist", run.session_id));
                return Exit::Settle(Runner::record_outcome(
                    &record,
                    OutcomeKind::Failed {
                        error: error.info(),
                    },
                ));
            }
            Err(error) => return Exit::Settle(Runner::record_outcome(&record, failed(error))),
        };
        match self.store.claim_writer(&run.session_id, &run.run_id).await {
            Ok(true) => self.claimed = true,
            Ok(false) => {
                return busy(&format!(
                    "session {} is being written by another run",
                    run.session_id
                ));
            }
            Err(error) => return Exit::Settle(Runner::record_outcome(&record, failed(error))),
        }
        self.workspace = session.workspace;
        self.input_message_id = record.input_message_id.clone().unwrap_or_default();

        match self.continue_from(record).await {
            Ok(()) => self.drive().await,
            Err(exit) => exit,
        }
    }

    /// The outcome of a run that had ended: among the last events replayed, or, for a caller
    /// that replays from after it, in the whole log.
    async fn ended_outcome(&self, record: &RunRecord, replay: &[Event], after: u64) -> RunOutcome {
        let mut outcome = stored_outcome(replay);
        if outcome.is_none() && after > 0 {
            outcome = self
                .store
                .list_events(&self.run_ref(), None)
                .await
                .ok()
                .and_then(|all| stored_outcome(&all));
        }
        outcome.unwrap_or_else(|| {
            let error = AgentError::new(ErrorCode::Interrupted, "the run left no outcome");
            Runner::record_outcome(
                record,
                OutcomeKind::Failed {
                    error: error.info(),
                },
            )
        })
    }

    /// Rebuilds the counters, resolves capabilities, and settles a dead run or re-enters a
    /// paused one's batch.
    async fn continue_from(&mut self, record: RunRecord) -> Result<(), Exit> {
        let steps = self.store.list_steps(&self.run_ref()).await?;
        self.tally.step_index = steps.len() as u32;
        self.tally.tool_calls = steps
            .iter()
            .filter(|s| matches!(s, StepRecord::Tool(t) if t.status != StepStatus::Started))
            .count() as u32;
        self.tally.denials = record.denials.clone();
        if record.status == RunStatus::Awaiting {
            self.tally.usage = record.usage;
            self.tally.steps = record.steps;
            if self.tally.cost.is_some() {
                self.tally.cost = Some(record.cost.map_or(0, usd_to_micros));
            }
        } else {
            self.recount(&steps);
        }
        self.resolve_capabilities().await?;

        if record.status == RunStatus::Running {
            self.side.shared.attached_without_request();
            return Err(Exit::Error(self.settle_dead_run(&steps).await));
        }

        // A paused run: load its request and wait at it again.
        let request = self.pending_request(&record).await?;
        let request_id = request.request_id.clone();
        let history = self.store.list_context_messages(self.session_id()).await?;
        let unanswered = unanswered_calls(&history);
        let Some(first) = unanswered
            .first()
            .filter(|c| Some(&c.call_id) == request.call_id.as_ref())
            .cloned()
        else {
            return Err(Exit::Error(AgentError::internal(format!(
                "the paused call of request {request_id} is not the first unanswered call"
            ))));
        };
        let payload = &request.payload;
        let invocation_id = payload
            .get("invocationId")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let started_at = invocation_id.as_deref().and_then(|id| {
            steps.iter().find_map(|s| match s {
                StepRecord::Tool(t) if t.invocation_id == id => Some(t.started_at.clone()),
                _ => None,
            })
        });
        let questions: Vec<Question> = payload
            .get("questions")
            .cloned()
            .and_then(|q| serde_json::from_value(q).ok())
            .unwrap_or_default();
        let parked = Parked {
            request_id,
            kind: request.kind,
            tool: self.offer.tool(&first.name),
            input: payload.get("input").cloned().unwrap_or(Value::Null),
            call: first,
            questions,
            invocation_id,
            started_at,
        };
        if parked.kind == RequestKind::Input && parked.invocation_id.is_none() {
            return Err(Exit::Error(AgentError::internal(
                "an input request without its invocation id",
            )));
        }
        self.side.shared.open_request(parked.open_request());
        self.run_batch(unanswered, Some(parked)).await
    }

    /// The unresolved request a paused run waits at.
    async fn pending_request(&self, record: &RunRecord) -> Result<PendingRequest, Exit> {
        let Some(request_id) = record.pending_request_id.clone() else {
            return Err(Exit::Error(AgentError::not_found(format!(
                "run {} has no pending request",
                record.run_id
            ))));
        };
        let Some(request) = self.store.get_request(&self.run_ref(), &request_id).await? else {
            return Err(Exit::Error(AgentError::not_found(format!(
                "request {request_id} does not exist"
            ))));
        };
        if request.resolution.is_some() {
            return Err(Exit::Error(AgentError::new(
                ErrorCode::Interrupted,
                format!("request {request_id} was resolved but the run did not go on"),
            )));
        }
        Ok(request)
    }

    /// A run that died while running: usage, steps and cost from its model step records.
    pub(crate) fn recount(&mut self, steps: &[StepRecord]) {
        let pricing = self.agent.model().pricing();
        let mut usage = ZERO_USAGE;
        let mut count = 0;
        let mut micros = 0;
        for step in steps {
            if let StepRecord::Model(model) = step {
                count += 1;
                let step_usage = model
                    .reply
                    .as_ref()
                    .and_then(|reply| reply.get("usage").cloned())
                    .and_then(|u| serde_json::from_value(u).ok());
                if let Some(step_usage) = step_usage {
                    if let Some(pricing) = &pricing {
                        micros += cost_of(&step_usage, pricing);
                    }
                    usage = add_usage(&usage, &step_usage);
                }
            }
        }
        self.tally.usage = usage;
        self.tally.steps = count;
        self.tally.cost = pricing.map(|_| micros);
    }
}

fn failed(error: AgentError) -> OutcomeKind {
    OutcomeKind::Failed {
        error: AgentError::internal(error.message).info(),
    }
}

/// The calls of the last assistant tool-call message that no tool message answers yet, in order.
pub(crate) fn unanswered_calls(history: &[Message]) -> Vec<ToolCall> {
    let Some(at) = history
        .iter()
        .rposition(|m| m.role == Role::Assistant && !tool_calls_of(m).is_empty())
    else {
        return Vec::new();
    };
    let answered: HashSet<&str> = history[at + 1..]
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| match p {
            Part::ToolResult(result) => Some(result.call_id.as_str()),
            _ => None,
        })
        .collect();
    tool_calls_of(&history[at])
        .into_iter()
        .filter(|c| !answered.contains(c.call_id.as_str()))
        .cloned()
        .collect()
}
