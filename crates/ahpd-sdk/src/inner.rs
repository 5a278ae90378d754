//! The host's shared state, the handle onto it that extensions and embedders hold, and the
//! extension port, whose `attach` takes that handle (so the three live together). The
//! behaviour on the handle is in [`crate::host`]; the session registry's lookups are here
//! because everything that routes to a session starts from this state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use ahp_types::state::Snapshot;
use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, Probe, Secret};
use crate::channels::hub::Hub;
use crate::error::RpcError;
use crate::options::HostOptions;
use crate::resources::port::{ResourceProvider, Resources};
use crate::session::{Registry, SessionMsg};
use crate::store::remember::Remembered;

/// Who sent a request, as an extension sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnInfo {
    /// The connection's client id (empty before `initialize`).
    pub client_id: String,
    /// A number unique to this connection within the host process.
    pub connection_id: u64,
    /// The negotiated protocol version.
    pub protocol_version: String,
}

/// Extension channels (`x-<name>://…`) and commands (`x-…` methods) served beside the protocol.
///
/// The extension owns its state. It publishes changes with [`HostHandle::publish_extension`],
/// which numbers them with the host's `serverSeq`, fans them out to subscribers and keeps them
/// for replay; it should publish actions a client can apply twice without harm, since a
/// snapshot taken between a state change and its publication already shows the change.
#[async_trait]
pub trait Extension: Send + Sync + 'static {
    /// URI schemes served, each starting with `x-` (e.g. `x-ahpd-agents`).
    fn schemes(&self) -> Vec<String>;

    /// Methods served, each starting with `x-` (e.g. `x-ahpd/agents/put`).
    fn methods(&self) -> Vec<String>;

    /// Called once when the host is built, with the handle to publish through.
    fn attach(&self, _host: HostHandle) {}

    /// Answer one of [`Extension::methods`].
    async fn call(&self, method: &str, params: Value, conn: &ConnInfo) -> Result<Value, RpcError>;

    /// The state of a channel of one of the schemes, or `None` when it does not exist.
    fn snapshot(&self, channel: &str) -> Option<Value>;
}

/// A client id the host has seen, for `reconnect`.
pub(crate) struct KnownClient {
    pub version: String,
    pub conns: HashMap<u64, Arc<crate::channels::hub::KillSwitch>>,
    pub gone_since: Option<Instant>,
}

pub(crate) struct HostInner {
    pub options: HostOptions,
    pub hub: Hub,
    pub agents: RwLock<Vec<Arc<dyn Agent>>>,
    pub probes: Mutex<HashMap<String, Probe>>,
    /// How many agents' model probes are still out; [`crate::HostHandle::probed`] waits for 0.
    pub probing: tokio::sync::watch::Sender<usize>,
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
    /// How many turns have ended in this host (see [`crate::HostHandle::turn_ends`]).
    pub turns_ended: tokio::sync::watch::Sender<u64>,
    /// Every connection's in-flight figures (see [`crate::HostHandle::connection_stats`]).
    pub budget_marks: crate::connection::budget::Marks,
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

/// The mailbox of the session serving `channel` (a session or chat URI), if it is open.
pub(crate) fn mailbox(inner: &HostInner, channel: &str) -> Option<mpsc::Sender<SessionMsg>> {
    let reg = inner.registry.lock().ok()?;
    reg.session_for(channel).map(|(_, e)| {
        e.touch();
        e.tx.clone()
    })
}

/// A snapshot of a session or chat channel, opening nothing.
pub(crate) async fn snapshot_of(inner: &Arc<HostInner>, uri: &str) -> Option<Snapshot> {
    let tx = mailbox(inner, uri)?;
    let (reply, rx) = oneshot::channel();
    tx.send(SessionMsg::Snapshot {
        channel: uri.to_owned(),
        reply,
    })
    .await
    .ok()?;
    rx.await.ok().flatten()
}
