//! One iteration of the loop and its model step.

use futures::StreamExt;
use serde_json::{Value, json};

use super::{Exit, Flow, RunKind, Runner, error_detail};
use crate::compaction::{context_of, estimate_messages, select_for_request};
use crate::error::{AgentError, ErrorCode};
use crate::event::{DeltaKind, EventBody, OutcomeKind, StopReason};
use crate::hooks::{AfterModel, BeforeModel, RunInfo};
use crate::id::{Timestamp, new_id};
use crate::message::{Message, tool_calls_of};
use crate::model::{ModelReply, ModelRequest, ModelStreamEvent};
use crate::pairing::pair_tool_results;
use crate::store::{ModelStep, StepPatch, StepRecord, StepStatus};
use crate::usage::{add_usage, cost_of, micros_to_usd};

impl Runner {
    /// Goes round the loop until something ends it.
    pub(crate) async fn drive(&mut self) -> Exit {
        loop {
            if let Err(exit) = self.iteration().await {
                return exit;
            }
        }
    }

    /// What hooks and policies see of the run.
    pub(crate) fn run_info(&self) -> RunInfo {
        RunInfo {
            run_id: self.run_id().to_owned(),
            session_id: self.session_id().to_owned(),
            agent_id: self.agent.id().to_owned(),
            step: self.tally.steps,
            kv: self.kv(),
        }
    }

    async fn iteration(&mut self) -> Flow<()> {
        if self.signal().is_aborted() {
            return Err(self.interrupt().await);
        }
        self.drain_steers().await?;
        let limits = *self.agent.limits();
        if self.tally.steps >= limits.max_steps {
            return Err(Exit::Finish(OutcomeKind::Stopped {
                reason: StopReason::MaxSteps,
            }));
        }
        if limits.max_cost > 0.0
            && let Some(cost) = self.tally.cost
            && micros_to_usd(cost) >= limits.max_cost
        {
            return Err(Exit::Finish(OutcomeKind::Stopped {
                reason: StopReason::MaxCost,
            }));
        }
        self.tally.steps += 1;
        // Only what the request can hold is read: the newest summary and what it left uncovered.
        let mut history = self.store.list_context_messages(self.session_id()).await?;

        if self.kind == RunKind::Compact {
            let Some(summary) = self.summarize(&history).await? else {
                return Err(Exit::Error(AgentError::internal(
                    "a compact run wrote no summary",
                )));
            };
            return Err(Exit::Finish(OutcomeKind::Completed { message: summary }));
        }
        if let Some(point) = self.agent.context().auto_compact_tokens {
            let estimate = self.agent.context().estimator();
            if estimate_messages(&context_of(&history), &*estimate) > point
                && self.summarize(&history).await?.is_some()
            {
                history = self.store.list_context_messages(self.session_id()).await?;
            }
        }

        let request = self.assemble(&history);
        let reply = self.model_step(request).await?;
        let calls: Vec<_> = tool_calls_of(&reply.message).into_iter().cloned().collect();
        if calls.is_empty() {
            return Err(Exit::Finish(OutcomeKind::Completed {
                message: reply.message,
            }));
        }
        self.run_batch(calls, None).await
    }

    /// The request for the next model step.
    pub(crate) fn assemble(&self, history: &[Message]) -> ModelRequest {
        let context = self.agent.context();
        let estimate = context.estimator();
        let view = pair_tool_results(&context_of(history));
        ModelRequest {
            instructions: self.offer.instructions().to_owned(),
            messages: select_for_request(
                &view,
                self.offer.instructions(),
                context.max_tokens,
                &*estimate,
            ),
            tools: self.offer.definitions(),
            params: self.agent.params().clone(),
            cache_key: Some(self.session_id().to_owned()),
            signal: self.signal(),
        }
    }

