//! [`FileStore`]: the durable [`Store`] on disk.
//!
//! Every call runs its file work on tokio's blocking pool, so a slow disk never stalls the runtime's
//! workers. Inside one instance, read-modify-write steps on a session's records take that
//! session's guard, and event appends to one run go through that run's FIFO queue, so concurrent
//! appends land in the order they were called.

mod cache;
mod context;
#[cfg(test)]
mod crash_tests;
mod cut;
mod kv;
pub(crate) mod runs;
mod sessions;
pub(crate) mod steps;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use cofold_agents::error::AgentError;
use cofold_agents::event::{Event, EventBody};
use cofold_agents::message::Message;
use cofold_agents::store::{
    KvEntry, KvScope, NewSession, PendingRequest, RunRecord, RunRef, RunStatus, RunUpdate,
    SessionQuery, SessionRecord, StepPatch, StepRecord, Store, TruncationResult,
};
use serde_json::Value;

use crate::home::workspace_slug;
use crate::jsonl::create_dirs;
use crate::names::encode_segment;

/// How a [`FileStore`] behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStoreOptions {
    /// How long a claim's holder may go without a heartbeat before it counts as dead, when its
    /// process cannot be seen from here (another machine or pid namespace, no `/proc`). A holder
    /// this machine can see is judged by its process at once, whatever its heartbeat. Default:
    /// 60 s.
    pub stale_after: Duration,
}

impl Default for FileStoreOptions {
    fn default() -> Self {
        Self {
            stale_after: Duration::from_secs(60),
        }
    }
}

/// The durable store: one folder per session under a root folder (usually
/// [`cofold_home`](crate::cofold_home)). Cloning shares the instance and its caches.
#[derive(Debug, Clone)]
pub struct FileStore {
    inner: Arc<Inner>,
}

type EventQueue = Arc<tokio::sync::Mutex<Tail>>;

/// What a run's event queue remembers of its log between appends.
#[derive(Debug, Default)]
pub(crate) struct Tail {
    /// The last stored seq, once read from the file.
    pub(crate) last_seq: Option<u64>,
    /// The writer lock as it was when it last let an append through.
    pub(crate) fence: Option<crate::lock::Stamp>,
    /// The log held open while a model's reply streams (see `Inner::append_event`).
    pub(crate) log: Option<OpenLog>,
}

/// A run's event log held open between appends, with the session folder its lock is in.
#[derive(Debug)]
pub(crate) struct OpenLog {
    pub(crate) session: PathBuf,
    pub(crate) appender: crate::jsonl::Appender,
}

#[derive(Debug)]
pub(crate) struct Inner {
    root: PathBuf,
    options: FileStoreOptions,
    // Session id → its folder, for the sessions used most recently (see `cache`).
    folders: Mutex<cache::Folders>,
    // Session folder → the guard of read-modify-write steps on its records, while one is used.
    guards: cache::Guards,
    // (session, run) → the FIFO queue of its event appends, holding the last stored seq once known;
    // dropped once the run's last event (a final `run.finished`) is stored.
    queues: Mutex<HashMap<(String, String), EventQueue>>,
}

pub(crate) const SESSION_FILE: &str = "session.json";
pub(crate) const MESSAGES_FILE: &str = "messages.jsonl";
pub(crate) const RUN_FILE: &str = "run.json";
pub(crate) const EVENTS_FILE: &str = "events.jsonl";
pub(crate) const STEPS_FILE: &str = "steps.jsonl";

