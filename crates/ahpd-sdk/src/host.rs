//! [`HostBuilder`] and [`Host`]: build a host from options and agents, then hand it connections.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use ahp_types::commands::Implementation;
use ahp_types::common::JsonObject;
use ahp_types::state::{Snapshot, SnapshotState};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::channels::hub::Hub;
use crate::error::HostError;
use crate::inner::{Extension, HostInner};
use crate::resources::port::{ResourceProvider, Resources};
use crate::session::Registry;
use crate::store::remember::Remembered;
use crate::store::sessionstore::{SessionStore, SessionStoreError};
use crate::transport::peer::Peer;

pub use crate::inner::HostHandle;
pub use crate::options::HostOptions;

/// Builds a [`Host`].
#[derive(Default)]
pub struct HostBuilder {
    options: HostOptions,
    agents: Vec<Arc<dyn Agent>>,
    extensions: Vec<Arc<dyn Extension>>,
    resources: Option<Arc<dyn Resources>>,
    providers: Vec<(String, Arc<dyn ResourceProvider>)>,
    session_store: Option<Arc<dyn SessionStore>>,
}

impl HostBuilder {
    /// A builder with every option at its default and no agents.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replace all options at once.
    pub fn options(mut self, options: HostOptions) -> Self {
        self.options = options;
        self
    }

    /// Serve one more folder.
    pub fn path(mut self, path: impl Into<PathBuf>) -> Self {
        self.options.paths.push(path.into());
        self
    }

    /// Add an agent; the first one added is the default provider.
    pub fn agent(mut self, agent: Arc<dyn Agent>) -> Self {
        self.agents.push(agent);
        self
    }

    /// Add several agents, in order.
    pub fn agents(mut self, agents: impl IntoIterator<Item = Arc<dyn Agent>>) -> Self {
        self.agents.extend(agents);
        self
    }

