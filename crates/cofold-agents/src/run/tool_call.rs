//! One tool call: look up, validate, `before_tool`, propose, policy, remembered
//! approval, execute.

use serde_json::{Value, json};

use super::model_step::hook_error;
use super::{Flow, Runner};
use crate::event::{Denial, EventBody};
use crate::hooks::{BeforeTool, RunInfo};
use crate::id::{Timestamp, new_id};
use crate::message::{ToolCall, ToolResult};
use crate::policy::{Behavior, DecideArgs, DenialBy};
use crate::question::Question;
use crate::store::{
    KvScope, StepPatch, StepRecord, StepStatus, ToolOriginal, ToolStep, ToolTransformed,
    approvals_key,
};
use crate::tool::{Tool, ToolContext, ToolError};

/// What the `beforeTool` hook made of a valid call.
enum Hooked {
    /// Go on with this input; `prompt` is set when the hook asked for a person's approval.
    Go {
        input: Value,
        prompt: Option<Option<String>>,
    },
    /// The call is answered (refused, stopped, or the run was stopped meanwhile).
    Done(CallResult),
}

/// What became of one call.
pub(crate) enum CallResult {
    /// The call has its result; `stop` carries a hook's stop reason.
    Answered {
        result: ToolResult,
        stop: Option<String>,
    },
    /// The call waits for a person's approval.
    NeedsApproval {
        tool: Tool,
        input: Value,
        prompt: Option<String>,
        /// Why the policy asks, when it said.
        risk: Option<String>,
    },
    /// The tool paused for answers; its step stays `started`.
    NeedsInput {
        tool: Tool,
        input: Value,
        questions: Vec<Question>,
        invocation_id: String,
        started_at: Timestamp,
    },
    /// The run was aborted during the execution; the step is `uncertain`.
    Aborted,
}

/// An error result the model reads.
pub(crate) fn error_result(call: &ToolCall, content: impl Into<String>) -> ToolResult {
    ToolResult {
        call_id: call.call_id.clone(),
        name: call.name.clone(),
        content: content.into(),
        is_error: true,
    }
}

/// Keeps at most `max` characters, then says how many were cut; never splits a character.
pub(crate) fn bound(content: String, max: usize) -> String {
    let total = content.chars().count();
    if total <= max {
        return content;
    }
    let cut = content
        .char_indices()
        .nth(max)
        .map_or(content.len(), |(at, _)| at);
    format!("{}\n…[truncated {} chars]", &content[..cut], total - max)
}

/// Milliseconds between two timestamps (0 when the clock says otherwise).
pub(crate) fn millis_since(start: &Timestamp) -> u64 {
    let micros = Timestamp::now().unix_micros() - start.unix_micros();
    u64::try_from(micros / 1000).unwrap_or(0)
}

impl Runner {
    /// Records a refusal on the tally.
    pub(crate) fn add_denial(
        &mut self,
        call: &ToolCall,
        input: Option<Value>,
        reason: &str,
        by: DenialBy,
    ) {
        self.tally.denials.push(Denial {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            input,
            reason: reason.to_owned(),
            by,
        });
    }

    /// Refuses a call: a denial, `tool.denied`, and an error result with the reason.
    async fn refuse(&mut self, call: &ToolCall, reason: String, by: DenialBy) -> Flow<CallResult> {
        self.add_denial(call, call.input.clone(), &reason, by);
        self.emit(EventBody::ToolDenied {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            reason: reason.clone(),
        })
        .await?;
        Ok(CallResult::Answered {
            result: error_result(call, reason),
            stop: None,
        })
    }

    async fn propose(&mut self, call: &ToolCall, subject: Option<String>) -> Flow<()> {
        self.emit(EventBody::ToolProposed {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            input: call.input.clone(),
            subject,
        })
        .await?;
        Ok(())
    }

