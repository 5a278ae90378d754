//! Ending a run: the open calls answered, the record, the claim, the final event, then the
//! handle; or, when another process took the run over, only the handle.

use super::{Exit, Runner, is_takeover};
use crate::error::{AgentError, ErrorCode, ErrorInfo};
use crate::event::{EventBody, OutcomeKind, RunOutcome};
use crate::store::RunUpdate;

impl Runner {
    /// Ends the run for `exit`: record, claim, final event, then the handle.
    pub(crate) async fn conclude(mut self, exit: Exit) {
        let exit = match exit {
            // A store call cut short by the stop: the run ends as the stop says, with what can
            // still be written (the open calls' answers, then the marker).
            Exit::Error(error)
                if error.code == ErrorCode::Aborted && self.signal().is_aborted() =>
            {
                self.agent.warn(&error.message);
                if self.claimed {
                    self.answer_open_calls().await;
                }
                self.interrupt().await
            }
            other => other,
        };
        match exit {
            Exit::Settle(outcome) => self.settle(outcome),
            Exit::Error(error) if is_takeover(&error) => self.superseded(),
            Exit::Error(error) => {
                self.finish(OutcomeKind::Failed {
                    error: error.info(),
                })
                .await
            }
            Exit::Finish(kind) => self.finish(kind).await,
        }
    }

    /// Another process took this run over: settle `failed superseded`, write nothing more.
    fn superseded(self) {
        let error = ErrorInfo {
            code: ErrorCode::Superseded,
            message: format!("run {} was taken over by another process", self.run_id()),
            detail: None,
        };
        let outcome = self.outcome(OutcomeKind::Failed { error });
        self.settle(outcome);
    }

    /// Writes the end of the run, then settles the handle.
    async fn finish(mut self, kind: OutcomeKind) {
        let awaiting = matches!(kind, OutcomeKind::Awaiting { .. });
        let outcome = self.outcome(kind);
        let pending = match &outcome.kind {
            OutcomeKind::Awaiting { request_id, .. } => Some(Some(request_id.clone())),
            _ => Some(None),
        };
        let update = RunUpdate {
            run: self.run_ref(),
            status: Some(outcome.status()),
            pending_request_id: pending,
            usage: Some(outcome.usage),
            steps: Some(outcome.steps),
            cost: outcome.cost,
            denials: Some(outcome.denials.clone()),
            last_message_id: None,
        };
        if !awaiting && self.claimed {
            self.answer_open_calls().await;
        }
        let written = async {
            self.store.update_run(update).await?;
            if !awaiting && self.claimed {
                self.store
                    .release_writer(self.session_id(), self.run_id())
                    .await?;
                self.claimed = false;
            }
            self.emit(EventBody::RunFinished {
                outcome: outcome.clone(),
            })
            .await
        }
        .await;
        match written {
            Ok(()) => self.settle(outcome),
            Err(error) if is_takeover(&error) => self.superseded(),
            Err(error) => {
                if self.claimed {
                    let _ = self
                        .store
                        .release_writer(self.session_id(), self.run_id())
                        .await;
                }
                let failed = OutcomeKind::Failed {
                    error: AgentError::internal(error.message).info(),
                };
                let outcome = self.outcome(failed);
                self.settle(outcome);
            }
        }
    }

    /// Closes the handle with `outcome` and stops every timer; nothing is written.
    pub(crate) fn settle(mut self, outcome: RunOutcome) {
        self.timers.stop_all();
        self.hold = None;
        self.side.shared.close(outcome);
    }
}
