//! Events a run emits, the outcome it ends with, and the commands a caller sends it.
//!
//! Every event is persisted before it is published, so the stored list and the live
//! stream are the same sequence. The JSON form of an event is its envelope fields followed by `type`
//! and the body's own fields, flat.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ErrorInfo;
use crate::id::Timestamp;
use crate::message::{Message, Part};
use crate::model::{FinishReason, Usage};
use crate::question::Question;

// One status type, one request kind and one refusal record for the whole crate.
pub use crate::status::{Denial, RequestKind, RunStatus};

/// One event of a run: the envelope (sequence number, ids, time) and what happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// 1, 2, 3, … per run, contiguous.
    pub seq: u64,
    /// The run that emitted the event.
    pub run_id: String,
    /// The session the run belongs to.
    pub session_id: String,
    /// The agent driving the run.
    pub agent_id: String,
    /// When the event was emitted.
    pub at: Timestamp,
    /// What happened.
    #[serde(flatten)]
    pub body: EventBody,
}

impl Event {
    /// The event's wire name, such as `run.started`.
    pub fn type_name(&self) -> &'static str {
        self.body.type_name()
    }

    /// The outcome carried by a `run.finished` event, if this is one.
    pub fn finished_outcome(&self) -> Option<&RunOutcome> {
        match &self.body {
            EventBody::RunFinished { outcome } => Some(outcome),
            _ => None,
        }
    }
}

/// Whether a streamed fragment is answer text or reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeltaKind {
    /// Answer text.
    Text,
    /// Reasoning ("thinking") text.
    Reasoning,
}

/// How a person resolved an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalDecision {
    /// The call may run.
    Approve,
    /// The call is refused.
    Deny,
}