    /// Decides and, when allowed, runs one call: the tool looked up, its input checked, the
    /// `beforeTool` hook and the policy asked, each of which may refuse it its own way.
    pub(crate) async fn one_call(&mut self, call: &ToolCall) -> Flow<CallResult> {
        let Some(tool) = self.offer.tool(&call.name) else {
            return self
                .refuse(
                    call,
                    format!("Unknown tool \"{}\"", call.name),
                    DenialBy::Invalid,
                )
                .await;
        };
        let input = match self.valid_input(call, &tool).await? {
            Ok(input) => input,
            Err(refused) => return Ok(refused),
        };
        let info = self.run_info();
        let (input, hook_prompt) = match self.before_tool(call, &tool, input, &info).await? {
            Hooked::Go { input, prompt } => (input, prompt),
            Hooked::Done(result) => return Ok(result),
        };
        self.propose(call, tool.subject(&input)).await?;
        let args = DecideArgs {
            tool: &tool,
            input: &input,
            run: &info,
        };
        let decided = self
            .unless_stopped("the policy".into(), self.agent.policy().decide(&args))
            .await;
        let Some(decision) = decided else {
            return Ok(CallResult::Aborted);
        };
        match decision.behavior {
            Behavior::Deny => {
                let reason = decision
                    .reason
                    .unwrap_or_else(|| format!("Denied by policy: {}", tool.name()));
                self.refuse(call, reason, DenialBy::Policy).await
            }
            Behavior::Allow if hook_prompt.is_none() => self.execute(call, &tool, input).await,
            Behavior::Ask | Behavior::Allow => {
                if self.remembered_approval(tool.name()).await? {
                    return self.execute(call, &tool, input).await;
                }
                let risk = (decision.behavior == Behavior::Ask)
                    .then_some(decision.reason)
                    .flatten();
                Ok(CallResult::NeedsApproval {
                    tool,
                    input,
                    prompt: hook_prompt.flatten(),
                    risk,
                })
            }
        }
    }

    /// The call's input, checked against the tool's schema (its defaults filled in), or the
    /// call refused.
    async fn valid_input(
        &mut self,
        call: &ToolCall,
        tool: &Tool,
    ) -> Flow<Result<Value, CallResult>> {
        let Some(raw_input) = call.input.clone() else {
            self.propose(call, None).await?;
            let refused = self
                .refuse(
                    call,
                    "Invalid arguments: not valid JSON".into(),
                    DenialBy::Invalid,
                )
                .await?;
            return Ok(Err(refused));
        };
        match tool.validate(&raw_input) {
            Ok(input) => Ok(Ok(input)),
            Err(issues) => {
                self.propose(call, None).await?;
                let reason = format!("Invalid arguments: {}", join_issues(&issues));
                Ok(Err(self.refuse(call, reason, DenialBy::Invalid).await?))
            }
        }
    }

