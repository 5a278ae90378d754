//! Durable state: the [`Store`] trait, its records, the cut rule shared by every store, per-session
//! usage, and the in-memory store.
//!
//! A store keeps sessions (a transcript of messages), runs (a record, an event log, step records and
//! pending requests) and key-value entries. One run at a time holds a session's writer claim; only
//! it may append messages. Every read hands back an owned copy.

mod cut;
mod memory;
mod records;
mod usage;

#[cfg(feature = "testing")]
pub mod conformance;

pub use cut::{CutPlan, select_cut};
pub use memory::MemoryStore;
pub use records::{
    KvEntry, KvScope, ModelStep, NewSession, PendingRequest, RequestKind, RunRecord, RunRef,
    RunStatus, RunUpdate, SessionQuery, SessionRecord, StepPatch, StepRecord, StepStatus,
    ToolOriginal, ToolStep, ToolTransformed, TruncationResult,
};
pub use usage::{RunUsage, SessionUsage, session_usage};

use async_trait::async_trait;
use serde_json::Value;

use crate::error::AgentError;
use crate::event::Event;
use crate::message::Message;

/// The kv key under which a remembered approval of `tool` in `session_id` is kept (agent scope).
pub fn approvals_key(session_id: &str, tool: &str) -> String {
    format!("approvals/{session_id}/{tool}")
}

/// Where sessions, runs, events, steps, requests and key-value entries live.
///
/// Errors use the codes of the spec: `not_found`, `already_exists`, `writer_mismatch`,
/// `writer_busy`, `seq_gap`, `invalid_options` and `internal` (an I/O failure).
#[async_trait]
pub trait Store: Send + Sync {
    // Sessions.

    /// The session, or `None` when there is none with that id.
    async fn get_session(&self, session_id: &str) -> Result<Option<SessionRecord>, AgentError>;

    /// Creates a session; `already_exists` when the id is taken (nothing is overwritten).
    async fn create_session(&self, new: NewSession) -> Result<SessionRecord, AgentError>;

    /// Sessions newest `updatedAt` first (ties by id ascending), filtered and cut to the limit.
    async fn list_sessions(&self, query: SessionQuery) -> Result<Vec<SessionRecord>, AgentError>;

    /// Removes a session with everything it holds; `writer_busy` while a running run holds it.
    async fn delete_session(&self, session_id: &str) -> Result<(), AgentError>;

    /// Rewinds the session to the messages up to and including `through_message_id`.
    async fn truncate(
        &self,
        session_id: &str,
        through_message_id: &str,
    ) -> Result<TruncationResult, AgentError>;

    /// Copies the session up to `through_message_id` into a new session `new_id`.
    async fn fork(
        &self,
        from_id: &str,
        through_message_id: &str,
        new_id: &str,
    ) -> Result<SessionRecord, AgentError>;

    /// Appends messages for the run holding the claim (`writer_mismatch` otherwise), advances that
    /// run's `lastMessageId` and bumps the session's `updatedAt`.
    async fn append_messages(
        &self,
        session_id: &str,
        run_id: &str,
        messages: &[Message],
    ) -> Result<(), AgentError>;

    /// The transcript in order, or its last `limit` messages.
    async fn list_messages(
        &self,
        session_id: &str,
        limit: Option<usize>,
    ) -> Result<Vec<Message>, AgentError>;

    /// Claims the session's writer for `run_id`: false when another run holds it, true for the holder.
    async fn claim_writer(&self, session_id: &str, run_id: &str) -> Result<bool, AgentError>;

    /// Releases the claim when `run_id` holds it; otherwise does nothing.
    async fn release_writer(&self, session_id: &str, run_id: &str) -> Result<(), AgentError>;

    /// Refreshes the holder's lease without touching `updatedAt`.
    async fn heartbeat(&self, session_id: &str, run_id: &str) -> Result<(), AgentError>;

    /// The run holding the session's writer claim when the process that claimed it is known to
    /// have ended; `None` when the claim is free or its holder may be alive. Such a run is settled
    /// (through resume, whose claim takes it over) before anything else writes the session. The
    /// default knows no dead holders: an in-process store's holders die with the process.
    async fn dead_writer(&self, session_id: &str) -> Result<Option<String>, AgentError> {
        let _ = session_id;
        Ok(None)
    }

    /// What a run needs of the transcript to build its context: the newest summary and every
    /// non-summary message no summary covers, in transcript order (the whole transcript when
    /// nothing was summarized). `context_of` gives the same view of it as of the whole transcript.
    /// The default reads the whole transcript; a store may read less.
    async fn list_context_messages(&self, session_id: &str) -> Result<Vec<Message>, AgentError> {
        Ok(uncovered_messages(
            self.list_messages(session_id, None).await?,
        ))
    }

    // Runs.

    /// Stores a new run record; `not_found` without the session, `already_exists` for a taken id.
    async fn create_run(&self, record: RunRecord) -> Result<(), AgentError>;

    /// The run, or `None` (also when the session does not own it).
    async fn get_run(&self, run: &RunRef) -> Result<Option<RunRecord>, AgentError>;

    /// The session's runs newest `createdAt` first, optionally only those with `status`.
    async fn list_runs(
        &self,
        session_id: &str,
        status: Option<RunStatus>,
    ) -> Result<Vec<RunRecord>, AgentError>;