fn lock_map<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The maps hold plain data; a panic elsewhere does not make them wrong.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl FileStore {
    /// Opens (creating when needed) the store rooted at `root`.
    pub fn open(
        root: impl Into<PathBuf>,
        options: FileStoreOptions,
    ) -> Result<FileStore, AgentError> {
        let root = root.into();
        create_dirs(&root)?;
        match crate::private::tighten(&root) {
            Ok(true) => tracing::warn!(
                store = %root.display(),
                "the store could be read by other users; its folders are now 0700 and its files 0600"
            ),
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(store = %root.display(), error = %err, "could not check who may read the store")
            }
        }
        // Sessions whose delete a crash cut short are already gone from sight, and so are the
        // sessions a crash stopped before their create or fork renamed them into place: free
        // their space.
        let quiet_since = std::time::SystemTime::now()
            .checked_sub(crate::durable::STAGING_QUIET)
            .unwrap_or(std::time::SystemTime::UNIX_EPOCH);
        let mut parents = vec![root.join("sessions")];
        let workspaces = root.join("workspaces");
        for slug in crate::jsonl::sorted_entries(&workspaces)? {
            parents.push(workspaces.join(slug).join("sessions"));
        }
        for parent in &parents {
            crate::durable::sweep_tombstones(parent);
            crate::durable::sweep_staging(parent, quiet_since);
        }
        let inner = Inner {
            root,
            options,
            folders: Mutex::new(cache::Folders::default()),
            guards: cache::Guards::default(),
            queues: Mutex::new(HashMap::new()),
        };
        Ok(FileStore {
            inner: Arc::new(inner),
        })
    }

    /// The root folder.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The folder holding a session, or `None` when there is no such session.
    pub async fn session_dir(&self, session_id: &str) -> Result<Option<PathBuf>, AgentError> {
        let id = session_id.to_owned();
        self.blocking(move |inner| inner.find_session(&id)).await
    }

    async fn blocking<T: Send + 'static>(
        &self,
        work: impl FnOnce(&Inner) -> Result<T, AgentError> + Send + 'static,
    ) -> Result<T, AgentError> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || work(&inner))
            .await
            .map_err(|err| {
                AgentError::internal(format!(
                    "a file store task stopped before it finished: {err}"
                ))
            })?
    }
}

impl Inner {
    /// `sessions/` or `workspaces/<slug>/sessions/`.
    fn sessions_parent(&self, workspace: Option<&str>) -> PathBuf {
        match workspace {
            None => self.root.join("sessions"),
            Some(workspace) => self
                .root
                .join("workspaces")
                .join(workspace_slug(workspace))
                .join("sessions"),
        }
    }

    /// Finds a session's folder: the cache, then `sessions/<id>`, then one scan of the workspaces.
    /// A rewind a crash cut short is finished first, so every caller sees the rewound session.
    pub(crate) fn find_session(&self, session_id: &str) -> Result<Option<PathBuf>, AgentError> {
        let found = self.locate_session(session_id)?;
        if let Some(folder) = &found {
            self.finish_rewind(folder, session_id)?;
        }
        Ok(found)
    }

    fn locate_session(&self, session_id: &str) -> Result<Option<PathBuf>, AgentError> {
        let segment = encode_segment("session id", session_id)?;
        let cached = lock_map(&self.folders).get(session_id);
        if let Some(folder) = cached
            && folder.join(SESSION_FILE).is_file()
        {
            return Ok(Some(folder));
        }
        let mut found = None;
        let plain = self.root.join("sessions").join(&segment);
        if plain.join(SESSION_FILE).is_file() {
            found = Some(plain);
        } else {
            let workspaces = self.root.join("workspaces");
            for slug in crate::jsonl::sorted_entries(&workspaces)? {
                let candidate = workspaces.join(slug).join("sessions").join(&segment);
                if candidate.join(SESSION_FILE).is_file() {
                    found = Some(candidate);
                    break;
                }
            }
        }
        let mut folders = lock_map(&self.folders);
        match &found {
            Some(folder) => folders.insert(session_id, folder.clone()),
            None => folders.remove(session_id),
        }
        Ok(found)
    }

    /// The folder of a session that must exist.
    pub(crate) fn session_folder(&self, session_id: &str) -> Result<PathBuf, AgentError> {
        self.find_session(session_id)?
            .ok_or_else(|| AgentError::not_found(format!("there is no session {session_id}")))
    }

    /// The folder a run of this session has, or would have.
    pub(crate) fn run_folder(session_folder: &Path, run_id: &str) -> Result<PathBuf, AgentError> {
        Ok(session_folder
            .join("runs")
            .join(encode_segment("run id", run_id)?))
    }

    /// The session folder and run folder of a run that must exist.
    pub(crate) fn existing_run(&self, run: &RunRef) -> Result<(PathBuf, PathBuf), AgentError> {
        let missing = || {
            AgentError::not_found(format!(
                "session {} has no run {}",
                run.session_id, run.run_id
            ))
        };
        let session = self.find_session(&run.session_id)?.ok_or_else(missing)?;
        let folder = Self::run_folder(&session, &run.run_id)?;
        if !folder.join(RUN_FILE).is_file() {
            return Err(missing());
        }
        Ok((session, folder))
    }

