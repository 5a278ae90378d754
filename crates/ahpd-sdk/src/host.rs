//! [`HostBuilder`] and [`Host`]: build a host from options and agents, then hand it connections.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ahp_types::commands::Implementation;
use ahp_types::common::JsonObject;
use ahp_types::state::{Snapshot, SnapshotState};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, Probe, Secret};
use crate::error::HostError;
use crate::hub::Hub;
use crate::peer::Peer;
use crate::ports::{Extension, ResourceProvider, Resources, SessionStore, SessionStoreError};
use crate::remember::Remembered;
use crate::session::Registry;

/// Every option of a host, with the defaults documented on each field.
#[derive(Clone)]
pub struct HostOptions {
    /// Folders the host serves; the first is advertised as `defaultDirectory`. Default: none.
    pub paths: Vec<PathBuf>,
    /// `InitializeResult.serverInfo`. Default: `{name: "ahpd-sdk", version: <crate version>}`.
    pub server_info: Implementation,
    /// Delta coalescing window; zero disables. Default: 75 ms.
    pub delta_window: Duration,
    /// Envelopes kept for `reconnect` replay. Default: 10,000.
    pub replay_capacity: usize,
    /// Bytes the replay ring may hold (envelope texts plus 64 bytes each); the oldest go
    /// first when either bound is passed. Default: 16 MiB.
    pub replay_bytes: usize,
    /// Frames queued per connection before it is closed as stalled. Default: 4,096.
    pub outbound_queue: usize,
    /// Largest inbound frame or line in bytes. Default: 16 MiB.
    pub max_frame_bytes: usize,
    /// How long one frame may take to reach the socket. Default: 10 s.
    pub write_timeout: Duration,
    /// Turns loaded per page for a chat read from a transcript. Default: 50.
    pub turns_page: usize,
    /// Most rows one `listSessions` reply carries. Default: 1,000.
    pub list_cap: usize,
    /// How long a dropped client stays in `activeClients`. Default: 30 s.
    pub active_client_grace: Duration,
    /// How long a disconnected client id is remembered for `reconnect`, with the tokens it
    /// pushed; expired ones are dropped at the next handshake. Default: 10 min.
    pub known_client_ttl: Duration,
    /// How long a client-run tool call may take; zero waits forever. Default: 10 min.
    pub client_tool_timeout: Duration,
    /// How long a request that waits on an agent or a port (`createSession`, opening a stored
    /// session, `listSessions`, `resourceRead`, ...) may take before it is answered with an
    /// error; an agent's opening of a backend is given up after it too. Default: 60 s.
    pub request_timeout: Duration,
    /// Most unused sessions kept open (nobody subscribed, no active client, nothing running;
    /// a session created in this run counts once the agent's store has it); past it the least
    /// recently used are unloaded. Default: 64.
    pub loaded_cap: usize,
    /// How long such a session may stay unused before it is unloaded. Default: 10 min.
    pub idle_unload: Duration,
    /// `RootState._meta`. Default: none.
    pub root_meta: Option<JsonObject>,
    /// `InitializeResult._meta`. Default: none.
    pub initialize_meta: Option<JsonObject>,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            paths: Vec::new(),
            server_info: Implementation {
                name: "ahpd-sdk".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
                title: None,
            },
            delta_window: Duration::from_millis(75),
            replay_capacity: 10_000,
            replay_bytes: 16 * 1024 * 1024,
            outbound_queue: 4_096,
            max_frame_bytes: 16 * 1024 * 1024,
            write_timeout: Duration::from_secs(10),
            turns_page: 50,
            list_cap: 1_000,
            active_client_grace: Duration::from_secs(30),
            known_client_ttl: Duration::from_secs(600),
            client_tool_timeout: Duration::from_secs(600),
            request_timeout: Duration::from_secs(60),
            loaded_cap: 64,
            idle_unload: Duration::from_secs(600),
            root_meta: None,
            initialize_meta: None,
        }
    }
}

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
        let hub = Hub::new(self.options.replay_capacity, self.options.replay_bytes);
        let shutdown = CancellationToken::new();
        let store = self
            .session_store
            .map(|port| Remembered::load(port, shutdown.child_token()));
        let inner = Arc::new(HostInner {
            root: Mutex::new(crate::root::initial_root(
                &self.agents,
                &HashMap::new(),
                self.options.root_meta.clone(),
            )),
            hub,
            agents: RwLock::new(self.agents),
            probes: Mutex::new(HashMap::new()),
            registry: Mutex::new(Registry::default()),
            extensions: self.extensions,
            resources: self.resources,
            providers: self.providers,
            known: Mutex::new(HashMap::new()),
            credentials: Arc::new(Mutex::new(HashMap::new())),
            next_conn: AtomicU64::new(1),
            shutdown,
            store,
            options: self.options,
        });
        let handle = HostHandle { inner };
        for ext in &handle.inner.extensions {
            ext.attach(handle.clone());
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            crate::root::probe_agents(&handle.inner);
            if handle.inner.store.is_some() {
                tokio::spawn(crate::remember::prune(handle.inner.clone()));
            }
            tokio::spawn(crate::unload::run(Arc::downgrade(&handle.inner)));
        }
        Ok(Host { handle })
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

