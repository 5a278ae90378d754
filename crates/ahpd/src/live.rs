//! Live sessions, so a shutdown can close every backend, and
//! their folders, which are served as resources while the session lives.
//!
//! The host owns each session it opens and closes it only when the session is disposed or
//! unloaded. To close them all when the daemon stops (with `Session::suspend`, which leaves a
//! turn waiting on a person for the next start), every agent handed to the host is wrapped: a
//! session it creates is kept behind a shared slot the daemon can empty. The wrapper forwards
//! every member of `Agent` and `Session`, so the host sees the agent unchanged.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use ahpd_sdk::ahp_types::commands::{CompletionItem, CompletionItemKind, SessionConfigValueItem};
use ahpd_sdk::ahp_types::common::JsonObject;
use ahpd_sdk::ahp_types::state::{PendingMessage, SessionConfigSchema, Turn};
use ahpd_sdk::resources::RootSource;
use ahpd_sdk::{
    Agent, AgentDescriptor, AgentError, ForkPoint, PastSession, Probe, Refusal, Session,
    SessionStart, TurnRequest,
};
use async_trait::async_trait;

/// One session, `None` once closed.
type Cell = Mutex<Option<Box<dyn Session>>>;
type Slot = Arc<Cell>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Every session the wrapped agents opened that is not closed yet, with its folders.
#[derive(Default)]
pub struct LiveSessions {
    slots: Mutex<Vec<(Weak<Cell>, Vec<PathBuf>)>>,
    /// The daemon's MCP servers, stopped after the sessions close.
    mcp: Mutex<Option<ahpd_mcp::McpHub>>,
    /// The machines port, told after the sessions close (its removal timers settle).
    computers: Mutex<Option<Arc<dyn ahpd_sdk::machine::ComputerPort>>>,
}

impl LiveSessions {
    /// A new, empty set.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// `agent`, with the sessions it opens tracked here.
    pub fn wrap(self: &Arc<Self>, agent: Arc<dyn Agent>) -> Arc<dyn Agent> {
        Arc::new(Tracked {
            inner: agent,
            live: self.clone(),
        })
    }

    /// The MCP servers to stop with the sessions.
    pub fn set_mcp(&self, hub: ahpd_mcp::McpHub) {
        *lock(&self.mcp) = Some(hub);
    }

    /// The machines port to settle once the sessions are closed.
    pub fn set_computers(&self, port: Arc<dyn ahpd_sdk::machine::ComputerPort>) {
        *lock(&self.computers) = Some(port);
    }

    /// The MCP servers, until they are stopped.
    pub fn mcp(&self) -> Option<ahpd_mcp::McpHub> {
        lock(&self.mcp).clone()
    }

    fn add(&self, slot: &Slot, folders: Vec<PathBuf>) {
        let mut slots = lock(&self.slots);
        // Forget sessions the host has already dropped, so the list does not grow for ever.
        slots.retain(|(w, _)| w.strong_count() > 0);
        slots.push((Arc::downgrade(slot), folders));
    }

    /// Closes every open session, all at once; returns how many there were. The host's later
    /// calls on a closed session do nothing.
    pub async fn close_all(&self) -> usize {
        self.end_all(false).await
    }

    /// Closes every open session for a graceful stop of the daemon, all at once; returns how
    /// many there were. Unlike [`LiveSessions::close_all`], a turn that only waits on a person
    /// is left in the agent's store for the next start to ask again (`Session::suspend`).
    pub async fn suspend_all(&self) -> usize {
        self.end_all(true).await
    }

    async fn end_all(&self, suspend: bool) -> usize {
        let taken: Vec<Box<dyn Session>> = {
            let mut slots = lock(&self.slots);
            let taken = slots
                .iter()
                .filter_map(|(w, _)| w.upgrade())
                .filter_map(|slot| lock(&slot).take())
                .collect();
            slots.clear();
            taken
        };
        let count = taken.len();
        futures::future::join_all(taken.into_iter().map(|mut s| async move {
            if suspend {
                s.suspend().await;
            } else {
                s.close().await;
            }
        }))
        .await;
        let hub = lock(&self.mcp).take();
        if let Some(hub) = hub {
            hub.shutdown().await;
        }
        let computers = lock(&self.computers).take();
        if let Some(port) = computers {
            port.shutdown().await;
        }
        count
    }
}

impl RootSource for LiveSessions {
    fn roots(&self) -> Vec<PathBuf> {
        lock(&self.slots)
            .iter()
            .filter(|(w, _)| w.upgrade().is_some_and(|slot| lock(&slot).is_some()))
            .flat_map(|(_, folders)| folders.iter().cloned())
            .collect()
    }
}

/// The folders a session works in: those the client named, or else the scratch folder the
/// cofold engine makes for a session without one (`~/.copilot/chats/<id>`, the id escaped as
/// that engine escapes it), when it exists.
fn session_folders(mut asked: Vec<PathBuf>, backend_id: &str) -> Vec<PathBuf> {
    if asked.is_empty()
        && let Ok(home) = crate::locations::home()
    {
        let mut segment = String::new();
        for b in backend_id.bytes() {
            if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
                segment.push(b as char);
            } else {
                segment.push_str(&format!("%{b:02X}"));
            }
        }
        let scratch = home.join(".copilot").join("chats").join(segment);
        if scratch.is_dir() {
            asked.push(scratch);
        }
    }
    asked
}

/// An agent whose sessions are tracked.
struct Tracked {
    inner: Arc<dyn Agent>,
    live: Arc<LiveSessions>,
}

