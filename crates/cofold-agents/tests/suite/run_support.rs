//! Shared pieces of the run-loop tests: tools, agents over the fake model, event helpers, and a
//! store wrapper that injects failures (and stands for "another process" onto the same data).

#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};

use cofold_agents::agent::{Agent, AgentBuilder};
use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::event::{Event, EventBody, RequestKind};
use cofold_agents::message::{Message, Part};
use cofold_agents::run::RunHandle;
use cofold_agents::store::{
    KvEntry, KvScope, MemoryStore, NewSession, PendingRequest, RunRecord, RunRef, RunStatus,
    RunUpdate, SessionQuery, SessionRecord, StepPatch, StepRecord, Store, TruncationResult,
};
use cofold_agents::testing::{FakeModel, FakeStep};
use cofold_agents::tool::{Tool, ToolDef, ToolEffects, ToolError, ToolOutput, handler_fn};

/// `echo { text, loud = false }` answering `echo:<text>`, subject = the text.
pub fn echo_tool() -> Tool {
    let def = ToolDef::new(
        "echo",
        "Repeats the text.",
        json!({
            "type": "object",
            "properties": { "text": { "type": "string" }, "loud": { "type": "boolean", "default": false } },
            "required": ["text"],
            "additionalProperties": false
        }),
        handler_fn(|input: Value, _ctx| async move {
            let text = input["text"].as_str().unwrap_or_default().to_owned();
            Ok::<_, ToolError>(ToolOutput::from(format!("echo:{text}")))
        }),
    )
    .subject(|input| input["text"].as_str().map(str::to_owned));
    Tool::new(def).expect("echo tool")
}

/// A destructive tool `rm { path }` that counts its executions.
pub fn rm_tool(runs: Arc<Mutex<Vec<Value>>>) -> Tool {
    let def = ToolDef::new(
        "rm",
        "Removes a path.",
        json!({ "type": "object", "properties": { "path": { "type": "string" } }, "required": ["path"], "additionalProperties": false }),
        handler_fn(move |input: Value, _ctx| {
            let runs = runs.clone();
            async move {
                runs.lock().expect("runs").push(input.clone());
                Ok::<_, ToolError>(ToolOutput::from(format!("removed {}", input["path"].as_str().unwrap_or_default())))
            }
        }),
    )
    .effects(ToolEffects { writes: true, destructive: true, ..ToolEffects::default() })
    .subject(|input| input["path"].as_str().map(str::to_owned));
    Tool::new(def).expect("rm tool")
}

/// A tool that never returns (until dropped), counting how often it started and was dropped.
pub fn hang_tool(name: &str, dropped: Arc<Mutex<u32>>) -> Tool {
    struct Guard(Arc<Mutex<u32>>);
    impl Drop for Guard {
        fn drop(&mut self) {
            *self.0.lock().expect("dropped") += 1;
        }
    }
    let def = ToolDef::new(
        name,
        "Never answers.",
        json!({ "type": "object" }),
        handler_fn(move |_input: Value, _ctx| {
            let dropped = dropped.clone();
            async move {
                let _guard = Guard(dropped);
                futures::future::pending::<()>().await;
                Ok::<_, ToolError>(ToolOutput::from("never"))
            }
        }),
    );
    Tool::new(def).expect("hang tool")
}

/// An agent `a` with instructions `be brief` over the fake model and a store.
pub fn builder(model: &FakeModel, store: Arc<dyn Store>) -> AgentBuilder {
    Agent::builder("a", "be brief", model.adapter()).store(store)
}

/// An agent with the echo tool.
pub fn echo_agent(model: &FakeModel, store: Arc<dyn Store>) -> Agent {
    builder(model, store)
        .tool(echo_tool())
        .build()
        .expect("agent")
}

/// A new in-memory store.
pub fn memory() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new())
}

/// Opens session `s` of agent `a` in `store`.
pub async fn open_session(store: &MemoryStore) {
    store
        .create_session(NewSession {
            session_id: "s".into(),
            agent_id: "a".into(),
            workspace: None,
        })
        .await
        .expect("session");
}

/// A call step for echo with `text`.
pub fn echo_call(text: &str) -> FakeStep {
    FakeStep::tool_call("echo", json!({ "text": text }))
}

/// Every event of the handle until its stream ends.
pub async fn all_events(handle: &RunHandle) -> Vec<Event> {
    handle.events().collect().await
}

/// The type names of events.
pub fn types(events: &[Event]) -> Vec<&'static str> {
    events.iter().map(Event::type_name).collect()
}

/// Reads the handle's stream until an event of `kind` arrives (the first one after `skip`).
pub async fn next_of(handle: &RunHandle, kind: &str, skip: usize) -> Event {
    let mut stream = Box::pin(handle.events());
    let mut seen = 0;
    while let Some(event) = stream.next().await {
        if event.type_name() == kind {
            if seen == skip {
                return event;
            }
            seen += 1;
        }
    }
    panic!("the stream ended without a {kind} event");
}