    /// Set `serverInfo`.
    pub fn server_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.options.server_info = Implementation {
            name: name.into(),
            version: Some(version.into()),
            title: None,
        };
        self
    }

    /// Set the delta coalescing window (zero disables).
    pub fn delta_window(mut self, window: Duration) -> Self {
        self.options.delta_window = window;
        self
    }

    /// Set the replay ring size.
    pub fn replay_capacity(mut self, n: usize) -> Self {
        self.options.replay_capacity = n;
        self
    }

    /// Set how many unused sessions opened from the store stay open (see
    /// [`HostOptions::loaded_cap`]).
    pub fn loaded_cap(mut self, n: usize) -> Self {
        self.options.loaded_cap = n;
        self
    }

    /// Set how long an unused session opened from the store stays open.
    pub fn idle_unload(mut self, d: Duration) -> Self {
        self.options.idle_unload = d;
        self
    }

    /// Set how many bytes the replay ring may hold (see [`HostOptions::replay_bytes`]).
    pub fn replay_bytes(mut self, n: usize) -> Self {
        self.options.replay_bytes = n;
        self
    }

    /// Set the per-connection outbound queue size.
    pub fn outbound_queue(mut self, n: usize) -> Self {
        self.options.outbound_queue = n;
        self
    }

    /// Set the largest accepted inbound frame.
    pub fn max_frame_bytes(mut self, n: usize) -> Self {
        self.options.max_frame_bytes = n;
        self
    }

    /// Set the write timeout.
    pub fn write_timeout(mut self, d: Duration) -> Self {
        self.options.write_timeout = d;
        self
    }

    /// Set the transcript page size.
    pub fn turns_page(mut self, n: usize) -> Self {
        self.options.turns_page = n;
        self
    }

    /// Set the `listSessions` cap.
    pub fn list_cap(mut self, n: usize) -> Self {
        self.options.list_cap = n;
        self
    }

    /// Set the grace a dropped client keeps its place in `activeClients`.
    pub fn active_client_grace(mut self, d: Duration) -> Self {
        self.options.active_client_grace = d;
        self
    }

    /// Set how long a disconnected client id is remembered (and its pushed tokens kept).
    pub fn known_client_ttl(mut self, d: Duration) -> Self {
        self.options.known_client_ttl = d;
        self
    }

    /// Set how long a client-run tool call may take (zero: forever).
    pub fn client_tool_timeout(mut self, d: Duration) -> Self {
        self.options.client_tool_timeout = d;
        self
    }

    /// Set how many requests one connection may have in flight (see
    /// [`HostOptions::in_flight_cap`]); zero is taken as one.
    pub fn in_flight_cap(mut self, n: usize) -> Self {
        self.options.in_flight_cap = n;
        self
    }

    /// Set the bytes of frames one connection may have held back (see
    /// [`HostOptions::held_bytes`]).
    pub fn held_bytes(mut self, n: usize) -> Self {
        self.options.held_bytes = n;
        self
    }

    /// Set how long a request waiting on an agent or a port may take (see
    /// [`HostOptions::request_timeout`]); zero is taken as one millisecond.
    pub fn request_timeout(mut self, d: Duration) -> Self {
        self.options.request_timeout = d;
        self
    }

    /// Set `RootState._meta`.
    pub fn root_meta(mut self, meta: JsonObject) -> Self {
        self.options.root_meta = Some(meta);
        self
    }

    /// Set `InitializeResult._meta`.
    pub fn initialize_meta(mut self, meta: JsonObject) -> Self {
        self.options.initialize_meta = Some(meta);
        self
    }

    /// Set whether past sessions opened for a subscription take up their unfinished work (see
    /// [`HostOptions::take_up_unfinished`]).
    pub fn take_up_unfinished(mut self, yes: bool) -> Self {
        self.options.take_up_unfinished = yes;
        self
    }

    /// Serve `resourceRead`, `resourceList` and `resourceResolve` through this port.
    pub fn resources(mut self, resources: Arc<dyn Resources>) -> Self {
        self.resources = Some(resources);
        self
    }

    /// Serve every request on `<scheme>:` URIs, writes and deletes included, through this
    /// provider.
    pub fn resource_provider(
        mut self,
        scheme: impl Into<String>,
        provider: Arc<dyn ResourceProvider>,
    ) -> Self {
        self.providers.push((scheme.into(), provider));
        self
    }

    /// Remember sessions across restarts in this store, e.g.
    /// `FileSessionStore::open(path)?`. Default: none, so a restart forgets client-chosen
    /// titles, read/archived flags, config values and URI spellings (catalogue rows then come
    /// from each agent's `list` alone).
    ///
    /// The store is read once by [`HostBuilder::build`] (a store that cannot be read is logged
    /// at `warn` and the host starts with nothing remembered) and written at most once per
    /// second after a change, and once more on [`Host::shutdown`]; call
    /// [`HostHandle::flush_session_store`] before the process exits to be sure the last change
    /// is on disk.
    pub fn session_store(mut self, store: Arc<dyn SessionStore>) -> Self {
        self.session_store = Some(store);
        self
    }

    /// Serve an extension's `x-` channels and methods.
    pub fn extension(mut self, extension: Arc<dyn Extension>) -> Self {
        self.extensions.push(extension);
        self
    }

    /// Build the host. When called inside a Tokio runtime, every agent is probed in the
    /// background and `root/agentsChanged` is published as answers arrive.
    pub fn build(self) -> Result<Host, HostError> {
        check_unique(&self.agents)?;
        for ext in &self.extensions {
            for name in ext.schemes().into_iter().chain(ext.methods()) {
                if !name.starts_with("x-") {
                    return Err(HostError::ExtensionName(name));
                }
            }
        }
        let hub = Hub::new(
            self.options.replay_capacity,
            self.options.replay_bytes,
            self.options.held_bytes,
        );
        let shutdown = CancellationToken::new();
        let store = self
            .session_store
            .map(|port| Remembered::load(port, shutdown.child_token()));
        let inner = Arc::new(HostInner {
            root: Mutex::new(crate::channels::root::initial_root(
                &self.agents,
                &HashMap::new(),
                self.options.root_meta.clone(),
            )),
            hub,
            agents: RwLock::new(self.agents),
            probes: Mutex::new(HashMap::new()),
            probing: tokio::sync::watch::Sender::new(0),
            registry: Mutex::new(Registry::default()),
            extensions: self.extensions,
            resources: self.resources,
            providers: self.providers,
            known: Mutex::new(HashMap::new()),
            credentials: Arc::new(Mutex::new(HashMap::new())),
            next_conn: AtomicU64::new(1),
            shutdown,
            store,
            turns_ended: tokio::sync::watch::channel(0).0,
            budget_marks: crate::connection::budget::Marks::default(),
            options: self.options,
        });
        let handle = HostHandle { inner };
        for ext in &handle.inner.extensions {
            ext.attach(handle.clone());
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            crate::channels::root::probe_agents(&handle.inner);
            if handle.inner.store.is_some() {
                tokio::spawn(prune(handle.inner.clone()));
            }
            tokio::spawn(crate::session::unload::run(Arc::downgrade(&handle.inner)));
        }
        Ok(Host { handle })
    }
}

