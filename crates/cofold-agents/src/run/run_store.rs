//! The store as one run sees it: every call bounded once the run is stopped, and marked on the
//! run's "doing" note so a panic inside the store is reported as such.
//!
//! A cancel or a time limit must end a run even when its store hangs (a stalled network disk, a
//! lock that never comes back). Cutting a store call the moment the abort fires would be wrong:
//! the write is usually about to land, and a half-awaited write followed by the interrupt marker
//! could put them in the wrong order. So a call that is in flight when the abort fires, and every
//! call made after it (the marker, the run record, the claim release), gets [`STORE_GRACE`] to
//! finish; one that takes longer fails `aborted`, and the run ends as the stop says with what
//! can still be written.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;

use super::handle::Shared;
use crate::error::{AgentError, ErrorCode};
use crate::event::Event;
use crate::message::Message;
use crate::store::{
    KvEntry, KvScope, NewSession, PendingRequest, RunRecord, RunRef, RunStatus, RunUpdate,
    SessionQuery, SessionRecord, StepPatch, StepRecord, Store, TruncationResult,
};
use crate::tool::AbortSignal;

/// How long a store call may still take once the run was stopped.
pub const STORE_GRACE: Duration = Duration::from_secs(5);

/// A run's view of the agent's store.
pub(crate) struct RunStore {
    inner: Arc<dyn Store>,
    signal: AbortSignal,
    shared: Arc<Shared>,
}

impl RunStore {
    pub(crate) fn new(inner: Arc<dyn Store>, signal: AbortSignal, shared: Arc<Shared>) -> Self {
        RunStore {
            inner,
            signal,
            shared,
        }
    }

    async fn call<T>(
        &self,
        what: &'static str,
        work: impl Future<Output = Result<T, AgentError>>,
    ) -> Result<T, AgentError> {
        let before = self.shared.set_doing(format!("the store ({what})"));
        let mut work = std::pin::pin!(work);
        let result = tokio::select! {
            biased;
            result = &mut work => result,
            _ = self.signal.cancelled() => {
                match tokio::time::timeout(STORE_GRACE, &mut work).await {
                    Ok(result) => result,
                    Err(_) => Err(AgentError::new(
                        ErrorCode::Aborted,
                        format!(
                            "the store did not finish {what} within {} s of the run being stopped",
                            STORE_GRACE.as_secs()
                        ),
                    )),
                }
            }
        };
        self.shared.set_doing(before);
        result
    }
}

#[async_trait]
impl Store for RunStore {
    async fn get_session(&self, session_id: &str) -> Result<Option<SessionRecord>, AgentError> {
        self.call("get_session", self.inner.get_session(session_id))
            .await
    }

    async fn create_session(&self, new: NewSession) -> Result<SessionRecord, AgentError> {
        self.call("create_session", self.inner.create_session(new))
            .await
    }

    async fn list_sessions(&self, query: SessionQuery) -> Result<Vec<SessionRecord>, AgentError> {
        self.call("list_sessions", self.inner.list_sessions(query))
            .await
    }

    async fn delete_session(&self, session_id: &str) -> Result<(), AgentError> {
        self.call("delete_session", self.inner.delete_session(session_id))
            .await
    }

    async fn truncate(
        &self,
        session_id: &str,
        through_message_id: &str,
    ) -> Result<TruncationResult, AgentError> {
        self.call(
            "truncate",
            self.inner.truncate(session_id, through_message_id),
        )
        .await
    }

    async fn fork(
        &self,
        from_id: &str,
        through_message_id: &str,
        new_id: &str,
    ) -> Result<SessionRecord, AgentError> {
        self.call("fork", self.inner.fork(from_id, through_message_id, new_id))
            .await
    }

    async fn append_messages(
        &self,
        session_id: &str,
        run_id: &str,
        messages: &[Message],
    ) -> Result<(), AgentError> {
        self.call(
            "append_messages",
            self.inner.append_messages(session_id, run_id, messages),
        )
        .await
    }

    async fn list_messages(
        &self,
        session_id: &str,
        limit: Option<usize>,
    ) -> Result<Vec<Message>, AgentError> {
        self.call("list_messages", self.inner.list_messages(session_id, limit))
            .await
    }

    async fn claim_writer(&self, session_id: &str, run_id: &str) -> Result<bool, AgentError> {
        self.call("claim_writer", self.inner.claim_writer(session_id, run_id))
            .await
    }