    /// Writes the present fields of the update, bumps `updatedAt`, and returns the new record.
    async fn update_run(&self, update: RunUpdate) -> Result<RunRecord, AgentError>;

    /// Appends an event; `seq_gap` unless its `seq` is the run's last + 1.
    async fn append_event(&self, event: &Event) -> Result<(), AgentError>;

    /// The `seq` of the run's last stored event, 0 when it has none. The default reads the whole
    /// log; a store may read only its end.
    async fn last_event_seq(&self, run: &RunRef) -> Result<u64, AgentError> {
        Ok(self
            .list_events(run, None)
            .await?
            .last()
            .map_or(0, |event| event.seq))
    }

    /// The run's events with `seq > after_seq` (all of them without it).
    async fn list_events(
        &self,
        run: &RunRef,
        after_seq: Option<u64>,
    ) -> Result<Vec<Event>, AgentError>;

    /// Appends a step record.
    async fn append_step(&self, step: &StepRecord) -> Result<(), AgentError>;

    /// Merges `patch` into the step `invocation_id` and returns the merged record.
    async fn update_step(
        &self,
        run: &RunRef,
        invocation_id: &str,
        patch: &StepPatch,
    ) -> Result<StepRecord, AgentError>;

    /// The run's steps in the order they were first appended.
    async fn list_steps(&self, run: &RunRef) -> Result<Vec<StepRecord>, AgentError>;

    // Requests.

    /// Stores a pending request under its run.
    async fn create_request(&self, request: &PendingRequest) -> Result<(), AgentError>;

    /// The request, or `None` unless both session and run own it.
    async fn get_request(
        &self,
        run: &RunRef,
        request_id: &str,
    ) -> Result<Option<PendingRequest>, AgentError>;

    /// Sets the request's `resolution` and `resolvedAt`; returns the resolved request.
    async fn resolve_request(
        &self,
        run: &RunRef,
        request_id: &str,
        resolution: Value,
    ) -> Result<PendingRequest, AgentError>;

    // Key-value.

    /// The value under `key`, or `None`.
    async fn kv_get(&self, scope: &KvScope, key: &str) -> Result<Option<Value>, AgentError>;

    /// Sets `key` to `value`.
    async fn kv_set(&self, scope: &KvScope, key: &str, value: Value) -> Result<(), AgentError>;

    /// Removes `key`; a key that was never set is fine.
    async fn kv_delete(&self, scope: &KvScope, key: &str) -> Result<(), AgentError>;

    /// The scope's entries whose key starts with `prefix` (all without it), sorted by key.
    async fn kv_list(
        &self,
        scope: &KvScope,
        prefix: Option<&str>,
    ) -> Result<Vec<KvEntry>, AgentError>;
}

/// The messages of `history` that [`Store::list_context_messages`] answers: the newest summary
/// and every non-summary message that no summary covers, in order.
pub fn uncovered_messages(history: Vec<Message>) -> Vec<Message> {
    use crate::message::MessageSource;
    use std::collections::HashMap;
    let is_summary = |m: &Message| m.source == MessageSource::Summary;
    let newest = history.iter().rposition(is_summary);
    // Which messages stay, found by looking the summaries' lists up among the messages rather
    // than the other way round: the lists of a long history's summaries can be far longer than
    // the messages given.
    let mut keep: Vec<bool> = history
        .iter()
        .enumerate()
        .map(|(at, m)| !is_summary(m) || Some(at) == newest)
        .collect();
    {
        let mut positions: HashMap<&str, Vec<usize>> = HashMap::new();
        for (at, m) in history.iter().enumerate() {
            if !is_summary(m) {
                positions.entry(m.id.as_str()).or_default().push(at);
            }
        }
        let listed = history
            .iter()
            .filter(|m| is_summary(m))
            .flat_map(|m| m.summarizes.iter().flatten());
        for id in listed {
            for &at in positions.get(id.as_str()).into_iter().flatten() {
                keep[at] = false;
            }
        }
    }
    history
        .into_iter()
        .zip(keep)
        .filter_map(|(m, keep)| keep.then_some(m))
        .collect()
}

/// Orders sessions as `list_sessions` answers: newest `updatedAt` first, ties by id ascending.
pub fn sort_sessions(sessions: &mut [SessionRecord]) {
    sessions.sort_by(|a, b| {
        b.updated_at
            .cmp(&a.updated_at)
            .then_with(|| a.session_id.cmp(&b.session_id))
    });
}

/// Orders runs as `list_runs` answers: newest `createdAt` first, ties by id ascending.
pub fn sort_runs(runs: &mut [RunRecord]) {
    runs.sort_by(|a, b| {
        b.created_at
            .cmp(&a.created_at)
            .then_with(|| a.run_id.cmp(&b.run_id))
    });
}

/// The `seq_gap` error for an event numbered `got` where `expected` was due.
pub fn seq_gap(run_id: &str, expected: u64, got: u64) -> AgentError {
    AgentError::new(
        crate::error::ErrorCode::SeqGap,
        format!("run {run_id} expected event {expected} next, not {got}"),
    )
}

/// The `not_found` error for a request the run does not own.
pub fn unknown_request(run: &RunRef, request_id: &str) -> AgentError {
    AgentError::not_found(format!(
        "run {} of session {} has no request {request_id}",
        run.run_id, run.session_id
    ))
}