    /// The guard of read-modify-write steps on one session's records.
    pub(crate) fn guard(&self, session_folder: &Path) -> cache::Guard<'_> {
        self.guards.take(session_folder)
    }

    /// The event queue of one run.
    pub(crate) fn queue(&self, run: &RunRef) -> EventQueue {
        let key = (run.session_id.clone(), run.run_id.clone());
        Arc::clone(lock_map(&self.queues).entry(key).or_default())
    }

    /// Forgets what this instance knows about a session's runs (after a delete or a cut).
    pub(crate) fn forget_runs(&self, session_id: &str, run_ids: Option<&[String]>) {
        lock_map(&self.queues).retain(|(session, run), _| {
            session != session_id || run_ids.is_some_and(|dropped| !dropped.contains(run))
        });
    }

    pub(crate) fn forget_session(&self, session_id: &str) {
        lock_map(&self.folders).remove(session_id);
        self.forget_runs(session_id, None);
    }
}

#[async_trait]
impl Store for FileStore {
    async fn get_session(&self, session_id: &str) -> Result<Option<SessionRecord>, AgentError> {
        let id = session_id.to_owned();
        self.blocking(move |inner| inner.get_session(&id)).await
    }

    async fn create_session(&self, new: NewSession) -> Result<SessionRecord, AgentError> {
        self.blocking(move |inner| inner.create_session(new)).await
    }

    async fn list_sessions(&self, query: SessionQuery) -> Result<Vec<SessionRecord>, AgentError> {
        self.blocking(move |inner| inner.list_sessions(&query))
            .await
    }

    async fn delete_session(&self, session_id: &str) -> Result<(), AgentError> {
        let id = session_id.to_owned();
        self.blocking(move |inner| inner.delete_session(&id)).await
    }

    async fn truncate(
        &self,
        session_id: &str,
        through_message_id: &str,
    ) -> Result<TruncationResult, AgentError> {
        let (id, through) = (session_id.to_owned(), through_message_id.to_owned());
        self.blocking(move |inner| inner.truncate(&id, &through))
            .await
    }

    async fn fork(
        &self,
        from_id: &str,
        through_message_id: &str,
        new_id: &str,
    ) -> Result<SessionRecord, AgentError> {
        let (from, through, new) = (
            from_id.to_owned(),
            through_message_id.to_owned(),
            new_id.to_owned(),
        );
        self.blocking(move |inner| inner.fork(&from, &through, &new))
            .await
    }

    async fn append_messages(
        &self,
        session_id: &str,
        run_id: &str,
        messages: &[Message],
    ) -> Result<(), AgentError> {
        let (id, run, messages) = (session_id.to_owned(), run_id.to_owned(), messages.to_vec());
        self.blocking(move |inner| inner.append_messages(&id, &run, &messages))
            .await
    }

    async fn list_messages(
        &self,
        session_id: &str,
        limit: Option<usize>,
    ) -> Result<Vec<Message>, AgentError> {
        let id = session_id.to_owned();
        self.blocking(move |inner| inner.list_messages(&id, limit))
            .await
    }

    async fn claim_writer(&self, session_id: &str, run_id: &str) -> Result<bool, AgentError> {
        let (id, run) = (session_id.to_owned(), run_id.to_owned());
        self.blocking(move |inner| inner.claim_writer(&id, &run))
            .await
    }

    async fn release_writer(&self, session_id: &str, run_id: &str) -> Result<(), AgentError> {
        let (id, run) = (session_id.to_owned(), run_id.to_owned());
        self.blocking(move |inner| inner.release_writer(&id, &run))
            .await
    }

    async fn heartbeat(&self, session_id: &str, run_id: &str) -> Result<(), AgentError> {
        let (id, run) = (session_id.to_owned(), run_id.to_owned());
        self.blocking(move |inner| inner.heartbeat(&id, &run)).await
    }

    async fn dead_writer(&self, session_id: &str) -> Result<Option<String>, AgentError> {
        let id = session_id.to_owned();
        self.blocking(move |inner| inner.dead_writer(&id)).await
    }

    async fn list_context_messages(&self, session_id: &str) -> Result<Vec<Message>, AgentError> {
        let id = session_id.to_owned();
        self.blocking(move |inner| inner.list_context_messages(&id))
            .await
    }

    async fn last_event_seq(&self, run: &RunRef) -> Result<u64, AgentError> {
        let run = run.clone();
        self.blocking(move |inner| {
            let (_, folder) = inner.existing_run(&run)?;
            runs::last_intact_seq(&folder.join(EVENTS_FILE))
        })
        .await
    }

    async fn create_run(&self, record: RunRecord) -> Result<(), AgentError> {
        self.blocking(move |inner| inner.create_run(record)).await
    }

    async fn get_run(&self, run: &RunRef) -> Result<Option<RunRecord>, AgentError> {
        let run = run.clone();
        self.blocking(move |inner| inner.get_run(&run)).await
    }