    /// Writes a model step record and announces it; returns its invocation id.
    pub(crate) async fn open_model_step(
        &mut self,
        request: &ModelRequest,
    ) -> Result<String, AgentError> {
        let invocation_id = new_id();
        let step = StepRecord::Model(ModelStep {
            session_id: self.session_id().to_owned(),
            run_id: self.run_id().to_owned(),
            index: self.tally.step_index,
            invocation_id: invocation_id.clone(),
            status: StepStatus::Started,
            request: serde_json::to_value(request).ok(),
            reply: None,
            detail: None,
            started_at: Timestamp::now(),
            ended_at: None,
        });
        self.store.append_step(&step).await?;
        self.tally.step_index += 1;
        self.emit(EventBody::ModelStarted {
            step: self.tally.steps,
        })
        .await?;
        Ok(invocation_id)
    }

    /// Patches a step's status, reply and detail, stamping its end.
    pub(crate) async fn close_step(
        &self,
        invocation_id: &str,
        status: StepStatus,
        reply: Option<&ModelReply>,
        detail: Option<Value>,
    ) -> Result<(), AgentError> {
        let patch = StepPatch {
            status: Some(status),
            reply: reply.and_then(|r| serde_json::to_value(r).ok()),
            detail,
            ended_at: Some(Timestamp::now()),
            ..StepPatch::default()
        };
        self.store
            .update_step(&self.run_ref(), invocation_id, &patch)
            .await
            .map(|_| ())
    }

    /// Adds a reply's tokens (and cost, when the model has pricing) to the tally.
    pub(crate) fn count(&mut self, reply: &ModelReply) {
        self.tally.usage = add_usage(&self.tally.usage, &reply.usage);
        if let (Some(cost), Some(pricing)) =
            (self.tally.cost.as_mut(), self.agent.model().pricing())
        {
            *cost += cost_of(&reply.usage, &pricing);
        }
    }

    /// Steps 8–13: the step record, the hooks, the model call, the assistant message.
    async fn model_step(&mut self, request: ModelRequest) -> Flow<ModelReply> {
        let invocation_id = self.open_model_step(&request).await?;
        let info = self.run_info();
        let request = self.before_model(&invocation_id, request, &info).await?;
        let reply = match self.call_model(request).await {
            Ok(reply) => reply,
            Err(error) => {
                self.close_step(
                    &invocation_id,
                    StepStatus::Failed,
                    None,
                    Some(error_detail(&error)),
                )
                .await?;
                if self.signal().is_aborted() {
                    return Err(self.interrupt().await);
                }
                let detail = error.model_error_detail();
                return Err(Exit::Error(
                    AgentError::new(error.code, error.message).with_detail(detail),
                ));
            }
        };
        self.count(&reply);

        let reply = self.after_model(&invocation_id, reply, &info).await?;
        // The provider's own answer was for the hook; the run keeps no copy of it.
        let reply = crate::model::ModelReply { raw: None, ..reply };

        self.close_step(&invocation_id, StepStatus::Completed, Some(&reply), None)
            .await?;
        self.append(std::slice::from_ref(&reply.message)).await?;
        self.emit(EventBody::ModelCompleted {
            step: self.tally.steps,
            message: reply.message.clone(),
            usage: reply.usage,
            finish: reply.finish,
        })
        .await?;
        Ok(reply)
    }

    /// The `beforeModel` hook, which may change the request or end the run; the step is
    /// closed when it does not go on.
    async fn before_model(
        &mut self,
        invocation_id: &str,
        request: ModelRequest,
        info: &RunInfo,
    ) -> Flow<ModelRequest> {
        let hooked = self
            .unless_stopped(
                "the beforeModel hook".into(),
                self.agent.hooks().before_model(request, info),
            )
            .await;
        let Some(hooked) = hooked else {
            self.close_step(invocation_id, StepStatus::Failed, None, None)
                .await?;
            return Err(self.interrupt().await);
        };
        match hooked {
            Err(message) => {
                self.close_step(invocation_id, StepStatus::Failed, None, None)
                    .await?;
                Err(hook_error("beforeModel", message))
            }
            Ok(BeforeModel::Abort { reason }) => {
                let detail = json!({ "abortedBy": "beforeModel", "reason": reason });
                self.close_step(invocation_id, StepStatus::Completed, None, Some(detail))
                    .await?;
                Err(Exit::Finish(OutcomeKind::Stopped {
                    reason: StopReason::Policy,
                }))
            }
            Ok(BeforeModel::Continue(request)) => Ok(request),
        }
    }