/// The body of an event; the JSON tag is `type`. Exhaustive on purpose: consumers match every
/// variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum EventBody {
    /// The input message was written and the loop is starting.
    #[serde(rename = "run.started")]
    RunStarted {
        /// The run's input message.
        input: Message,
    },
    /// A steering message was appended before a model step.
    #[serde(rename = "run.steered")]
    RunSteered {
        /// The appended steer.
        message: Message,
    },
    /// A model step record was written; the model is about to be asked.
    #[serde(rename = "model.started")]
    ModelStarted {
        /// The 1-based model step number.
        step: u32,
    },
    /// A streamed fragment of text or reasoning.
    #[serde(rename = "model.delta")]
    ModelDelta {
        /// The model step the fragment belongs to.
        step: u32,
        /// Text or reasoning.
        kind: DeltaKind,
        /// The fragment.
        text: String,
    },
    /// The model answered and its message is in the transcript.
    #[serde(rename = "model.completed")]
    ModelCompleted {
        /// The model step number.
        step: u32,
        /// The assistant message.
        message: Message,
        /// Tokens the step used.
        usage: Usage,
        /// Why the model stopped.
        finish: FinishReason,
    },
    /// A call of a known tool was proposed by the model.
    #[serde(rename = "tool.proposed")]
    #[serde(rename_all = "camelCase")]
    ToolProposed {
        /// The model's call id.
        call_id: String,
        /// The tool name.
        name: String,
        /// The model's parsed arguments; absent when they were not JSON.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<Value>,
        /// What the call acts on, from the tool's subject function.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subject: Option<String>,
    },
    /// A call was refused without running.
    #[serde(rename = "tool.denied")]
    #[serde(rename_all = "camelCase")]
    ToolDenied {
        /// The model's call id.
        call_id: String,
        /// The tool name as the model wrote it.
        name: String,
        /// Why it was refused.
        reason: String,
    },
    /// A tool began executing (its step record is written).
    #[serde(rename = "tool.started")]
    #[serde(rename_all = "camelCase")]
    ToolStarted {
        /// The model's call id.
        call_id: String,
        /// The tool name.
        name: String,
        /// The id of this execution.
        invocation_id: String,
    },
    /// A tool finished; `content` is what the model reads.
    #[serde(rename = "tool.completed")]
    #[serde(rename_all = "camelCase")]
    ToolCompleted {
        /// The model's call id.
        call_id: String,
        /// The tool name.
        name: String,
        /// The id of this execution.
        invocation_id: String,
        /// The result content, bounded and possibly changed by a hook.
        content: String,
        /// Whether the result is an error.
        is_error: bool,
        /// Time from the start of the execution to its result.
        duration_ms: u64,
    },
    /// A call waits for a person's approval.
    #[serde(rename = "approval.requested")]
    #[serde(rename_all = "camelCase")]
    ApprovalRequested {
        /// The pending request's id.
        request_id: String,
        /// The model's call id.
        call_id: String,
        /// The tool name.
        name: String,
        /// The validated input the tool would receive.
        input: Value,
        /// Extra words for the person, from a hook.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
        /// Why the policy asks, one sentence, when it said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        risk: Option<String>,
    },
    /// An approval request was answered.
    #[serde(rename = "approval.resolved")]
    #[serde(rename_all = "camelCase")]
    ApprovalResolved {
        /// The request answered.
        request_id: String,
        /// Approve or deny.
        decision: ApprovalDecision,
        /// The deny reason, when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A tool asked questions and waits for answers.
    #[serde(rename = "input.requested")]
    #[serde(rename_all = "camelCase")]
    InputRequested {
        /// The pending request's id.
        request_id: String,
        /// The model's call id.
        call_id: String,
        /// The questions.
        questions: Vec<Question>,
    },
    /// Answers to an input request were stored.
    #[serde(rename = "input.resolved")]
    #[serde(rename_all = "camelCase")]
    InputResolved {
        /// The request answered.
        request_id: String,
        /// Question id to answer (a string or a list of strings).
        answers: Value,
    },
    /// A person declined to answer an input request.
    #[serde(rename = "input.declined")]
    #[serde(rename_all = "camelCase")]
    InputDeclined {
        /// The request declined.
        request_id: String,
        /// Why, when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The run waits at a pause.
    #[serde(rename = "run.paused")]
    #[serde(rename_all = "camelCase")]
    RunPaused {
        /// The open request.
        request_id: String,
        /// Approval or input.
        kind: RequestKind,
    },
    /// The pause was resolved and the run goes on.
    #[serde(rename = "run.resumed")]
    #[serde(rename_all = "camelCase")]
    RunResumed {
        /// The request that was resolved.
        request_id: String,
    },
    /// A summary message was appended.
    #[serde(rename = "context.compacted")]
    #[serde(rename_all = "camelCase")]
    ContextCompacted {
        /// The summary message's id.
        message_id: String,
        /// How many messages the summary covers now.
        summarized: u32,
        /// How many recent messages were kept verbatim.
        kept: u32,
        /// The history estimate before the summary.
        estimated_tokens: u64,
        /// The estimate of the context view after it.
        after_tokens: u64,
    },
    /// The run ended, or paused (an `awaiting` outcome).
    #[serde(rename = "run.finished")]
    RunFinished {
        /// How it ended.
        outcome: RunOutcome,
    },
}

impl EventBody {
    /// The wire name of this body's `type`.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventBody::RunStarted { .. } => "run.started",
            EventBody::RunSteered { .. } => "run.steered",
            EventBody::ModelStarted { .. } => "model.started",
            EventBody::ModelDelta { .. } => "model.delta",
            EventBody::ModelCompleted { .. } => "model.completed",
            EventBody::ToolProposed { .. } => "tool.proposed",
            EventBody::ToolDenied { .. } => "tool.denied",
            EventBody::ToolStarted { .. } => "tool.started",
            EventBody::ToolCompleted { .. } => "tool.completed",
            EventBody::ApprovalRequested { .. } => "approval.requested",
            EventBody::ApprovalResolved { .. } => "approval.resolved",
            EventBody::InputRequested { .. } => "input.requested",
            EventBody::InputResolved { .. } => "input.resolved",
            EventBody::InputDeclined { .. } => "input.declined",
            EventBody::RunPaused { .. } => "run.paused",
            EventBody::RunResumed { .. } => "run.resumed",
            EventBody::ContextCompacted { .. } => "context.compacted",
            EventBody::RunFinished { .. } => "run.finished",
        }
    }
}

/// Why a run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// `maxSteps` was reached.
    MaxSteps,
    /// `maxToolCalls` was reached.
    MaxToolCalls,
    /// `timeoutMs` ran out.
    Timeout,
    /// A model hook aborted.
    Policy,
    /// A tool hook stopped the run.
    Hook,
    /// `maxCost` was reached.
    MaxCost,
}

/// How a run ended (or paused), without its tally. JSON tag `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum OutcomeKind {
    /// The model gave a final answer (for `compact`, the summary).
    Completed {
        /// The final assistant message.
        message: Message,
    },
    /// The run waits for a person.
    #[serde(rename_all = "camelCase")]
    Awaiting {
        /// The session.
        session_id: String,
        /// The run.
        run_id: String,
        /// The open request.
        request_id: String,
        /// Approval or input.
        kind: RequestKind,
    },
    /// A limit, a hook or a timeout stopped the run.
    Stopped {
        /// Which.
        reason: StopReason,
    },
    /// A cancel ended the run.
    Cancelled {
        /// The cancel's reason, when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// An error ended the run.
    Failed {
        /// What went wrong.
        error: ErrorInfo,
    },
}

