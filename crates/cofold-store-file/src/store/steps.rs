//! Step records on disk: `steps.jsonl` holds each step once, as first appended, then one short
//! `patch` line per change. A model step's request (the whole conversation it sent) is thus
//! written once, and an update reads back only from the end of the file to its step.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::Path;

use cofold_agents::error::AgentError;
use cofold_agents::id::Timestamp;
use cofold_agents::store::{
    ModelStep, RunRef, StepPatch, StepRecord, StepStatus, ToolOriginal, ToolStep, ToolTransformed,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Inner, STEPS_FILE, lock_map};
use crate::jsonl::{append_lines, scan, scan_back, to_line};
use crate::lock;

/// A model step's `detail` or a tool step's `original.detail` longer than this, serialized, is
/// stored as `{ "truncated": true, "bytes": <size> }`.
pub const DETAIL_CAP_BYTES: usize = 262_144;

/// One line of `steps.jsonl`. Files written before patch lines existed hold only whole records,
/// the later one for an invocation replacing the earlier; they read the same way.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum StepLine {
    Model(ModelStep),
    Tool(ToolStep),
    Patch(PatchLine),
}

/// A change to the step `invocation_id`; absent fields are left as they are.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PatchLine {
    invocation_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<StepStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    request: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reply: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    original: Option<ToolOriginal>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    transformed: Option<ToolTransformed>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    detail: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ended_at: Option<Timestamp>,
}

impl PatchLine {
    fn of(invocation_id: &str, patch: &StepPatch) -> PatchLine {
        let mut original = patch.original.clone();
        if let Some(original) = &mut original {
            original.detail = capped(original.detail.take());
        }
        PatchLine {
            invocation_id: invocation_id.to_owned(),
            status: patch.status,
            request: patch.request.clone(),
            reply: patch.reply.clone(),
            input: patch.input.clone(),
            original,
            transformed: patch.transformed.clone(),
            detail: capped(patch.detail.clone()),
            ended_at: patch.ended_at.clone(),
        }
    }

    fn patch(self) -> StepPatch {
        StepPatch {
            status: self.status,
            request: self.request,
            reply: self.reply,
            input: self.input,
            original: self.original,
            transformed: self.transformed,
            detail: self.detail,
            ended_at: self.ended_at,
        }
    }
}

impl StepLine {
    fn from_record(step: StepRecord) -> StepLine {
        match step {
            StepRecord::Model(model) => StepLine::Model(model),
            StepRecord::Tool(tool) => StepLine::Tool(tool),
        }
    }
}

impl Inner {
    pub(crate) fn append_step(&self, step: StepRecord) -> Result<(), AgentError> {
        let run = step.run_ref();
        let (session, folder) = self.existing_run(&run)?;
        let guard = self.guard(&session);
        let _held = lock_map(&guard);
        lock::fence(&session, &run.session_id, &run.run_id)?;
        // A tool step is synced before the tool runs: after a power loss, a call that ran must
        // not look as if it never started.
        let sync = matches!(step, StepRecord::Tool(_));
        let line = to_line(&StepLine::from_record(cap_detail(step)))?;
        append_lines(&folder.join(STEPS_FILE), &line, sync)
    }

    pub(crate) fn update_step(
        &self,
        run: &RunRef,
        invocation_id: &str,
        patch: &StepPatch,
    ) -> Result<StepRecord, AgentError> {
        let (session, folder) = self.existing_run(run)?;
        let guard = self.guard(&session);
        let _held = lock_map(&guard);
        lock::fence(&session, &run.session_id, &run.run_id)?;
        let path = folder.join(STEPS_FILE);
        let mut step = read_step_back(&path, invocation_id)?.ok_or_else(|| {
            AgentError::not_found(format!("run {} has no step {invocation_id}", run.run_id))
        })?;
        let line = PatchLine::of(invocation_id, patch);
        // A tool's result is a boundary a person would not want to lose.
        let sync = matches!(step, StepRecord::Tool(_));
        append_lines(&path, &to_line(&StepLine::Patch(line))?, sync)?;
        step.apply(patch);
        Ok(cap_detail(step))
    }