    /// Asks the `beforeTool` hook about a valid call.
    async fn before_tool(
        &mut self,
        call: &ToolCall,
        tool: &Tool,
        input: Value,
        info: &RunInfo,
    ) -> Flow<Hooked> {
        let hooked = self
            .unless_stopped(
                "the beforeTool hook".into(),
                self.agent.hooks().before_tool(call, tool, info),
            )
            .await;
        let Some(hooked) = hooked else {
            return Ok(Hooked::Done(CallResult::Aborted));
        };
        match hooked {
            Err(message) => Err(hook_error("beforeTool", message)),
            Ok(BeforeTool::Allow) => Ok(Hooked::Go {
                input,
                prompt: None,
            }),
            Ok(BeforeTool::Deny { reason }) => {
                self.propose(call, tool.subject(&input)).await?;
                Ok(Hooked::Done(
                    self.refuse(call, reason, DenialBy::Hook).await?,
                ))
            }
            Ok(BeforeTool::Stop { reason }) => {
                self.propose(call, tool.subject(&input)).await?;
                self.add_denial(call, call.input.clone(), &reason, DenialBy::Hook);
                self.emit(EventBody::ToolDenied {
                    call_id: call.call_id.clone(),
                    name: call.name.clone(),
                    reason: reason.clone(),
                })
                .await?;
                let result = error_result(call, format!("Not executed: {reason}"));
                Ok(Hooked::Done(CallResult::Answered {
                    result,
                    stop: Some(reason),
                }))
            }
            Ok(BeforeTool::Modify { input: changed }) => match tool.validate(&changed) {
                Ok(valid) => Ok(Hooked::Go {
                    input: valid,
                    prompt: None,
                }),
                Err(issues) => {
                    self.propose(call, None).await?;
                    let reason = format!(
                        "Invalid arguments after hook modify: {}",
                        join_issues(&issues)
                    );
                    Ok(Hooked::Done(
                        self.refuse(call, reason, DenialBy::Invalid).await?,
                    ))
                }
            },
            Ok(BeforeTool::Approval { prompt }) => Ok(Hooked::Go {
                input,
                prompt: Some(prompt),
            }),
        }
    }

    /// Whether a person said "always" for this tool in this session.
    async fn remembered_approval(&self, tool: &str) -> Flow<bool> {
        let scope = KvScope::Agent {
            agent_id: self.agent.id().to_owned(),
        };
        let value = self
            .store
            .kv_get(&scope, &approvals_key(self.session_id(), tool))
            .await?;
        Ok(value == Some(Value::Bool(true)))
    }

    // Longer than 80 lines: the step record, the execution raced against the abort and its
    // bookkeeping must stay in this order around one await.
    /// Runs the tool once: step record, `tool.started`, the execution raced against the abort,
    /// the output bound, `after_tool`, the step patch and `tool.completed`.
    pub(crate) async fn execute(
        &mut self,
        call: &ToolCall,
        tool: &Tool,
        input: Value,
    ) -> Flow<CallResult> {
        self.tally.tool_calls += 1;
        let invocation_id = new_id();
        let started_at = Timestamp::now();
        let step = StepRecord::Tool(ToolStep {
            session_id: self.session_id().to_owned(),
            run_id: self.run_id().to_owned(),
            index: self.tally.step_index,
            invocation_id: invocation_id.clone(),
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            input: input.clone(),
            status: StepStatus::Started,
            original: None,
            transformed: None,
            detail: None,
            started_at: started_at.clone(),
            ended_at: None,
        });
        self.store.append_step(&step).await?;
        self.tally.step_index += 1;
        self.batch.ran(&call.call_id);
        self.emit(EventBody::ToolStarted {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            invocation_id: invocation_id.clone(),
        })
        .await?;

        let ctx = ToolContext {
            agent_id: self.agent.id().to_owned(),
            session_id: self.session_id().to_owned(),
            run_id: self.run_id().to_owned(),
            call_id: call.call_id.clone(),
            invocation_id: invocation_id.clone(),
            workspace: self.workspace.clone(),
            signal: self.signal(),
            kv: self.kv(),
            resources: self.agent.resources().clone(),
        };
        // On an abort the execution future is dropped where it stands (decision D12).
        let executed = self
            .unless_stopped(
                format!("tool \"{}\"", tool.name()),
                tool.execute(input.clone(), ctx),
            )
            .await;
        let original = match executed {
            None => {
                let patch = StepPatch {
                    status: Some(StepStatus::Uncertain),
                    ended_at: Some(Timestamp::now()),
                    ..StepPatch::default()
                };
                self.store
                    .update_step(&self.run_ref(), &invocation_id, &patch)
                    .await?;
                return Ok(CallResult::Aborted);
            }
            Some(Err(ToolError::NeedsInput { questions })) => {
                return Ok(CallResult::NeedsInput {
                    tool: tool.clone(),
                    input,
                    questions,
                    invocation_id,
                    started_at,
                });
            }
            Some(Err(ToolError::Failed { message, name })) => ToolOriginal {
                content: message,
                is_error: true,
                detail: Some(json!({ "name": name.unwrap_or_else(|| "Error".into()) })),
            },
            Some(Ok(output)) => ToolOriginal {
                content: output.content,
                is_error: false,
                detail: output.detail,
            },
        };
        self.finish_execution(call, tool, &invocation_id, &started_at, original)
            .await
    }