#[async_trait]
impl Agent for Tracked {
    fn descriptor(&self) -> AgentDescriptor {
        self.inner.descriptor()
    }

    fn config_schema(&self, working_directory: Option<&Path>) -> SessionConfigSchema {
        self.inner.config_schema(working_directory)
    }

    fn config_defaults(&self, working_directory: Option<&Path>) -> JsonObject {
        self.inner.config_defaults(working_directory)
    }

    fn validate_config(&self, values: &JsonObject) -> Result<(), Refusal> {
        self.inner.validate_config(values)
    }

    async fn create(&self, start: SessionStart) -> Result<Box<dyn Session>, AgentError> {
        let asked: Vec<PathBuf> = start
            .working_directory
            .iter()
            .chain(&start.additional_directories)
            .cloned()
            .collect();
        let session = self.inner.create(start).await?;
        let backend_id = session.backend_id();
        let folders = session_folders(asked, &backend_id);
        let slot: Slot = Arc::new(Mutex::new(Some(session)));
        self.live.add(&slot, folders);
        Ok(Box::new(TrackedSession { slot, backend_id }))
    }

    // The machine methods pass through too: without them a session asking for a machine got
    // the no-plugin sentence for an agent that cannot run nested.
    fn runs_nested(&self) -> bool {
        self.inner.runs_nested()
    }

    fn machine_refusal(&self, value: &str) -> String {
        self.inner.machine_refusal(value)
    }

    fn machine(&self) -> std::collections::BTreeMap<String, ahpd_sdk::machine::MachineNeed> {
        self.inner.machine()
    }

    async fn probe(&self) -> Probe {
        self.inner.probe().await
    }

    async fn list(&self) -> Vec<PastSession> {
        self.inner.list().await
    }

    async fn unfinished(&self, id: &str) -> bool {
        self.inner.unfinished(id).await
    }

    async fn find(&self, id: &str) -> Option<PastSession> {
        self.inner.find(id).await
    }

    async fn transcript(&self, id: &str) -> Option<Vec<Turn>> {
        self.inner.transcript(id).await
    }

    async fn delete(&self, id: &str) -> Result<(), AgentError> {
        self.inner.delete(id).await
    }

    async fn config_completions(
        &self,
        property: &str,
        query: Option<&str>,
        working_directory: Option<&Path>,
        values: &JsonObject,
    ) -> Vec<SessionConfigValueItem> {
        self.inner
            .config_completions(property, query, working_directory, values)
            .await
    }
}

/// A session the daemon can close from outside. Once closed (by the host or by a shutdown),
/// every call is a no-op with the answer a backend without that feature gives.
struct TrackedSession {
    slot: Slot,
    backend_id: String,
}

impl TrackedSession {
    fn with<R>(&self, closed: R, f: impl FnOnce(&mut Box<dyn Session>) -> R) -> R {
        match lock(&self.slot).as_mut() {
            Some(s) => f(s),
            None => closed,
        }
    }
}

fn closed_refusal() -> Refusal {
    Refusal::new("the session is closed")
}

#[async_trait]
impl Session for TrackedSession {
    fn backend_id(&self) -> String {
        self.backend_id.clone()
    }

    fn begin(&mut self, turn: TurnRequest) {
        self.with((), |s| s.begin(turn));
    }

    fn cancel(&mut self, turn_id: &str) {
        self.with((), |s| s.cancel(turn_id));
    }

    fn stopped(&mut self, turn_id: &str, duration: i64) {
        self.with((), |s| s.stopped(turn_id, duration));
    }

    fn steer(&mut self, message: PendingMessage) -> bool {
        self.with(false, |s| s.steer(message))
    }

    fn configure(&mut self, changes: &JsonObject) -> Result<(), Refusal> {
        self.with(Err(closed_refusal()), |s| s.configure(changes))
    }

    fn resume_turn(&mut self, turn_id: &str) -> Result<(), Refusal> {
        self.with(Err(closed_refusal()), |s| s.resume_turn(turn_id))
    }

    fn rewind(&mut self, turn_id: Option<&str>) -> Result<(), Refusal> {
        self.with(Err(closed_refusal()), |s| s.rewind(turn_id))
    }

    fn fork_point(&self, turn_id: &str) -> Option<ForkPoint> {
        self.with(None, |s| s.fork_point(turn_id))
    }

    fn mcp_server(&mut self, id: &str, run: bool) -> Result<(), Refusal> {
        self.with(Err(closed_refusal()), |s| s.mcp_server(id, run))
    }

    fn completions(
        &self,
        kind: &CompletionItemKind,
        text: &str,
        offset: i64,
    ) -> Vec<CompletionItem> {
        self.with(Vec::new(), |s| s.completions(kind, text, offset))
    }

    fn watched(&mut self) {
        self.with((), |s| s.watched());
    }

    fn changeset(&self, channel: &str) -> Option<ahp_types::state::ChangesetState> {
        self.with(None, |s| s.changeset(channel))
    }

    fn changeset_operation(
        &mut self,
        params: ahp_types::commands::InvokeChangesetOperationParams,
    ) -> Option<ahpd_sdk::OperationFuture> {
        self.with(None, |s| s.changeset_operation(params))
    }

    async fn close(&mut self) {
        // Taken out first: the lock is never held across the backend's own await.
        let taken = lock(&self.slot).take();
        if let Some(mut s) = taken {
            s.close().await;
        }
    }

    async fn suspend(&mut self) {
        let taken = lock(&self.slot).take();
        if let Some(mut s) = taken {
            s.suspend().await;
        }
    }
}