    async fn list_runs(
        &self,
        session_id: &str,
        status: Option<RunStatus>,
    ) -> Result<Vec<RunRecord>, AgentError> {
        let id = session_id.to_owned();
        self.blocking(move |inner| inner.list_runs(&id, status))
            .await
    }

    async fn update_run(&self, update: RunUpdate) -> Result<RunRecord, AgentError> {
        self.blocking(move |inner| inner.update_run(&update)).await
    }

    async fn append_event(&self, event: &Event) -> Result<(), AgentError> {
        let run = RunRef::new(event.session_id.clone(), event.run_id.clone());
        // Joining the run's queue is the first thing that waits, so appends keep the order in
        // which they were called.
        let queue = self.inner.queue(&run);
        let mut tail = queue.lock_owned().await;
        // The fragments of a streaming reply go through the log held open since the previous
        // one: a `write` that lands in the page cache (no sync), with a `stat` or two every
        // 20 ms, made here rather than handed to a blocking thread and back, which cost more
        // than the work.
        if let Some(appended) = self.inner.append_held(event, &mut tail) {
            return appended;
        }
        let event = event.clone();
        let last = matches!(
            &event.body,
            EventBody::RunFinished { outcome } if outcome.status().is_terminal()
        );
        let appended = self
            .blocking(move |inner| {
                let mut tail = tail;
                inner.append_event(&event, &mut tail)
            })
            .await;
        // An ended run appends nothing more; its queue would otherwise stay for as long as the
        // store is open (one per run ever made).
        if last && appended.is_ok() {
            lock_map(&self.inner.queues).remove(&(run.session_id, run.run_id));
        }
        appended
    }

    async fn list_events(
        &self,
        run: &RunRef,
        after_seq: Option<u64>,
    ) -> Result<Vec<Event>, AgentError> {
        let run = run.clone();
        self.blocking(move |inner| inner.list_events(&run, after_seq))
            .await
    }

    async fn append_step(&self, step: &StepRecord) -> Result<(), AgentError> {
        let step = step.clone();
        self.blocking(move |inner| inner.append_step(step)).await
    }

    async fn update_step(
        &self,
        run: &RunRef,
        invocation_id: &str,
        patch: &StepPatch,
    ) -> Result<StepRecord, AgentError> {
        let (run, invocation, patch) = (run.clone(), invocation_id.to_owned(), patch.clone());
        self.blocking(move |inner| inner.update_step(&run, &invocation, &patch))
            .await
    }

    async fn list_steps(&self, run: &RunRef) -> Result<Vec<StepRecord>, AgentError> {
        let run = run.clone();
        self.blocking(move |inner| inner.list_steps(&run)).await
    }

    async fn create_request(&self, request: &PendingRequest) -> Result<(), AgentError> {
        let request = request.clone();
        self.blocking(move |inner| inner.create_request(&request))
            .await
    }

    async fn get_request(
        &self,
        run: &RunRef,
        request_id: &str,
    ) -> Result<Option<PendingRequest>, AgentError> {
        let (run, request) = (run.clone(), request_id.to_owned());
        self.blocking(move |inner| inner.get_request(&run, &request))
            .await
    }

    async fn resolve_request(
        &self,
        run: &RunRef,
        request_id: &str,
        resolution: Value,
    ) -> Result<PendingRequest, AgentError> {
        let (run, request) = (run.clone(), request_id.to_owned());
        self.blocking(move |inner| inner.resolve_request(&run, &request, resolution))
            .await
    }

    async fn kv_get(&self, scope: &KvScope, key: &str) -> Result<Option<Value>, AgentError> {
        let (scope, key) = (scope.clone(), key.to_owned());
        self.blocking(move |inner| inner.kv_get(&scope, &key)).await
    }

    async fn kv_set(&self, scope: &KvScope, key: &str, value: Value) -> Result<(), AgentError> {
        let (scope, key) = (scope.clone(), key.to_owned());
        self.blocking(move |inner| inner.kv_set(&scope, &key, &value))
            .await
    }

    async fn kv_delete(&self, scope: &KvScope, key: &str) -> Result<(), AgentError> {
        let (scope, key) = (scope.clone(), key.to_owned());
        self.blocking(move |inner| inner.kv_delete(&scope, &key))
            .await
    }

    async fn kv_list(
        &self,
        scope: &KvScope,
        prefix: Option<&str>,
    ) -> Result<Vec<KvEntry>, AgentError> {
        let (scope, prefix) = (scope.clone(), prefix.map(str::to_owned));
        self.blocking(move |inner| inner.kv_list(&scope, prefix.as_deref()))
            .await
    }
}