    /// Bounds the output, runs `after_tool`, patches the step and emits `tool.completed`.
    async fn finish_execution(
        &mut self,
        call: &ToolCall,
        tool: &Tool,
        invocation_id: &str,
        started_at: &Timestamp,
        original: ToolOriginal,
    ) -> Flow<CallResult> {
        let max = self.agent.limits().max_tool_output_chars;
        let bounded = bound(original.content.clone(), max);
        let info = self.run_info();
        let hooked = self
            .unless_stopped(
                "the afterTool hook".into(),
                self.agent.hooks().after_tool(
                    call,
                    tool,
                    bounded.clone(),
                    original.is_error,
                    &info,
                ),
            )
            .await;
        let Some(hooked) = hooked else {
            // The tool ran and its output is kept; the model is told the call was interrupted.
            let patch = ended(status_of(original.is_error), original);
            self.store
                .update_step(&self.run_ref(), invocation_id, &patch)
                .await?;
            return Ok(CallResult::Aborted);
        };
        let after = match hooked {
            Ok(after) => after,
            Err(message) => {
                let patch = ended(StepStatus::Failed, original);
                self.store
                    .update_step(&self.run_ref(), invocation_id, &patch)
                    .await?;
                return Err(hook_error("afterTool", message));
            }
        };
        // A hook's new text is bounded again; the text it kept already is.
        let content = if after.output == bounded {
            after.output
        } else {
            bound(after.output, max)
        };
        let is_error = after.is_error.unwrap_or(original.is_error);
        let transformed =
            (content != bounded || is_error != original.is_error).then(|| ToolTransformed {
                content: content.clone(),
                is_error,
            });
        let detail = after
            .stop
            .as_ref()
            .map(|reason| json!({ "stoppedBy": "afterTool", "reason": reason }));
        let patch = StepPatch {
            transformed,
            detail,
            ..ended(status_of(original.is_error), original)
        };
        self.store
            .update_step(&self.run_ref(), invocation_id, &patch)
            .await?;
        self.emit(EventBody::ToolCompleted {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            invocation_id: invocation_id.to_owned(),
            content: content.clone(),
            is_error,
            duration_ms: millis_since(started_at),
        })
        .await?;
        let result = ToolResult {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            content,
            is_error,
        };
        Ok(CallResult::Answered {
            result,
            stop: after.stop,
        })
    }
}

fn join_issues(issues: &[crate::schema::Issue]) -> String {
    issues
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join("; ")
}

/// The patch that ends a step with the tool's own output.
fn ended(status: StepStatus, original: ToolOriginal) -> StepPatch {
    StepPatch {
        status: Some(status),
        original: Some(original),
        ended_at: Some(Timestamp::now()),
        ..StepPatch::default()
    }
}

/// A finished step's status, by whether the tool said its output is an error.
fn status_of(is_error: bool) -> StepStatus {
    if is_error {
        StepStatus::Failed
    } else {
        StepStatus::Completed
    }
}

#[cfg(test)]
mod tests {
    use super::bound;

    #[test]
    fn bound_cuts_whole_characters_and_counts_what_it_cut() {
        assert_eq!(
            bound("a".repeat(50), 10),
            format!("{}\n…[truncated 40 chars]", "a".repeat(10))
        );
        assert_eq!(bound("short".into(), 10), "short");
        assert_eq!(bound("ééééé".into(), 2), "éé\n…[truncated 3 chars]");
    }
}