    /// The `afterModel` hook, which may change the reply or end the run; the step is
    /// closed when it does not go on.
    async fn after_model(
        &mut self,
        invocation_id: &str,
        reply: ModelReply,
        info: &RunInfo,
    ) -> Flow<ModelReply> {
        let hooked = self
            .unless_stopped(
                "the afterModel hook".into(),
                self.agent.hooks().after_model(reply.clone(), info),
            )
            .await;
        let Some(hooked) = hooked else {
            self.close_step(invocation_id, StepStatus::Failed, Some(&reply), None)
                .await?;
            return Err(self.interrupt().await);
        };
        match hooked {
            Err(message) => {
                self.close_step(invocation_id, StepStatus::Failed, Some(&reply), None)
                    .await?;
                Err(hook_error("afterModel", message))
            }
            Ok(AfterModel::Abort { reason }) => {
                let detail = json!({ "abortedBy": "afterModel", "reason": reason });
                self.close_step(
                    invocation_id,
                    StepStatus::Completed,
                    Some(&reply),
                    Some(detail),
                )
                .await?;
                Err(Exit::Finish(OutcomeKind::Stopped {
                    reason: StopReason::Policy,
                }))
            }
            Ok(AfterModel::Continue(reply)) => Ok(reply),
        }
    }

    /// Asks the model, streaming when it can, racing the run's abort. Every text or reasoning
    /// fragment is stored as a `model.delta` before the next is read.
    async fn call_model(&mut self, request: ModelRequest) -> Result<ModelReply, AgentError> {
        let model = self.agent.model().clone();
        let signal = self.signal();
        let aborted = || {
            AgentError::new(
                ErrorCode::Aborted,
                "the model request was stopped by the run's cancel",
            )
        };
        let stream = if model.features().streaming {
            model.stream(request.clone())
        } else {
            None
        };
        let Some(mut stream) = stream else {
            return tokio::select! {
                biased;
                _ = signal.cancelled() => Err(aborted()),
                reply = model.complete(request) => reply,
            };
        };
        // The stream holds what it sends; this copy (the conversation and every tool's schema)
        // would otherwise stay for as long as the answer streams.
        drop(request);
        loop {
            let next = tokio::select! {
                biased;
                _ = signal.cancelled() => return Err(aborted()),
                next = stream.next() => next,
            };
            let (kind, text) = match next {
                None => {
                    return Err(AgentError::new(
                        ErrorCode::InvalidResponse,
                        "the stream ended before the reply was complete",
                    ));
                }
                Some(Err(error)) => return Err(error),
                Some(Ok(ModelStreamEvent::Done { reply })) => return Ok(reply),
                Some(Ok(ModelStreamEvent::ToolCallDelta { .. })) => continue,
                Some(Ok(ModelStreamEvent::TextDelta { text })) => (DeltaKind::Text, text),
                Some(Ok(ModelStreamEvent::ReasoningDelta { text })) => (DeltaKind::Reasoning, text),
            };
            self.emit(EventBody::ModelDelta {
                step: self.tally.steps,
                kind,
                text,
            })
            .await?;
        }
    }
}

/// A hook failure as the run's error: `<hook>: <message>`, code `hook_error`.
pub(crate) fn hook_error(hook: &str, failure: crate::hooks::HookError) -> Exit {
    Exit::Error(AgentError::new(
        ErrorCode::HookError,
        format!("{hook}: {}", failure.message),
    ))
}
