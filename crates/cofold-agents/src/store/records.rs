//! The records a [`Store`](super::Store) keeps, in their on-disk JSON shape (camelCase fields,
//! optional fields absent rather than `null`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::id::Timestamp;
use crate::model::Usage;
use crate::status::Denial;
pub use crate::status::{RequestKind, RunStatus};

/// Names one run inside one session. Every run-level store call carries both ids, so a run id
/// reused by a fork in another session never reaches the wrong record.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRef {
    /// The session that owns the run.
    pub session_id: String,
    /// The run inside that session.
    pub run_id: String,
}

impl RunRef {
    /// A reference to `run_id` inside `session_id`.
    pub fn new(session_id: impl Into<String>, run_id: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            run_id: run_id.into(),
        }
    }
}

/// One session: who runs it and where. The transcript lives beside it, never inside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRecord {
    /// The session id.
    pub session_id: String,
    /// The agent the session was created for.
    pub agent_id: String,
    /// The workspace folder, absent when the session has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// When the session was created.
    pub created_at: Timestamp,
    /// When a message was last appended or the session was last cut.
    pub updated_at: Timestamp,
    /// The run holding the writer claim, if any (filled from the claim on read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_writer_run_id: Option<String>,
    /// The process id of the claim holder; only the file store knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_writer_pid: Option<u32>,
}

/// What `create_session` needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSession {
    /// The id to create; refused with `already_exists` when taken.
    pub session_id: String,
    /// The agent the session belongs to.
    pub agent_id: String,
    /// The workspace folder, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
}

/// Filters for `list_sessions`. Every field left `None` filters nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionQuery {
    /// Only sessions whose workspace string equals this exactly.
    pub workspace: Option<String>,
    /// Only sessions of this agent.
    pub agent_id: Option<String>,
    /// At most this many sessions (the newest).
    pub limit: Option<usize>,
}

/// One run of a session: its status and its tally. Events, steps and requests live beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    /// The run id.
    pub run_id: String,
    /// The session that owns the run.
    pub session_id: String,
    /// The agent running it.
    pub agent_id: String,
    /// The model reference the run used, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Where the run stands.
    pub status: RunStatus,
    /// When the run was created.
    pub created_at: Timestamp,
    /// When the record last changed.
    pub updated_at: Timestamp,
    /// The request the run waits on while `awaiting`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_request_id: Option<String>,
    /// Tokens used so far.
    pub usage: Usage,
    /// Cost in USD; absent means unknown (never a default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Model steps taken so far.
    pub steps: u32,
    /// Calls refused so far, in order; a record stored without the field reads back empty.
    #[serde(default)]
    pub denials: Vec<Denial>,
    /// The run's input message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_message_id: Option<String>,
    /// The last message the run appended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_message_id: Option<String>,
}

/// A change to a run record: fields left `None` are not touched.
#[derive(Debug, Clone, PartialEq)]
pub struct RunUpdate {
    /// The run to change.
    pub run: RunRef,
    /// The new status.
    pub status: Option<RunStatus>,
    /// `None` leaves the pending request, `Some(None)` clears it, `Some(Some(id))` sets it.
    pub pending_request_id: Option<Option<String>>,
    /// New usage.
    pub usage: Option<Usage>,
    /// New step count.
    pub steps: Option<u32>,
    /// New cost in USD.
    pub cost: Option<f64>,
    /// New denials list.
    pub denials: Option<Vec<Denial>>,
    /// New last message id.
    pub last_message_id: Option<String>,
}

impl RunUpdate {
    /// An update of `run` that changes nothing yet; set the fields to write.
    pub fn new(run: RunRef) -> Self {
        Self {
            run,
            status: None,
            pending_request_id: None,
            usage: None,
            steps: None,
            cost: None,
            denials: None,
            last_message_id: None,
        }
    }

    /// Writes the present fields onto `record` (not `updatedAt`; the store stamps that).
    pub fn apply_to(&self, record: &mut RunRecord) {
        if let Some(status) = self.status {
            record.status = status;
        }
        if let Some(pending) = &self.pending_request_id {
            record.pending_request_id = pending.clone();
        }
        if let Some(usage) = &self.usage {
            record.usage = *usage;
        }
        if let Some(steps) = self.steps {
            record.steps = steps;
        }
        if let Some(cost) = self.cost {
            record.cost = Some(cost);
        }
        if let Some(denials) = &self.denials {
            record.denials = denials.clone();
        }
        if let Some(last) = &self.last_message_id {
            record.last_message_id = Some(last.clone());
        }
    }
}

/// Where a step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Written before the work began.
    Started,
    /// The work ended well.
    Completed,
    /// The work ended with an error.
    Failed,
    /// The process died during a tool call: nobody knows whether it ran.
    Uncertain,
}

/// What a tool returned, before any hook changed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolOriginal {
    /// The tool's full output.
    pub content: String,
    /// Whether the tool reported an error.
    pub is_error: bool,
    /// Structured detail the tool attached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
}

/// What the model reads after bounding and hooks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolTransformed {
    /// The content the model reads.
    pub content: String,
    /// Whether it is an error result.
    pub is_error: bool,
}

/// A model step: one request to the model and its reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelStep {
    /// The session of the run.
    pub session_id: String,
    /// The run that took the step.
    pub run_id: String,
    /// The step's position among the run's steps, from 0.
    pub index: u32,
    /// The step's own id.
    pub invocation_id: String,
    /// Where the step stands.
    pub status: StepStatus,
    /// The model request (without its cancel signal), as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
    /// The model reply (without `raw`), as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<Value>,
    /// A hook abort, an adapter error summary or compaction counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
    /// When the step began.
    pub started_at: Timestamp,
    /// When the step ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Timestamp>,
}