    pub(crate) fn list_steps(&self, run: &RunRef) -> Result<Vec<StepRecord>, AgentError> {
        let (_, folder) = self.existing_run(run)?;
        read_steps(&folder.join(STEPS_FILE))
    }
}

/// Folds a step log: one entry per invocation id in order of first appearance, with every later
/// patch (or, in older files, whole record) applied.
pub(crate) fn read_steps(path: &Path) -> Result<Vec<StepRecord>, AgentError> {
    let mut steps: Vec<StepRecord> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    scan(path, |line| {
        match serde_json::from_slice::<StepLine>(line)? {
            StepLine::Patch(patch) => match index.get(&patch.invocation_id) {
                Some(&at) => steps[at].apply(&patch.patch()),
                None => tracing::warn!(
                    file = %path.display(), invocation = %patch.invocation_id,
                    "skipping a change to a step the log does not hold"
                ),
            },
            StepLine::Model(model) => put(&mut steps, &mut index, StepRecord::Model(model)),
            StepLine::Tool(tool) => put(&mut steps, &mut index, StepRecord::Tool(tool)),
        }
        Ok(())
    })?;
    Ok(steps)
}

fn put(steps: &mut Vec<StepRecord>, index: &mut HashMap<String, usize>, step: StepRecord) {
    match index.get(step.invocation_id()) {
        Some(&at) => steps[at] = step,
        None => {
            index.insert(step.invocation_id().to_owned(), steps.len());
            steps.push(step);
        }
    }
}

/// One step as it stands, read from the end of the log back to its record, so an update costs the
/// lines written since that step, not the whole log.
fn read_step_back(path: &Path, invocation_id: &str) -> Result<Option<StepRecord>, AgentError> {
    // Every line names its invocation near its start (records after `sessionId`, `runId` and
    // `index`; patches right after `kind`), so other steps' lines are passed over unparsed.
    let needle = format!(
        "\"invocationId\":{}",
        serde_json::to_string(invocation_id).unwrap_or_default()
    );
    let mut patches: Vec<PatchLine> = Vec::new();
    let mut found = None;
    scan_back(path, |line| {
        let head = &line[..line.len().min(needle.len() + 1024)];
        if !head.windows(needle.len()).any(|w| w == needle.as_bytes()) {
            return Ok(ControlFlow::Continue(()));
        }
        let step = match serde_json::from_slice::<StepLine>(line) {
            Ok(StepLine::Patch(patch)) => {
                if patch.invocation_id == invocation_id {
                    patches.push(patch);
                }
                return Ok(ControlFlow::Continue(()));
            }
            Ok(StepLine::Model(model)) => StepRecord::Model(model),
            Ok(StepLine::Tool(tool)) => StepRecord::Tool(tool),
            // A damaged line is skipped here as on every read.
            Err(_) => return Ok(ControlFlow::Continue(())),
        };
        if step.invocation_id() != invocation_id {
            return Ok(ControlFlow::Continue(()));
        }
        found = Some(step);
        Ok(ControlFlow::Break(()))
    })?;
    Ok(found.map(|mut step| {
        for patch in patches.into_iter().rev() {
            step.apply(&patch.patch());
        }
        step
    }))
}

fn capped(detail: Option<Value>) -> Option<Value> {
    let detail = detail?;
    let bytes = serde_json::to_vec(&detail).map_or(0, |bytes| bytes.len());
    if bytes > DETAIL_CAP_BYTES {
        Some(json!({ "truncated": true, "bytes": bytes }))
    } else {
        Some(detail)
    }
}

/// Replaces an oversized detail by its size, so one huge tool result cannot bloat the log.
fn cap_detail(mut step: StepRecord) -> StepRecord {
    match &mut step {
        StepRecord::Model(model) => model.detail = capped(model.detail.take()),
        StepRecord::Tool(tool) => {
            if let Some(original) = &mut tool.original {
                original.detail = capped(original.detail.take());
            }
        }
    }
    step
}
