//! Pausing for a person and applying their command.

use serde_json::{Value, json};

use super::command_check::check_edited_input;
use super::tool_call::{CallResult, error_result, millis_since};
use super::{Exit, Flow, OpenRequest, Runner, TURN_STOPPED, stored_outcome};
use crate::error::{AgentError, ErrorCode};
use crate::event::{ApprovalDecision, Command, EventBody, OutcomeKind, RequestKind, RunStatus};
use crate::id::{Timestamp, new_id};
use crate::message::{ToolCall, ToolResult};
use crate::policy::{Behavior, DecideArgs, DenialBy};
use crate::question::{Question, render_answers};
use crate::store::{
    KvScope, PendingRequest, RunUpdate, StepPatch, StepStatus, ToolOriginal, approvals_key,
};
use crate::tool::Tool;

/// The reason a person's deny carries when they gave none.
const DENIED_BY_USER: &str = "Denied by the user";

/// The reason a declined question carries when they gave none.
const DECLINED: &str = "The user declined to answer";

/// A call waiting at a pause.
pub(crate) struct Parked {
    pub(crate) request_id: String,
    pub(crate) kind: RequestKind,
    pub(crate) call: ToolCall,
    /// The call's tool; `None` when a resumed run no longer has it.
    pub(crate) tool: Option<Tool>,
    /// The validated (possibly hook-modified) input.
    pub(crate) input: Value,
    pub(crate) questions: Vec<Question>,
    /// For an input request: the tool step left `started` and when it started.
    pub(crate) invocation_id: Option<String>,
    pub(crate) started_at: Option<Timestamp>,
}

impl Parked {
    pub(crate) fn open_request(&self) -> OpenRequest {
        OpenRequest {
            request_id: self.request_id.clone(),
            kind: self.kind,
            tool: self.tool.clone(),
            questions: self.questions.clone(),
        }
    }
}

/// Why applying a command did not get through.
enum Refused {
    /// Another process resolved the request: detach, write nothing.
    Lost,
    /// A write failed: the run fails.
    Failed(AgentError),
}

/// What a pause tells the person beside the call: a hook's prompt and the policy's reason.
#[derive(Default)]
struct Words {
    prompt: Option<String>,
    risk: Option<String>,
}

/// The pause of a call that waits for a person: what is kept to go on, the approval's words and
/// the stored request's payload.
fn parked_of(
    call: &ToolCall,
    waiting: CallResult,
    request_id: &str,
) -> Result<(Parked, Words, Value), AgentError> {
    match waiting {
        CallResult::NeedsApproval {
            tool,
            input,
            prompt,
            risk,
        } => {
            let mut payload = json!({ "name": call.name, "input": input });
            if let Some(prompt) = &prompt {
                payload["prompt"] = json!(prompt);
            }
            if let Some(risk) = &risk {
                payload["risk"] = json!(risk);
            }
            let parked = Parked {
                request_id: request_id.to_owned(),
                kind: RequestKind::Approval,
                call: call.clone(),
                tool: Some(tool),
                input,
                questions: Vec::new(),
                invocation_id: None,
                started_at: None,
            };
            Ok((parked, Words { prompt, risk }, payload))
        }
        CallResult::NeedsInput {
            tool,
            input,
            questions,
            invocation_id,
            started_at,
        } => {
            let payload = json!({
                "name": call.name, "input": input, "questions": questions, "invocationId": invocation_id,
            });
            let parked = Parked {
                request_id: request_id.to_owned(),
                kind: RequestKind::Input,
                call: call.clone(),
                tool: Some(tool),
                input,
                questions,
                invocation_id: Some(invocation_id),
                started_at: Some(started_at),
            };
            Ok((parked, Words::default(), payload))
        }
        _ => Err(AgentError::internal("a call that needs nobody was paused")),
    }
}