/// Drop records whose agent no longer knows the conversation (an agent that is not
/// configured now keeps its records: it may come back; a session in a machine keeps its
/// record).
pub(crate) async fn prune(inner: Arc<HostInner>) {
    let Some(store) = inner.store.clone() else {
        return;
    };
    for record in store.all() {
        let live = inner
            .registry
            .lock()
            .map(|r| r.sessions.contains_key(&record.uri))
            .unwrap_or(true);
        if live {
            continue;
        }
        // A session in a machine stays: its conversation is there, not with its agent here.
        if record.nested.is_some() {
            continue;
        }
        let Some(agent) = inner.agent(Some(&record.provider)) else {
            continue;
        };
        if agent.find(&record.backend_id).await.is_none() {
            tracing::info!(
                session = %record.uri,
                "forgetting a remembered session its agent no longer lists"
            );
            store.forget(&record.uri);
        }
    }
}

fn check_unique(agents: &[Arc<dyn Agent>]) -> Result<(), HostError> {
    let mut seen = std::collections::HashSet::new();
    for a in agents {
        let p = a.descriptor().provider;
        if !seen.insert(p.clone()) {
            return Err(HostError::DuplicateProvider(p));
        }
    }
    Ok(())
}

/// Outbound queue figures of a host (see [`HostHandle::outbound_queue_stats`]), for operators
/// and benchmarks that need to know whether clients kept up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueStats {
    /// Frames one connection's queue holds before the connection is closed as stalled.
    pub capacity: usize,
    /// The most frames any one queue held right after a frame was added to it.
    pub high_water: usize,
    /// Connections closed (code 1013) because their queue was full.
    pub closed_full: u64,
}

/// The per-connection bounds of [`HostOptions`] and how close connections came to them.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionStats {
    /// Requests one connection may have in flight.
    pub in_flight_cap: usize,
    /// The most any one connection had in flight.
    pub in_flight_high_water: usize,
    /// Requests and notifications refused because their connection was at the cap.
    pub refused_over_cap: u64,
    /// Bytes of frames one connection may have held back.
    pub held_bytes: usize,
    /// The most bytes any one connection had held back.
    pub held_high_water: usize,
    /// Connections closed (code 1013) because what they had held back passed the bound.
    pub closed_held_full: u64,
}

impl HostHandle {
    /// The count of turns that have ended in this host, any session, any outcome; it changes
    /// each time one ends. The daemon waits on it to give memory back once work is done.
    pub fn turn_ends(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.turns_ended.subscribe()
    }

    /// Publish an extension action (its `type` starts with `x-`) on an extension channel: it
    /// gets the next `serverSeq`, goes to the channel's subscribers and into the replay ring.
    /// Returns the number it got.
    pub fn publish_extension(&self, channel: &str, action: &Value) -> u64 {
        let text = action.to_string();
        self.inner.hub.publish_raw(channel, &text, None, false)
    }

    /// Replace the agents (e.g. after agent records changed) and publish `root/agentsChanged`.
    /// Live sessions of a removed agent go on until disposed.
    pub fn set_agents(&self, agents: Vec<Arc<dyn Agent>>) -> Result<(), HostError> {
        check_unique(&agents)?;
        if let Ok(mut slot) = self.inner.agents.write() {
            *slot = agents;
        }
        crate::channels::root::publish_agents(&self.inner);
        if tokio::runtime::Handle::try_current().is_ok() {
            crate::channels::root::probe_agents(&self.inner);
        }
        Ok(())
    }

    /// Resolves once no agent's model probe is out, so the root lists every catalogue an
    /// agent could read. Each probe is bounded by the agent's own limits; a host that just
    /// started (an editor's first session) waits here rather than offering a short list.
    pub async fn probed(&self) {
        let mut rx = self.inner.probing.subscribe();
        let _ = rx.wait_for(|out| *out == 0).await;
    }