/// A tool step: one execution of one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolStep {
    /// The session of the run.
    pub session_id: String,
    /// The run that took the step.
    pub run_id: String,
    /// The step's position among the run's steps, from 0.
    pub index: u32,
    /// The step's own id.
    pub invocation_id: String,
    /// The model's call id.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The validated input.
    pub input: Value,
    /// Where the step stands.
    pub status: StepStatus,
    /// What the tool returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original: Option<ToolOriginal>,
    /// What the model read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transformed: Option<ToolTransformed>,
    /// Anything else worth keeping about the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Value>,
    /// When the step began.
    pub started_at: Timestamp,
    /// When the step ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Timestamp>,
}

/// One step of a run, tagged `kind` on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StepRecord {
    /// A request to the model.
    Model(ModelStep),
    /// A tool execution.
    Tool(ToolStep),
}

impl StepRecord {
    /// The step's invocation id.
    pub fn invocation_id(&self) -> &str {
        match self {
            StepRecord::Model(step) => &step.invocation_id,
            StepRecord::Tool(step) => &step.invocation_id,
        }
    }

    /// The session and run the step belongs to.
    pub fn run_ref(&self) -> RunRef {
        match self {
            StepRecord::Model(step) => RunRef::new(step.session_id.clone(), step.run_id.clone()),
            StepRecord::Tool(step) => RunRef::new(step.session_id.clone(), step.run_id.clone()),
        }
    }

    /// Where the step stands.
    pub fn status(&self) -> StepStatus {
        match self {
            StepRecord::Model(step) => step.status,
            StepRecord::Tool(step) => step.status,
        }
    }

    /// Points the step at another session (used when a fork copies it).
    pub fn set_session_id(&mut self, session_id: &str) {
        match self {
            StepRecord::Model(step) => step.session_id = session_id.to_owned(),
            StepRecord::Tool(step) => step.session_id = session_id.to_owned(),
        }
    }

    /// Writes the present fields of `patch` onto the step; fields that do not exist on this kind
    /// of step are ignored.
    pub fn apply(&mut self, patch: &StepPatch) {
        match self {
            StepRecord::Model(step) => {
                if let Some(status) = patch.status {
                    step.status = status;
                }
                if let Some(request) = &patch.request {
                    step.request = Some(request.clone());
                }
                if let Some(reply) = &patch.reply {
                    step.reply = Some(reply.clone());
                }
                if let Some(detail) = &patch.detail {
                    step.detail = Some(detail.clone());
                }
                if let Some(ended_at) = &patch.ended_at {
                    step.ended_at = Some(ended_at.clone());
                }
            }
            StepRecord::Tool(step) => {
                if let Some(status) = patch.status {
                    step.status = status;
                }
                if let Some(input) = &patch.input {
                    step.input = input.clone();
                }
                if let Some(original) = &patch.original {
                    step.original = Some(original.clone());
                }
                if let Some(transformed) = &patch.transformed {
                    step.transformed = Some(transformed.clone());
                }
                if let Some(detail) = &patch.detail {
                    step.detail = Some(detail.clone());
                }
                if let Some(ended_at) = &patch.ended_at {
                    step.ended_at = Some(ended_at.clone());
                }
            }
        }
    }
}

/// A change to a step: present fields replace the stored ones.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepPatch {
    /// New status.
    pub status: Option<StepStatus>,
    /// New model request (model steps).
    pub request: Option<Value>,
    /// New model reply (model steps).
    pub reply: Option<Value>,
    /// New input (tool steps).
    pub input: Option<Value>,
    /// New original result (tool steps).
    pub original: Option<ToolOriginal>,
    /// New transformed result (tool steps).
    pub transformed: Option<ToolTransformed>,
    /// New detail.
    pub detail: Option<Value>,
    /// When the step ended.
    pub ended_at: Option<Timestamp>,
}

/// A request a paused run waits on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingRequest {
    /// The request id.
    pub request_id: String,
    /// The session of the run.
    pub session_id: String,
    /// The run that waits.
    pub run_id: String,
    /// Approval or input.
    pub kind: RequestKind,
    /// The tool call the request is about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// What the person is shown (the call's input, the questions).
    pub payload: Value,
    /// When the request was made.
    pub created_at: Timestamp,
    /// When it was answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<Timestamp>,
    /// The answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Value>,
}

impl PendingRequest {
    /// The session and run the request belongs to.
    pub fn run_ref(&self) -> RunRef {
        RunRef::new(self.session_id.clone(), self.run_id.clone())
    }
}

/// What a rewind removed and kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TruncationResult {
    /// Messages left in the transcript.
    pub remaining_messages: usize,
    /// Messages removed.
    pub removed_messages: usize,
    /// Runs removed with their events, steps and requests.
    pub removed_runs: usize,
}

/// A key-value scope. Scopes never see each other's keys.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "scope", rename_all = "camelCase")]
pub enum KvScope {
    /// Keys private to one agent.
    Agent {
        /// The agent id.
        #[serde(rename = "agentId")]
        agent_id: String,
    },
    /// Keys shared under a namespace.
    Shared {
        /// The namespace.
        namespace: String,
    },
    /// Keys of one workspace.
    Workspace {
        /// The workspace folder.
        workspace: String,
    },
}

/// One key and its value, as `kv_list` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KvEntry {
    /// The key as it was set.
    pub key: String,
    /// Its JSON value.
    pub value: Value,
}