impl Runner {
    // Long: the request, the record, the event and the released claim are written in an order a
    // crash between any two must find consistent.
    /// Writes the pause and announces it.
    pub(crate) async fn pause(&mut self, call: &ToolCall, waiting: CallResult) -> Flow<Parked> {
        let request_id = new_id();
        let (parked, words, payload) =
            parked_of(call, waiting, &request_id).map_err(Exit::Error)?;
        let request = PendingRequest {
            request_id: request_id.clone(),
            session_id: self.session_id().to_owned(),
            run_id: self.run_id().to_owned(),
            kind: parked.kind,
            call_id: Some(call.call_id.clone()),
            payload,
            created_at: Timestamp::now(),
            resolved_at: None,
            resolution: None,
        };
        self.store.create_request(&request).await?;
        let outcome = self.outcome(OutcomeKind::Awaiting {
            session_id: self.session_id().to_owned(),
            run_id: self.run_id().to_owned(),
            request_id: request_id.clone(),
            kind: parked.kind,
        });
        self.store
            .update_run(RunUpdate {
                run: self.run_ref(),
                status: Some(RunStatus::Awaiting),
                pending_request_id: Some(Some(request_id.clone())),
                usage: Some(outcome.usage),
                steps: Some(outcome.steps),
                cost: outcome.cost,
                denials: Some(outcome.denials.clone()),
                last_message_id: None,
            })
            .await?;
        self.stop_heartbeat();
        // The acceptor is in place before anything is announced, so an observer may answer at once;
        // the command is only taken after the pause's `run.finished` (decision D3).
        self.side.shared.open_request(parked.open_request());
        let requested = match parked.kind {
            RequestKind::Approval => EventBody::ApprovalRequested {
                request_id: request_id.clone(),
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                input: parked.input.clone(),
                prompt: words.prompt,
                risk: words.risk,
            },
            RequestKind::Input => EventBody::InputRequested {
                request_id: request_id.clone(),
                call_id: call.call_id.clone(),
                questions: parked.questions.clone(),
            },
        };
        self.emit(requested).await?;
        self.emit(EventBody::RunPaused {
            request_id,
            kind: parked.kind,
        })
        .await?;
        self.emit(EventBody::RunFinished { outcome }).await?;
        Ok(parked)
    }

    /// Waits for a command, a cancel or a detach, and applies what comes.
    pub(crate) async fn wait_and_apply(&mut self, parked: Parked) -> Flow<CallResult> {
        let signal = self.signal();
        let detach = self.side.shared.detach.clone();
        let (command, reply) = tokio::select! {
            biased;
            _ = detach.cancelled() => return Err(self.detach_exit().await),
            // A command accepted before a cancel is applied first; the loop sees the cancel next.
            received = self.side.commands.recv() => match received {
                Some((command, reply)) => (command, Some(reply)),
                None => return Err(Exit::Error(AgentError::internal("the run's handle went away"))),
            },
            _ = signal.cancelled() => {
                self.side.shared.begin_resolving(&parked.request_id);
                let deny = Command::Deny { request_id: parked.request_id.clone(), reason: Some(TURN_STOPPED.into()) };
                (deny, None)
            }
        };
        match self.record_resolution(&parked, &command).await {
            Ok(()) => {}
            Err(Refused::Lost) => {
                if let Some(reply) = reply {
                    let _ = reply.send(Err(AgentError::not_found(format!(
                        "request {} was already resolved elsewhere",
                        parked.request_id
                    ))));
                }
                return Err(self.detach_exit().await);
            }
            Err(Refused::Failed(error)) => {
                if let Some(reply) = reply {
                    let _ = reply.send(Err(AgentError::new(error.code, error.message.clone())));
                }
                return Err(Exit::Error(error));
            }
        }
        self.side.shared.resume_running();
        self.start_heartbeat();
        if let Some(reply) = reply {
            let _ = reply.send(Ok(()));
        }
        self.effect(parked, command).await
    }