    /// Write the session store now if anything changed since its last save, and wait for
    /// it. Without a store this does nothing. An embedder calls it before exiting.
    pub async fn flush_session_store(&self) -> Result<(), SessionStoreError> {
        match &self.inner.store {
            Some(store) => store.flush().await,
            None => Ok(()),
        }
    }

    /// The current `serverSeq`.
    pub fn server_seq(&self) -> u64 {
        self.inner.hub.current_seq()
    }

    /// How full the per-connection outbound queues have been since the host started.
    pub fn outbound_queue_stats(&self) -> QueueStats {
        let (high_water, closed_full) = self.inner.hub.queue_marks();
        QueueStats {
            capacity: self.inner.options.outbound_queue.max(1),
            high_water,
            closed_full,
        }
    }

    /// What connections have held back and had in flight since the host started.
    pub fn connection_stats(&self) -> ConnectionStats {
        let (in_flight_high_water, refused_over_cap) = self.inner.budget_marks.read();
        let (held_high_water, closed_held_full) = self.inner.hub.held_marks();
        ConnectionStats {
            in_flight_cap: self.inner.options.in_flight_cap.max(1),
            in_flight_high_water,
            refused_over_cap,
            held_bytes: self.inner.options.held_bytes,
            held_high_water,
            closed_held_full,
        }
    }

    /// How many client ids the host remembers and for how many it keeps pushed tokens.
    pub fn client_table_sizes(&self) -> (usize, usize) {
        let known = self.inner.known.lock().map(|k| k.len()).unwrap_or(0);
        let creds = self.inner.credentials.lock().map(|c| c.len()).unwrap_or(0);
        (known, creds)
    }

    /// The session URIs open now (created, or opened from the store and not unloaded).
    pub fn open_sessions(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .inner
            .registry
            .lock()
            .map(|r| r.sessions.keys().cloned().collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// The replay ring's envelope count and weight in bytes, to check them against
    /// [`HostOptions::replay_capacity`] and [`HostOptions::replay_bytes`].
    pub fn replay_ring_usage(&self) -> (usize, usize) {
        self.inner.hub.ring_usage()
    }

    /// A snapshot of a channel (root, session or chat), as a fresh subscriber would get it.
    pub async fn snapshot(&self, uri: &str) -> Option<Snapshot> {
        if uri == ahp_types::ROOT_RESOURCE_URI {
            let root = self.inner.root.lock().ok()?;
            return Some(Snapshot {
                resource: uri.to_owned(),
                state: SnapshotState::Root(Box::new(root.clone())),
                from_seq: self.inner.hub.current_seq() as i64,
            });
        }
        crate::inner::snapshot_of(&self.inner, uri).await
    }
}

/// An AHP host. Clone-free: hand out [`Host::handle`] where several owners need it.
pub struct Host {
    handle: HostHandle,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").finish_non_exhaustive()
    }
}

impl Host {
    /// A builder.
    pub fn builder() -> HostBuilder {
        HostBuilder::new()
    }

    /// A cloneable handle.
    pub fn handle(&self) -> HostHandle {
        self.handle.clone()
    }

    /// Serve one connection until it ends.
    pub async fn accept(&self, peer: Peer) {
        crate::connection::run(self.handle.inner.clone(), peer).await;
    }

    /// A snapshot of a channel, as a fresh subscriber would get it.
    pub async fn snapshot(&self, uri: &str) -> Option<Snapshot> {
        self.handle.snapshot(uri).await
    }

    /// Replace the agents; see [`HostHandle::set_agents`].
    pub fn set_agents(&self, agents: Vec<Arc<dyn Agent>>) -> Result<(), HostError> {
        self.handle.set_agents(agents)
    }

    /// Write the session store now; see [`HostHandle::flush_session_store`].
    pub async fn flush_session_store(&self) -> Result<(), SessionStoreError> {
        self.handle.flush_session_store().await
    }

    /// Wait until no model probe is out; see [`HostHandle::probed`].
    pub async fn probed(&self) {
        self.handle.probed().await
    }

    /// Stop accepting work: listeners stop and open connections close; the session store
    /// is saved once more in the background (await [`Host::flush_session_store`] to wait).
    pub fn shutdown(&self) {
        self.handle.inner.shutdown.cancel();
    }

    /// Resolves when [`Host::shutdown`] was called.
    pub async fn closed(&self) {
        self.handle.inner.shutdown.cancelled().await;
    }
}