/// The outcome of a run: how it ended plus its tally.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOutcome {
    /// How it ended.
    #[serde(flatten)]
    pub kind: OutcomeKind,
    /// Tokens used by every model step, summaries included.
    pub usage: Usage,
    /// Model steps taken.
    pub steps: u32,
    /// Cost in USD; present only when the model has pricing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Refused calls in order; `[]` when none.
    #[serde(default)]
    pub denials: Vec<Denial>,
}

impl RunOutcome {
    /// The run status this outcome stands for.
    pub fn status(&self) -> RunStatus {
        match self.kind {
            OutcomeKind::Completed { .. } => RunStatus::Completed,
            OutcomeKind::Awaiting { .. } => RunStatus::Awaiting,
            OutcomeKind::Stopped { .. } => RunStatus::Stopped,
            OutcomeKind::Cancelled { .. } => RunStatus::Cancelled,
            OutcomeKind::Failed { .. } => RunStatus::Failed,
        }
    }
}

/// A command a caller sends to a run through its handle. JSON tag `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Command {
    /// Stop the run.
    Cancel {
        /// Why, carried onto the `cancelled` outcome.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Add a user message before the next model step.
    Steer {
        /// The steer's text.
        text: String,
        /// Extra text and image parts.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parts: Option<Vec<Part>>,
    },
    /// Let the paused call run.
    #[serde(rename_all = "camelCase")]
    Approve {
        /// The open request.
        request_id: String,
        /// An edited input to run with instead.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        input: Option<Value>,
        /// Remember the approval for this tool in this session.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        always_approve: Option<bool>,
    },
    /// Refuse the paused call, or decline its questions.
    #[serde(rename_all = "camelCase")]
    Deny {
        /// The open request.
        request_id: String,
        /// Why; the model reads it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Answer the paused call's questions.
    #[serde(rename_all = "camelCase")]
    Answer {
        /// The open request.
        request_id: String,
        /// Question id to a string or a list of strings.
        answers: Value,
    },
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::model::Usage;
    use serde_json::json;

    fn event(body: EventBody) -> Event {
        Event {
            seq: 1,
            run_id: "r".into(),
            session_id: "s".into(),
            agent_id: "a".into(),
            at: Timestamp::now(),
            body,
        }
    }

    #[test]
    fn events_are_flat_with_the_envelope_first_and_optional_fields_absent() {
        let proposed = event(EventBody::ToolProposed {
            call_id: "c".into(),
            name: "echo".into(),
            input: None,
            subject: None,
        });
        let value = serde_json::to_value(&proposed).unwrap();
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "seq",
                "runId",
                "sessionId",
                "agentId",
                "at",
                "type",
                "callId",
                "name"
            ]
        );
        assert_eq!(value["type"], "tool.proposed");
        let back: Event = serde_json::from_value(value).unwrap();
        assert_eq!(back, proposed);
        assert_eq!(back.type_name(), "tool.proposed");
    }

    #[test]
    fn outcomes_carry_status_then_fields_then_the_tally() {
        let outcome = RunOutcome {
            kind: OutcomeKind::Stopped {
                reason: StopReason::MaxToolCalls,
            },
            usage: Usage::new(1, 2),
            steps: 3,
            cost: None,
            denials: Vec::new(),
        };
        let value = serde_json::to_value(&outcome).unwrap();
        assert_eq!(
            value,
            json!({ "status": "stopped", "reason": "max_tool_calls", "usage": { "inputTokens": 1, "outputTokens": 2 }, "steps": 3, "denials": [] })
        );
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys[0], "status");
        let finished = event(EventBody::RunFinished {
            outcome: outcome.clone(),
        });
        let back: Event = serde_json::from_value(serde_json::to_value(&finished).unwrap()).unwrap();
        assert_eq!(back.finished_outcome(), Some(&outcome));
        assert_eq!(outcome.status(), RunStatus::Stopped);
    }

    #[test]
    fn commands_read_their_wire_form() {
        let approve: Command = serde_json::from_value(
            json!({ "type": "approve", "requestId": "q", "alwaysApprove": true }),
        )
        .unwrap();
        assert_eq!(
            approve,
            Command::Approve {
                request_id: "q".into(),
                input: None,
                always_approve: Some(true)
            }
        );
        let steer: Command =
            serde_json::from_value(json!({ "type": "steer", "text": "hi" })).unwrap();
        assert_eq!(
            steer,
            Command::Steer {
                text: "hi".into(),
                parts: None
            }
        );
        let cancel = serde_json::to_value(Command::Cancel { reason: None }).unwrap();
        assert_eq!(cancel, json!({ "type": "cancel" }));
        let answer = serde_json::to_value(Command::Answer {
            request_id: "q".into(),
            answers: json!({ "a": "b" }),
        });
        assert_eq!(
            answer.unwrap(),
            json!({ "type": "answer", "requestId": "q", "answers": { "a": "b" } })
        );
    }
}
