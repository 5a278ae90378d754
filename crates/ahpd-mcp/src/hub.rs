//! Every server the daemon runs. Entries that are equal share one server, so two sessions (or
//! two agents) naming the same server use one process; an agent's entry that differs from the
//! daemon's under the same name is a server of its own.

use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::SecretResolver;
use crate::server::{Server, Status};
use crate::spec::{ServerSpec, Servers};

/// The daemon's servers.
#[derive(Clone)]
pub struct McpHub {
    inner: Arc<Inner>,
}

struct Inner {
    configured: Servers,
    secrets: SecretResolver,
    servers: Mutex<Vec<Arc<Server>>>,
    shutdown: CancellationToken,
    changed: Arc<watch::Sender<u64>>,
}

/// One server's line in a report (`ahpd mcp list`): nothing secret.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerReport {
    /// Its name.
    pub name: String,
    /// `stdio`, `http`, `sse` or `invalid`.
    pub kind: String,
    /// `starting`, `ready`, `failed` or `stopped`.
    pub status: String,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How many tools it offers now.
    pub tools: usize,
    /// How many times it was started again after failing.
    pub restarts: u32,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpHub")
            .field(
                "configured",
                &self.inner.configured.keys().collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl McpHub {
    /// A hub for the daemon's own entries (`mcpServers` of its configuration file), reading
    /// `$secret` references through `secrets` each time a server starts. Nothing starts yet.
    pub fn new(configured: Servers, secrets: SecretResolver) -> McpHub {
        McpHub {
            inner: Arc::new(Inner {
                configured,
                secrets,
                servers: Mutex::new(Vec::new()),
                shutdown: CancellationToken::new(),
                changed: Arc::new(watch::Sender::new(0)),
            }),
        }
    }

    /// The daemon's own entries.
    pub fn configured(&self) -> &Servers {
        &self.inner.configured
    }

    /// The server for this entry: the running one of an equal entry, else a new one (which
    /// starts once it is leased, or at once when the entry is `eager`).
    pub fn server(&self, name: &str, spec: &ServerSpec) -> Arc<Server> {
        let mut servers = self.inner.servers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = servers.iter().find(|s| s.name == name && &s.spec == spec) {
            return s.clone();
        }
        let server = Server::spawn(
            name,
            spec,
            self.inner.secrets.clone(),
            self.inner.shutdown.child_token(),
            self.inner.changed.clone(),
        );
        servers.push(server.clone());
        server
    }

    /// Creates the servers of the daemon's `eager` entries, which start at once.
    pub fn start_eager(&self) {
        for (name, spec) in &self.inner.configured {
            if spec.eager && spec.enabled {
                self.server(name, spec);
            }
        }
    }

    /// Every server created so far, with its state.
    pub fn report(&self) -> Vec<ServerReport> {
        let servers = self
            .inner
            .servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        servers
            .iter()
            .map(|s| {
                let state = s.state();
                ServerReport {
                    name: s.name.clone(),
                    kind: s.spec.kind().to_owned(),
                    status: state.status.word().to_owned(),
                    error: match state.status {
                        Status::Failed(why) => Some(why),
                        _ => None,
                    },
                    tools: state.tools.len(),
                    restarts: state.restarts,
                }
            })
            .collect()
    }

    /// Changes whenever any server's state changes.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changed.subscribe()
    }

    /// Stops every server and waits until each has ended its process tree.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        let servers = self
            .inner
            .servers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for server in servers {
            let mut state = server.watch();
            let _ = state
                .wait_for(|s| matches!(s.status, Status::Stopped))
                .await;
        }
    }
}