/// Waits for the n-th (0-based) pause and returns its request id and kind.
pub async fn pause(handle: &RunHandle, nth: usize) -> (String, RequestKind) {
    match next_of(handle, "run.paused", nth).await.body {
        EventBody::RunPaused { request_id, kind } => (request_id, kind),
        _ => unreachable!(),
    }
}

/// The text parts of a message joined.
pub fn text(message: &Message) -> String {
    cofold_agents::message::text_of(message)
}

/// The one tool result of a tool message: (content, is_error).
pub fn result_of(message: &Message) -> (String, bool) {
    match &message.parts[0] {
        Part::ToolResult(result) => (result.content.clone(), result.is_error),
        other => panic!("not a tool result: {other:?}"),
    }
}

/// (role, source) pairs of a transcript as their wire names.
pub fn shape(messages: &[Message]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|m| {
            let role = serde_json::to_value(m.role).expect("role");
            let source = serde_json::to_value(m.source).expect("source");
            (
                role.as_str().unwrap_or_default().to_owned(),
                source.as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Pairs for `shape` comparisons.
pub fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// A store call a [`FaultStore`] may refuse.
pub type Fault = Arc<dyn Fn(&str, Option<&Event>) -> Option<AgentError> + Send + Sync>;

/// A store over another store's data that can refuse chosen calls and count them. A second
/// instance over the same data is what another process looks like to the run loop.
pub struct FaultStore {
    pub inner: Arc<dyn Store>,
    pub fault: Mutex<Option<Fault>>,
    pub calls: Mutex<Vec<String>>,
    pub stalled: Mutex<Option<String>>,
    /// Notified when a call reaches the stall.
    pub stalled_at: tokio::sync::Notify,
    /// A claim holder this store judges dead, as the file store judges a killed process: named
    /// by `dead_writer` while it holds the claim, and its claim handed to the next claimant.
    pub dead: Mutex<Option<String>>,
}

impl FaultStore {
    pub fn over(inner: Arc<dyn Store>) -> Arc<FaultStore> {
        Arc::new(FaultStore {
            inner,
            fault: Mutex::new(None),
            calls: Mutex::new(Vec::new()),
            stalled: Mutex::new(None),
            stalled_at: tokio::sync::Notify::new(),
            dead: Mutex::new(None),
        })
    }

    /// Judges the run `run_id` dead from now on (see [`FaultStore::dead`]).
    pub fn declare_dead(&self, run_id: &str) {
        *self.dead.lock().expect("dead") = Some(run_id.to_owned());
    }

    /// The dead holder, when it holds the session's claim.
    async fn dead_holder(&self, session: &str) -> Result<Option<String>, AgentError> {
        let dead = self.dead.lock().expect("dead").clone();
        let holder = self
            .inner
            .get_session(session)
            .await?
            .and_then(|s| s.active_writer_run_id);
        Ok(dead.filter(|d| holder.as_ref() == Some(d)))
    }

    pub fn set_fault(
        &self,
        fault: impl Fn(&str, Option<&Event>) -> Option<AgentError> + Send + Sync + 'static,
    ) {
        *self.fault.lock().expect("fault") = Some(Arc::new(fault));
    }

    pub fn call_count(&self) -> usize {
        self.calls.lock().expect("calls").len()
    }

    pub fn calls_named(&self, name: &str) -> usize {
        self.calls
            .lock()
            .expect("calls")
            .iter()
            .filter(|c| c.as_str() == name)
            .count()
    }

    /// Makes every later call named `op` wait forever (a store that stopped answering).
    pub fn stall(&self, op: &str) {
        *self.stalled.lock().expect("stalled") = Some(op.to_owned());
    }

    async fn check(&self, op: &str, event: Option<&Event>) -> Result<(), AgentError> {
        let stalled = self.stalled.lock().expect("stalled").as_deref() == Some(op);
        if stalled {
            self.stalled_at.notify_one();
            futures::future::pending::<()>().await;
        }
        self.calls.lock().expect("calls").push(op.to_owned());
        let fault = self.fault.lock().expect("fault").clone();
        match fault.and_then(|f| f(op, event)) {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}

/// A plain store failure.
pub fn store_down() -> AgentError {
    AgentError::new(ErrorCode::Internal, "store down")
}

#[async_trait]
impl Store for FaultStore {
    async fn get_session(&self, id: &str) -> Result<Option<SessionRecord>, AgentError> {
        self.check("get_session", None).await?;
        self.inner.get_session(id).await
    }
    async fn create_session(&self, new: NewSession) -> Result<SessionRecord, AgentError> {
        self.check("create_session", None).await?;
        self.inner.create_session(new).await
    }
    async fn list_sessions(&self, query: SessionQuery) -> Result<Vec<SessionRecord>, AgentError> {
        self.check("list_sessions", None).await?;
        self.inner.list_sessions(query).await
    }
    async fn delete_session(&self, id: &str) -> Result<(), AgentError> {
        self.check("delete_session", None).await?;
        self.inner.delete_session(id).await
    }
    async fn truncate(&self, id: &str, through: &str) -> Result<TruncationResult, AgentError> {
        self.check("truncate", None).await?;
        self.inner.truncate(id, through).await
    }
    async fn fork(
        &self,
        from: &str,
        through: &str,
        new_id: &str,
    ) -> Result<SessionRecord, AgentError> {
        self.check("fork", None).await?;
        self.inner.fork(from, through, new_id).await
    }
    async fn append_messages(
        &self,
        session: &str,
        run: &str,
        messages: &[Message],
    ) -> Result<(), AgentError> {
        self.check("append_messages", None).await?;
        self.inner.append_messages(session, run, messages).await
    }
    async fn list_messages(
        &self,
        session: &str,
        limit: Option<usize>,
    ) -> Result<Vec<Message>, AgentError> {
        self.check("list_messages", None).await?;
        self.inner.list_messages(session, limit).await
    }
    async fn claim_writer(&self, session: &str, run: &str) -> Result<bool, AgentError> {
        self.check("claim_writer", None).await?;
        if let Some(dead) = self.dead_holder(session).await? {
            self.inner.release_writer(session, &dead).await?;
        }
        self.inner.claim_writer(session, run).await
    }
    async fn dead_writer(&self, session: &str) -> Result<Option<String>, AgentError> {
        self.check("dead_writer", None).await?;
        self.dead_holder(session).await
    }
    async fn release_writer(&self, session: &str, run: &str) -> Result<(), AgentError> {
        self.check("release_writer", None).await?;
        self.inner.release_writer(session, run).await
    }
    async fn heartbeat(&self, session: &str, run: &str) -> Result<(), AgentError> {
        self.check("heartbeat", None).await?;
        self.inner.heartbeat(session, run).await
    }
    async fn create_run(&self, record: RunRecord) -> Result<(), AgentError> {
        self.check("create_run", None).await?;
        self.inner.create_run(record).await
    }
    async fn get_run(&self, run: &RunRef) -> Result<Option<RunRecord>, AgentError> {
        self.check("get_run", None).await?;
        self.inner.get_run(run).await
    }
    async fn list_runs(
        &self,
        session: &str,
        status: Option<RunStatus>,
    ) -> Result<Vec<RunRecord>, AgentError> {
        self.check("list_runs", None).await?;
        self.inner.list_runs(session, status).await
    }
    async fn update_run(&self, update: RunUpdate) -> Result<RunRecord, AgentError> {
        self.check("update_run", None).await?;
        self.inner.update_run(update).await
    }
    async fn append_event(&self, event: &Event) -> Result<(), AgentError> {
        self.check("append_event", Some(event)).await?;
        self.inner.append_event(event).await
    }
    async fn list_events(
        &self,
        run: &RunRef,
        after: Option<u64>,
    ) -> Result<Vec<Event>, AgentError> {
        self.check("list_events", None).await?;
        self.inner.list_events(run, after).await
    }
    async fn append_step(&self, step: &StepRecord) -> Result<(), AgentError> {
        self.check("append_step", None).await?;
        self.inner.append_step(step).await
    }
    async fn update_step(
        &self,
        run: &RunRef,
        id: &str,
        patch: &StepPatch,
    ) -> Result<StepRecord, AgentError> {
        self.check("update_step", None).await?;
        self.inner.update_step(run, id, patch).await
    }
    async fn list_steps(&self, run: &RunRef) -> Result<Vec<StepRecord>, AgentError> {
        self.check("list_steps", None).await?;
        self.inner.list_steps(run).await
    }
    async fn create_request(&self, request: &PendingRequest) -> Result<(), AgentError> {
        self.check("create_request", None).await?;
        self.inner.create_request(request).await
    }
    async fn get_request(
        &self,
        run: &RunRef,
        id: &str,
    ) -> Result<Option<PendingRequest>, AgentError> {
        self.check("get_request", None).await?;
        self.inner.get_request(run, id).await
    }
    async fn resolve_request(
        &self,
        run: &RunRef,
        id: &str,
        resolution: Value,
    ) -> Result<PendingRequest, AgentError> {
        self.check("resolve_request", None).await?;
        self.inner.resolve_request(run, id, resolution).await
    }
    async fn kv_get(&self, scope: &KvScope, key: &str) -> Result<Option<Value>, AgentError> {
        self.check("kv_get", None).await?;
        self.inner.kv_get(scope, key).await
    }
    async fn kv_set(&self, scope: &KvScope, key: &str, value: Value) -> Result<(), AgentError> {
        self.check("kv_set", None).await?;
        self.inner.kv_set(scope, key, value).await
    }
    async fn kv_delete(&self, scope: &KvScope, key: &str) -> Result<(), AgentError> {
        self.check("kv_delete", None).await?;
        self.inner.kv_delete(scope, key).await
    }
    async fn kv_list(
        &self,
        scope: &KvScope,
        prefix: Option<&str>,
    ) -> Result<Vec<KvEntry>, AgentError> {
        self.check("kv_list", None).await?;
        self.inner.kv_list(scope, prefix).await
    }
}
