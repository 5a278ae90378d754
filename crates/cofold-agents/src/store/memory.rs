//! The in-memory store: plain maps behind one mutex. For tests and for hosts that keep nothing.
//!
//! The writer claim is only the holder's run id: there is no lease, no pid and no takeover, because
//! nothing outlives the process that holds the map.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use serde_json::Value;

use crate::error::{AgentError, ErrorCode};
use crate::event::Event;
use crate::id::Timestamp;
use crate::message::Message;

use super::Store;
use super::cut::select_cut;
use super::records::{
    KvEntry, KvScope, NewSession, PendingRequest, RunRecord, RunRef, RunStatus, RunUpdate,
    SessionQuery, SessionRecord, StepPatch, StepRecord, TruncationResult,
};

/// A [`Store`] that keeps everything in memory.
#[derive(Debug, Default)]
pub struct MemoryStore {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    sessions: HashMap<String, SessionData>,
    kv: HashMap<KvScope, BTreeMap<String, Value>>,
}

#[derive(Debug, Clone)]
struct SessionData {
    record: SessionRecord,
    messages: Vec<Message>,
    writer: Option<String>,
    // Keyed by run id inside the session, so a fork may reuse a run id elsewhere.
    runs: HashMap<String, RunData>,
}

#[derive(Debug, Clone)]
struct RunData {
    record: RunRecord,
    events: Vec<Event>,
    steps: Vec<StepRecord>,
    requests: BTreeMap<String, PendingRequest>,
}

impl SessionData {
    /// The record as readers see it, with the claim filled in.
    fn view(&self) -> SessionRecord {
        let mut record = self.record.clone();
        record.active_writer_run_id = self.writer.clone();
        record.active_writer_pid = None;
        record
    }

    /// True while the claim holder is a run whose status is `running`.
    fn held_by_running_run(&self) -> bool {
        self.writer
            .as_ref()
            .and_then(|holder| self.runs.get(holder))
            .is_some_and(|run| run.record.status == RunStatus::Running)
    }
}

fn unknown_session(session_id: &str) -> AgentError {
    AgentError::not_found(format!("there is no session {session_id}"))
}

fn unknown_run(run: &RunRef) -> AgentError {
    AgentError::not_found(format!(
        "session {} has no run {}",
        run.session_id, run.run_id
    ))
}