    /// Applies an answer: the resolution, its event, the record back to running.
    async fn record_resolution(
        &mut self,
        parked: &Parked,
        command: &Command,
    ) -> Result<(), Refused> {
        let run = self.run_ref();
        match self.store.get_request(&run, &parked.request_id).await {
            Ok(Some(request)) if request.resolution.is_none() => {}
            Ok(_) => return Err(Refused::Lost),
            Err(error) => return Err(Refused::Failed(error)),
        }
        let resolution = serde_json::to_value(command).unwrap_or(Value::Null);
        if let Err(error) = self
            .store
            .resolve_request(&run, &parked.request_id, resolution)
            .await
        {
            return match self.store.get_request(&run, &parked.request_id).await {
                Ok(Some(request)) if request.resolution.is_some() => Err(Refused::Lost),
                _ => Err(Refused::Failed(error)),
            };
        }
        let request_id = parked.request_id.clone();
        let resolved = match (parked.kind, command) {
            (RequestKind::Approval, Command::Deny { reason, .. }) => EventBody::ApprovalResolved {
                request_id,
                decision: ApprovalDecision::Deny,
                reason: reason.clone(),
            },
            (RequestKind::Approval, _) => EventBody::ApprovalResolved {
                request_id,
                decision: ApprovalDecision::Approve,
                reason: None,
            },
            (RequestKind::Input, Command::Answer { answers, .. }) => EventBody::InputResolved {
                request_id,
                answers: answers.clone(),
            },
            (RequestKind::Input, Command::Deny { reason, .. }) => EventBody::InputDeclined {
                request_id,
                reason: reason.clone(),
            },
            (RequestKind::Input, _) => {
                return Err(Refused::Failed(AgentError::invalid_options(
                    "an input request takes answer or deny",
                )));
            }
        };
        let written = async {
            self.emit(resolved).await?;
            self.store
                .update_run(RunUpdate {
                    run: self.run_ref(),
                    status: Some(RunStatus::Running),
                    pending_request_id: Some(None),
                    usage: None,
                    steps: None,
                    cost: None,
                    denials: None,
                    last_message_id: None,
                })
                .await?;
            self.emit(EventBody::RunResumed {
                request_id: parked.request_id.clone(),
            })
            .await
        }
        .await;
        written.map_err(Refused::Failed)
    }

    /// What the command does to the paused call.
    async fn effect(&mut self, parked: Parked, command: Command) -> Flow<CallResult> {
        let call = parked.call.clone();
        match (parked.kind, command) {
            (
                RequestKind::Approval,
                Command::Approve {
                    input,
                    always_approve,
                    ..
                },
            ) => {
                let Some(tool) = parked.tool.clone() else {
                    return Err(Exit::Error(AgentError::not_found(format!(
                        "tool \"{}\" is no longer offered",
                        call.name
                    ))));
                };
                if always_approve == Some(true) {
                    let scope = KvScope::Agent {
                        agent_id: self.agent.id().to_owned(),
                    };
                    self.store
                        .kv_set(
                            &scope,
                            &approvals_key(self.session_id(), tool.name()),
                            Value::Bool(true),
                        )
                        .await?;
                }
                let Some(edited) = input else {
                    return self.execute(&call, &tool, parked.input.clone()).await;
                };
                let edited = check_edited_input(Some(&tool), &edited)?;
                if edited == parked.input {
                    return self.execute(&call, &tool, edited).await;
                }
                self.run_edited(&call, &tool, edited).await
            }
            (RequestKind::Approval, Command::Deny { reason, .. }) => {
                let reason = reason.unwrap_or_else(|| DENIED_BY_USER.into());
                self.add_denial(&call, Some(parked.input.clone()), &reason, DenialBy::User);
                Ok(CallResult::Answered {
                    result: error_result(&call, reason),
                    stop: None,
                })
            }
            (RequestKind::Input, Command::Answer { answers, .. }) => {
                let content = render_answers(&parked.questions, &answers);
                let original = ToolOriginal {
                    content,
                    is_error: false,
                    detail: Some(json!({ "answers": answers })),
                };
                self.close_input_step(&parked, original, StepStatus::Completed)
                    .await
            }
            (RequestKind::Input, Command::Deny { reason, .. }) => {
                let reason = reason.unwrap_or_else(|| DECLINED.into());
                self.add_denial(&call, Some(parked.input.clone()), &reason, DenialBy::User);
                let original = ToolOriginal {
                    content: reason,
                    is_error: true,
                    detail: None,
                };
                self.close_input_step(&parked, original, StepStatus::Failed)
                    .await
            }
            _ => Err(Exit::Error(AgentError::internal(
                "a command of the wrong kind reached the paused call",
            ))),
        }
    }