/// A client id the host has seen, for `reconnect`.
pub(crate) struct KnownClient {
    pub version: String,
    pub conns: HashMap<u64, Arc<crate::hub::KillSwitch>>,
    pub gone_since: Option<Instant>,
}

pub(crate) struct HostInner {
    pub options: HostOptions,
    pub hub: Hub,
    pub agents: RwLock<Vec<Arc<dyn Agent>>>,
    pub probes: Mutex<HashMap<String, Probe>>,
    pub root: Mutex<ahp_types::state::RootState>,
    pub registry: Mutex<Registry>,
    pub extensions: Vec<Arc<dyn Extension>>,
    pub resources: Option<Arc<dyn Resources>>,
    pub providers: Vec<(String, Arc<dyn ResourceProvider>)>,
    pub known: Mutex<HashMap<String, KnownClient>>,
    pub credentials: Arc<Mutex<HashMap<String, HashMap<String, Secret>>>>,
    pub next_conn: AtomicU64,
    pub shutdown: CancellationToken,
    pub store: Option<Arc<Remembered>>,
}

impl Drop for HostInner {
    fn drop(&mut self) {
        // The store's writer saves what is pending and ends.
        if let Some(store) = &self.store {
            store.stop();
        }
    }
}

impl HostInner {
    pub(crate) fn agents(&self) -> Vec<Arc<dyn Agent>> {
        self.agents.read().map(|a| a.clone()).unwrap_or_default()
    }

    pub(crate) fn agent(&self, provider: Option<&str>) -> Option<Arc<dyn Agent>> {
        let agents = self.agents();
        match provider {
            None => agents.first().cloned(),
            Some(p) => agents.into_iter().find(|a| a.descriptor().provider == p),
        }
    }

    pub(crate) fn extension_for_scheme(&self, channel: &str) -> Option<Arc<dyn Extension>> {
        let scheme = channel.split(':').next()?;
        self.extensions
            .iter()
            .find(|e| e.schemes().iter().any(|s| s == scheme))
            .cloned()
    }

    pub(crate) fn extension_for_method(&self, method: &str) -> Option<Arc<dyn Extension>> {
        self.extensions
            .iter()
            .find(|e| e.methods().iter().any(|m| m == method))
            .cloned()
    }

    pub(crate) fn next_conn_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }
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

/// A cheap, cloneable handle to a host, for extensions and embedders.
#[derive(Clone)]
pub struct HostHandle {
    pub(crate) inner: Arc<HostInner>,
}

impl std::fmt::Debug for HostHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostHandle").finish_non_exhaustive()
    }
}

impl HostHandle {
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
        crate::root::publish_agents(&self.inner);
        if tokio::runtime::Handle::try_current().is_ok() {
            crate::root::probe_agents(&self.inner);
        }
        Ok(())
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
        crate::session::snapshot_of(&self.inner, uri).await
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
