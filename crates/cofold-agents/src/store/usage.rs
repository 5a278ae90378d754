//! Token usage per run and per session, read from the store.

use serde::{Deserialize, Serialize};

use crate::error::AgentError;
use crate::id::Timestamp;
use crate::model::Usage;
use crate::usage::{ZERO_USAGE, add_usage};

use super::Store;
use super::records::{RunRef, RunStatus, StepRecord};

/// One run's share of a session's usage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunUsage {
    /// The run id.
    pub run_id: String,
    /// Where the run stands.
    pub status: RunStatus,
    /// When the run was created.
    pub created_at: Timestamp,
    /// Tokens the run used.
    pub usage: Usage,
    /// Model steps the run took.
    pub steps: u32,
    /// Tool executions (tool step records).
    pub tool_calls: u32,
    /// How many calls were refused.
    pub denials: u32,
}

/// A session's usage: one row per run, oldest first, and the totals. Tokens only, never a price.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionUsage {
    /// The session id.
    pub session_id: String,
    /// One row per run, oldest first.
    pub runs: Vec<RunUsage>,
    /// The sum of the runs' usage.
    pub usage: Usage,
    /// The sum of the runs' steps.
    pub steps: u32,
    /// The sum of the runs' tool calls.
    pub tool_calls: u32,
    /// The sum of the runs' denials.
    pub denials: u32,
}

/// Adds up a session's usage from its run records and tool step records; `not_found` for an unknown
/// session.
pub async fn session_usage(
    store: &dyn Store,
    session_id: &str,
) -> Result<SessionUsage, AgentError> {
    let mut records = store.list_runs(session_id, None).await?;
    // list_runs answers newest first; the report reads oldest first.
    records.reverse();
    let mut total = SessionUsage {
        session_id: session_id.to_owned(),
        runs: Vec::with_capacity(records.len()),
        usage: ZERO_USAGE,
        steps: 0,
        tool_calls: 0,
        denials: 0,
    };
    for record in records {
        let steps = store
            .list_steps(&RunRef::new(session_id, record.run_id.clone()))
            .await?;
        let tool_calls = steps
            .iter()
            .filter(|step| matches!(step, StepRecord::Tool(_)))
            .count();
        let row = RunUsage {
            run_id: record.run_id,
            status: record.status,
            created_at: record.created_at,
            usage: record.usage,
            steps: record.steps,
            tool_calls: u32::try_from(tool_calls).unwrap_or(u32::MAX),
            denials: u32::try_from(record.denials.len()).unwrap_or(u32::MAX),
        };
        total.usage = add_usage(&total.usage, &row.usage);
        total.steps += row.steps;
        total.tool_calls += row.tool_calls;
        total.denials += row.denials;
        total.runs.push(row);
    }
    Ok(total)
}