    async fn release_writer(&self, session_id: &str, run_id: &str) -> Result<(), AgentError> {
        self.call(
            "release_writer",
            self.inner.release_writer(session_id, run_id),
        )
        .await
    }

    async fn heartbeat(&self, session_id: &str, run_id: &str) -> Result<(), AgentError> {
        self.call("heartbeat", self.inner.heartbeat(session_id, run_id))
            .await
    }

    async fn dead_writer(&self, session_id: &str) -> Result<Option<String>, AgentError> {
        self.call("dead_writer", self.inner.dead_writer(session_id))
            .await
    }

    async fn list_context_messages(&self, session_id: &str) -> Result<Vec<Message>, AgentError> {
        self.call(
            "list_context_messages",
            self.inner.list_context_messages(session_id),
        )
        .await
    }

    async fn create_run(&self, record: RunRecord) -> Result<(), AgentError> {
        self.call("create_run", self.inner.create_run(record)).await
    }

    async fn get_run(&self, run: &RunRef) -> Result<Option<RunRecord>, AgentError> {
        self.call("get_run", self.inner.get_run(run)).await
    }

    async fn list_runs(
        &self,
        session_id: &str,
        status: Option<RunStatus>,
    ) -> Result<Vec<RunRecord>, AgentError> {
        self.call("list_runs", self.inner.list_runs(session_id, status))
            .await
    }

    async fn update_run(&self, update: RunUpdate) -> Result<RunRecord, AgentError> {
        self.call("update_run", self.inner.update_run(update)).await
    }

    async fn append_event(&self, event: &Event) -> Result<(), AgentError> {
        self.call("append_event", self.inner.append_event(event))
            .await
    }

    async fn last_event_seq(&self, run: &RunRef) -> Result<u64, AgentError> {
        self.call("last_event_seq", self.inner.last_event_seq(run))
            .await
    }

    async fn list_events(
        &self,
        run: &RunRef,
        after_seq: Option<u64>,
    ) -> Result<Vec<Event>, AgentError> {
        self.call("list_events", self.inner.list_events(run, after_seq))
            .await
    }

    async fn append_step(&self, step: &StepRecord) -> Result<(), AgentError> {
        self.call("append_step", self.inner.append_step(step)).await
    }

    async fn update_step(
        &self,
        run: &RunRef,
        invocation_id: &str,
        patch: &StepPatch,
    ) -> Result<StepRecord, AgentError> {
        self.call(
            "update_step",
            self.inner.update_step(run, invocation_id, patch),
        )
        .await
    }

    async fn list_steps(&self, run: &RunRef) -> Result<Vec<StepRecord>, AgentError> {
        self.call("list_steps", self.inner.list_steps(run)).await
    }

    async fn create_request(&self, request: &PendingRequest) -> Result<(), AgentError> {
        self.call("create_request", self.inner.create_request(request))
            .await
    }

    async fn get_request(
        &self,
        run: &RunRef,
        request_id: &str,
    ) -> Result<Option<PendingRequest>, AgentError> {
        self.call("get_request", self.inner.get_request(run, request_id))
            .await
    }

    async fn resolve_request(
        &self,
        run: &RunRef,
        request_id: &str,
        resolution: Value,
    ) -> Result<PendingRequest, AgentError> {
        self.call(
            "resolve_request",
            self.inner.resolve_request(run, request_id, resolution),
        )
        .await
    }

    async fn kv_get(&self, scope: &KvScope, key: &str) -> Result<Option<Value>, AgentError> {
        self.call("kv_get", self.inner.kv_get(scope, key)).await
    }

    async fn kv_set(&self, scope: &KvScope, key: &str, value: Value) -> Result<(), AgentError> {
        self.call("kv_set", self.inner.kv_set(scope, key, value))
            .await
    }

    async fn kv_delete(&self, scope: &KvScope, key: &str) -> Result<(), AgentError> {
        self.call("kv_delete", self.inner.kv_delete(scope, key))
            .await
    }

    async fn kv_list(
        &self,
        scope: &KvScope,
        prefix: Option<&str>,
    ) -> Result<Vec<KvEntry>, AgentError> {
        self.call("kv_list", self.inner.kv_list(scope, prefix))
            .await
    }
}