    /// Runs a call whose input the person changed before approving. The policy judges the new
    /// input again, since the approval was given to a question about the old one: a refusal
    /// stands, an ask is answered by that approval. The model reads what ran, since its own
    /// call said otherwise.
    async fn run_edited(
        &mut self,
        call: &ToolCall,
        tool: &Tool,
        edited: Value,
    ) -> Flow<CallResult> {
        let info = self.run_info();
        let args = DecideArgs {
            tool,
            input: &edited,
            run: &info,
        };
        let decided = self
            .unless_stopped("the policy".into(), self.agent.policy().decide(&args))
            .await;
        let Some(decision) = decided else {
            return Ok(CallResult::Aborted);
        };
        if decision.behavior == Behavior::Deny {
            let reason = format!(
                "{} (the input as the person edited it)",
                decision.deny_reason(tool.name())
            );
            self.add_denial(call, Some(edited), &reason, DenialBy::Policy);
            self.emit(EventBody::ToolDenied {
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                reason: reason.clone(),
            })
            .await?;
            return Ok(CallResult::Answered {
                result: error_result(call, reason),
                stop: None,
            });
        }
        let shown = super::tool_call::bound(edited.to_string(), 4000);
        let mut done = self.execute(call, tool, edited).await?;
        if let CallResult::Answered { result, .. } = &mut done {
            result.content = format!(
                "The person changed this call's input before approving it; it ran with {shown}.\n{}",
                result.content
            );
        }
        Ok(done)
    }

    /// Ends the `started` step of an input request and announces its result.
    async fn close_input_step(
        &mut self,
        parked: &Parked,
        original: ToolOriginal,
        status: StepStatus,
    ) -> Flow<CallResult> {
        let call = &parked.call;
        let invocation_id = parked.invocation_id.clone().unwrap_or_default();
        let started_at = parked.started_at.clone().unwrap_or_else(Timestamp::now);
        let result = ToolResult {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            content: original.content.clone(),
            is_error: original.is_error,
        };
        let patch = StepPatch {
            status: Some(status),
            original: Some(original),
            ended_at: Some(Timestamp::now()),
            ..StepPatch::default()
        };
        self.store
            .update_step(&self.run_ref(), &invocation_id, &patch)
            .await?;
        self.emit(EventBody::ToolCompleted {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            invocation_id,
            content: result.content.clone(),
            is_error: result.is_error,
            duration_ms: millis_since(&started_at),
        })
        .await?;
        Ok(CallResult::Answered { result, stop: None })
    }

    /// Leaves a pause without writing: drop the hold, read what is stored, settle with the
    /// stored outcome.
    pub(crate) async fn detach_exit(&mut self) -> Exit {
        self.hold = None;
        self.stop_heartbeat();
        let events = self
            .store
            .list_events(&self.run_ref(), None)
            .await
            .unwrap_or_default();
        let outcome = stored_outcome(&events).unwrap_or_else(|| {
            self.outcome(OutcomeKind::Failed {
                error: AgentError::new(ErrorCode::Interrupted, "the run left no outcome").info(),
            })
        });
        Exit::Settle(outcome)
    }
}