fn busy(session_id: &str, action: &str) -> AgentError {
    AgentError::new(
        ErrorCode::WriterBusy,
        format!("session {session_id} cannot be {action} while a running run holds it"),
    )
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves plain data behind; keep serving it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    fn session(&self, session_id: &str) -> Result<&SessionData, AgentError> {
        self.sessions
            .get(session_id)
            .ok_or_else(|| unknown_session(session_id))
    }

    fn session_mut(&mut self, session_id: &str) -> Result<&mut SessionData, AgentError> {
        self.sessions
            .get_mut(session_id)
            .ok_or_else(|| unknown_session(session_id))
    }

    fn run_mut(&mut self, run: &RunRef) -> Result<&mut RunData, AgentError> {
        self.sessions
            .get_mut(&run.session_id)
            .and_then(|session| session.runs.get_mut(&run.run_id))
            .ok_or_else(|| unknown_run(run))
    }

    fn run(&self, run: &RunRef) -> Result<&RunData, AgentError> {
        self.sessions
            .get(&run.session_id)
            .and_then(|session| session.runs.get(&run.run_id))
            .ok_or_else(|| unknown_run(run))
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get_session(&self, session_id: &str) -> Result<Option<SessionRecord>, AgentError> {
        Ok(self.lock().sessions.get(session_id).map(SessionData::view))
    }

    async fn create_session(&self, new: NewSession) -> Result<SessionRecord, AgentError> {
        let mut state = self.lock();
        if state.sessions.contains_key(&new.session_id) {
            return Err(AgentError::already_exists(format!(
                "session {} already exists",
                new.session_id
            )));
        }
        let now = Timestamp::now();
        let record = SessionRecord {
            session_id: new.session_id.clone(),
            agent_id: new.agent_id,
            workspace: new.workspace,
            created_at: now.clone(),
            updated_at: now,
            active_writer_run_id: None,
            active_writer_pid: None,
        };
        let data = SessionData {
            record,
            messages: Vec::new(),
            writer: None,
            runs: HashMap::new(),
        };
        let view = data.view();
        state.sessions.insert(new.session_id, data);
        Ok(view)
    }

    async fn list_sessions(&self, query: SessionQuery) -> Result<Vec<SessionRecord>, AgentError> {
        let state = self.lock();
        let mut found: Vec<SessionRecord> = state
            .sessions
            .values()
            .filter(|data| query.workspace.is_none() || data.record.workspace == query.workspace)
            .filter(|data| {
                query
                    .agent_id
                    .as_ref()
                    .is_none_or(|agent| &data.record.agent_id == agent)
            })
            .map(SessionData::view)
            .collect();
        super::sort_sessions(&mut found);
        if let Some(limit) = query.limit {
            found.truncate(limit);
        }
        Ok(found)
    }

    async fn delete_session(&self, session_id: &str) -> Result<(), AgentError> {
        let mut state = self.lock();
        if state.session(session_id)?.held_by_running_run() {
            return Err(busy(session_id, "deleted"));
        }
        state.sessions.remove(session_id);
        Ok(())
    }

    async fn truncate(
        &self,
        session_id: &str,
        through_message_id: &str,
    ) -> Result<TruncationResult, AgentError> {
        let mut state = self.lock();
        let session = state.session_mut(session_id)?;
        if session.held_by_running_run() {
            return Err(busy(session_id, "rewound"));
        }
        let records: Vec<RunRecord> = session
            .runs
            .values()
            .map(|run| run.record.clone())
            .collect();
        let plan = select_cut(session_id, &session.messages, &records, through_message_id)?;
        let removed_messages = session.messages.len() - plan.keep_messages;
        session.messages.truncate(plan.keep_messages);
        for run_id in &plan.dropped_runs {
            session.runs.remove(run_id);
        }
        if session
            .writer
            .as_ref()
            .is_some_and(|holder| plan.dropped_runs.contains(holder))
        {
            session.writer = None;
        }
        session.record.updated_at = Timestamp::now();
        Ok(TruncationResult {
            remaining_messages: plan.keep_messages,
            removed_messages,
            removed_runs: plan.dropped_runs.len(),
        })
    }

    async fn fork(
        &self,
        from_id: &str,
        through_message_id: &str,
        new_id: &str,
    ) -> Result<SessionRecord, AgentError> {
        let mut state = self.lock();
        let source = state.session(from_id)?;
        if source.held_by_running_run() {
            return Err(busy(from_id, "forked"));
        }
        if state.sessions.contains_key(new_id) {
            return Err(AgentError::already_exists(format!(
                "session {new_id} already exists"
            )));
        }
        let records: Vec<RunRecord> = source.runs.values().map(|run| run.record.clone()).collect();
        let plan = select_cut(from_id, &source.messages, &records, through_message_id)?;
        let now = Timestamp::now();
        let mut runs = HashMap::new();
        for run_id in &plan.kept_runs {
            let Some(run) = source.runs.get(run_id) else {
                continue;
            };
            let mut copy = RunData {
                record: run.record.clone(),
                events: run.events.clone(),
                steps: run.steps.clone(),
                requests: BTreeMap::new(),
            };
            copy.record.session_id = new_id.to_owned();
            copy.record.pending_request_id = None;
            for event in &mut copy.events {
                event.session_id = new_id.to_owned();
            }
            for step in &mut copy.steps {
                step.set_session_id(new_id);
            }
            runs.insert(run_id.clone(), copy);
        }
        let data = SessionData {
            record: SessionRecord {
                session_id: new_id.to_owned(),
                agent_id: source.record.agent_id.clone(),
                workspace: source.record.workspace.clone(),
                created_at: now.clone(),
                updated_at: now,
                active_writer_run_id: None,
                active_writer_pid: None,
            },
            messages: source.messages[..plan.keep_messages].to_vec(),
            writer: None,
            runs,
        };
        let view = data.view();
        state.sessions.insert(new_id.to_owned(), data);
        Ok(view)
    }

    async fn append_messages(
        &self,
        session_id: &str,
        run_id: &str,
        messages: &[Message],
    ) -> Result<(), AgentError> {
        let mut state = self.lock();
        let session = state.session_mut(session_id)?;
        if session.writer.as_deref() != Some(run_id) {
            return Err(AgentError::new(
                ErrorCode::WriterMismatch,
                format!("run {run_id} does not hold the writer claim of session {session_id}"),
            ));
        }
        let Some(last) = messages.last() else {
            return Ok(());
        };
        if let Some(run) = session.runs.get_mut(run_id) {
            run.record.last_message_id = Some(last.id.clone());
            run.record.updated_at = Timestamp::now();
        }
        session.messages.extend_from_slice(messages);
        session.record.updated_at = Timestamp::now();
        Ok(())
    }

    async fn list_messages(
        &self,
        session_id: &str,
        limit: Option<usize>,
    ) -> Result<Vec<Message>, AgentError> {
        let state = self.lock();
        let messages = &state.session(session_id)?.messages;
        let start = limit.map_or(0, |limit| messages.len().saturating_sub(limit));
        Ok(messages[start..].to_vec())
    }

    async fn claim_writer(&self, session_id: &str, run_id: &str) -> Result<bool, AgentError> {
        let mut state = self.lock();
        let session = state.session_mut(session_id)?;
        match &session.writer {
            Some(holder) => Ok(holder == run_id),
            None => {
                session.writer = Some(run_id.to_owned());
                Ok(true)
            }
        }
    }

    async fn release_writer(&self, session_id: &str, run_id: &str) -> Result<(), AgentError> {
        let mut state = self.lock();
        let session = state.session_mut(session_id)?;
        if session.writer.as_deref() == Some(run_id) {
            session.writer = None;
        }
        Ok(())
    }

    async fn heartbeat(&self, session_id: &str, run_id: &str) -> Result<(), AgentError> {
        let state = self.lock();
        if state.session(session_id)?.writer.as_deref() == Some(run_id) {
            Ok(())
        } else {
            Err(AgentError::new(
                ErrorCode::WriterMismatch,
                format!("run {run_id} does not hold the writer claim of session {session_id}"),
            ))
        }
    }

    async fn create_run(&self, record: RunRecord) -> Result<(), AgentError> {
        let mut state = self.lock();
        let session = state.session_mut(&record.session_id)?;
        if session.runs.contains_key(&record.run_id) {
            return Err(AgentError::already_exists(format!(
                "session {} already has a run {}",
                record.session_id, record.run_id
            )));
        }
        let data = RunData {
            record: record.clone(),
            events: Vec::new(),
            steps: Vec::new(),
            requests: BTreeMap::new(),
        };
        session.runs.insert(record.run_id, data);
        Ok(())
    }

    async fn get_run(&self, run: &RunRef) -> Result<Option<RunRecord>, AgentError> {
        Ok(self.lock().run(run).ok().map(|data| data.record.clone()))
    }

    async fn list_runs(
        &self,
        session_id: &str,
        status: Option<RunStatus>,
    ) -> Result<Vec<RunRecord>, AgentError> {
        let state = self.lock();
        let mut runs: Vec<RunRecord> = state
            .session(session_id)?
            .runs
            .values()
            .filter(|run| status.is_none_or(|status| run.record.status == status))
            .map(|run| run.record.clone())
            .collect();
        super::sort_runs(&mut runs);
        Ok(runs)
    }

    async fn update_run(&self, update: RunUpdate) -> Result<RunRecord, AgentError> {
        let mut state = self.lock();
        let run = state.run_mut(&update.run)?;
        update.apply_to(&mut run.record);
        run.record.updated_at = Timestamp::now();
        Ok(run.record.clone())
    }

    async fn append_event(&self, event: &Event) -> Result<(), AgentError> {
        let mut state = self.lock();
        let run = state.run_mut(&RunRef::new(event.session_id.clone(), event.run_id.clone()))?;
        let expected = run.events.last().map_or(1, |last| last.seq + 1);
        if event.seq != expected {
            return Err(super::seq_gap(&event.run_id, expected, event.seq));
        }
        run.events.push(event.clone());
        Ok(())
    }

    async fn list_events(
        &self,
        run: &RunRef,
        after_seq: Option<u64>,
    ) -> Result<Vec<Event>, AgentError> {
        let state = self.lock();
        let after = after_seq.unwrap_or(0);
        Ok(state
            .run(run)?
            .events
            .iter()
            .filter(|event| event.seq > after)
            .cloned()
            .collect())
    }

    async fn last_event_seq(&self, run: &RunRef) -> Result<u64, AgentError> {
        let state = self.lock();
        Ok(state.run(run)?.events.last().map_or(0, |event| event.seq))
    }

    async fn append_step(&self, step: &StepRecord) -> Result<(), AgentError> {
        let mut state = self.lock();
        state.run_mut(&step.run_ref())?.steps.push(step.clone());
        Ok(())
    }

    async fn update_step(
        &self,
        run: &RunRef,
        invocation_id: &str,
        patch: &StepPatch,
    ) -> Result<StepRecord, AgentError> {
        let mut state = self.lock();
        let data = state.run_mut(run)?;
        let step = data
            .steps
            .iter_mut()
            .find(|step| step.invocation_id() == invocation_id)
            .ok_or_else(|| {
                AgentError::not_found(format!("run {} has no step {invocation_id}", run.run_id))
            })?;
        step.apply(patch);
        Ok(step.clone())
    }

    async fn list_steps(&self, run: &RunRef) -> Result<Vec<StepRecord>, AgentError> {
        Ok(self.lock().run(run)?.steps.clone())
    }

    async fn create_request(&self, request: &PendingRequest) -> Result<(), AgentError> {
        let mut state = self.lock();
        let run = state.run_mut(&request.run_ref())?;
        run.requests
            .insert(request.request_id.clone(), request.clone());
        Ok(())
    }

    async fn get_request(
        &self,
        run: &RunRef,
        request_id: &str,
    ) -> Result<Option<PendingRequest>, AgentError> {
        let state = self.lock();
        Ok(state
            .run(run)
            .ok()
            .and_then(|data| data.requests.get(request_id).cloned()))
    }

    async fn resolve_request(
        &self,
        run: &RunRef,
        request_id: &str,
        resolution: Value,
    ) -> Result<PendingRequest, AgentError> {
        let mut state = self.lock();
        let request = state
            .run_mut(run)
            .ok()
            .and_then(|data| data.requests.get_mut(request_id))
            .ok_or_else(|| super::unknown_request(run, request_id))?;
        request.resolution = Some(resolution);
        request.resolved_at = Some(Timestamp::now());
        Ok(request.clone())
    }

    async fn kv_get(&self, scope: &KvScope, key: &str) -> Result<Option<Value>, AgentError> {
        Ok(self
            .lock()
            .kv
            .get(scope)
            .and_then(|entries| entries.get(key))
            .cloned())
    }

    async fn kv_set(&self, scope: &KvScope, key: &str, value: Value) -> Result<(), AgentError> {
        self.lock()
            .kv
            .entry(scope.clone())
            .or_default()
            .insert(key.to_owned(), value);
        Ok(())
    }

    async fn kv_delete(&self, scope: &KvScope, key: &str) -> Result<(), AgentError> {
        if let Some(entries) = self.lock().kv.get_mut(scope) {
            entries.remove(key);
        }
        Ok(())
    }

    async fn kv_list(
        &self,
        scope: &KvScope,
        prefix: Option<&str>,
    ) -> Result<Vec<KvEntry>, AgentError> {
        let state = self.lock();
        let Some(entries) = state.kv.get(scope) else {
            return Ok(Vec::new());
        };
        let prefix = prefix.unwrap_or("");
        Ok(entries
            .range(prefix.to_owned()..)
            .take_while(|(key, _)| key.starts_with(prefix))
            .map(|(key, value)| KvEntry {
                key: key.clone(),
                value: value.clone(),
            })
            .collect())
    }
}
