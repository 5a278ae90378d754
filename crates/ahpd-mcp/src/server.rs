//! One server's life: a supervising task that starts it while something wants it, keeps its
//! tool list current, notices when it exits or its connection breaks, restarts it with
//! backoff, and stops its whole process tree.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::service::{Peer, RoleClient};
use serde_json::Value;
use tokio::sync::{Notify, broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::SecretResolver;
use crate::connect::{Connected, Unreached, connect};
use crate::spec::{ServerSpec, ToolFilter};

/// Where a server is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// Being started: process or connection, handshake, tool list.
    Starting,
    /// Answering; its tools are known.
    Ready,
    /// It could not start, or it exited; the sentence says why. A restart follows after a
    /// backoff while something still wants it.
    Failed(String),
    /// Not running because nothing wants it (or the daemon stopped).
    Stopped,
}

impl Status {
    /// `starting`, `ready`, `failed` or `stopped`.
    pub fn word(&self) -> &'static str {
        match self {
            Status::Starting => "starting",
            Status::Ready => "ready",
            Status::Failed(_) => "failed",
            Status::Stopped => "stopped",
        }
    }
}

/// One tool a server offers, as it described it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    /// Its name on the server.
    pub name: String,
    /// The name shown to people, if it gave one.
    pub title: Option<String>,
    /// What it does, for the model.
    pub description: Option<String>,
    /// The JSON Schema of its arguments.
    pub input_schema: Value,
    /// Annotated `readOnlyHint`: it changes nothing.
    pub read_only: bool,
    /// Annotated `destructiveHint` (true unless the server says otherwise, as the protocol
    /// sets the default).
    pub destructive: bool,
    /// Annotated `openWorldHint`: it reaches beyond the machine (true unless said otherwise).
    pub open_world: bool,
}

/// A server's state and its tools.
#[derive(Debug, Clone)]
pub struct ServerState {
    /// Where it is in its life.
    pub status: Status,
    /// Its tools while it is ready (empty otherwise).
    pub tools: Arc<Vec<McpTool>>,
    /// How many times it has been started again after failing.
    pub restarts: u32,
}

/// One configured server as the daemon runs it.
pub struct Server {
    pub(crate) name: String,
    pub(crate) spec: ServerSpec,
    secrets: SecretResolver,
    state: watch::Sender<ServerState>,
    /// Every status in order, for those who must not miss a short-lived one.
    statuses: broadcast::Sender<Status>,
    users: watch::Sender<usize>,
    kick: Notify,
    broken: Notify,
    pub(crate) peer: Mutex<Option<Peer<RoleClient>>>,
    pub(crate) shutdown: CancellationToken,
    hub_changed: Arc<watch::Sender<u64>>,
}

/// A use of a server: while any lease is held the server is kept running. Dropping the last
/// one stops it (unless it is `eager`).
pub struct Lease {
    server: Arc<Server>,
}

impl Lease {
    /// The server leased.
    pub fn server(&self) -> &Arc<Server> {
        &self.server
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.server.users.send_modify(|n| *n = n.saturating_sub(1));
    }
}

enum Ended {
    Unwanted,
    Shutdown,
    Crashed(String, Duration),
}

/// The first wait before a restart; doubled after each failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A server that ran this long before exiting starts its backoff over.
const STEADY: Duration = Duration::from_secs(60);

fn backoff(failures: u32) -> Duration {
    let factor = 1u32 << failures.saturating_sub(1).min(7);
    (FIRST_BACKOFF * factor).min(MAX_BACKOFF)
}

impl Server {
    pub(crate) fn spawn(
        name: &str,
        spec: &ServerSpec,
        secrets: SecretResolver,
        shutdown: CancellationToken,
        hub_changed: Arc<watch::Sender<u64>>,
    ) -> Arc<Server> {
        let server = Arc::new(Server {
            name: name.to_owned(),
            spec: spec.clone(),
            secrets,
            state: watch::Sender::new(ServerState {
                status: Status::Stopped,
                tools: Arc::default(),
                restarts: 0,
            }),
            statuses: broadcast::Sender::new(64),
            users: watch::Sender::new(0),
            kick: Notify::new(),
            broken: Notify::new(),
            peer: Mutex::new(None),
            shutdown,
            hub_changed,
        });
        tokio::spawn(server.clone().supervise());
        server
    }

    /// The name the configuration gives it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its configuration entry.
    pub fn spec(&self) -> &ServerSpec {
        &self.spec
    }

    /// Keeps the server running until the lease is dropped; starts it if it is not.
    pub fn lease(self: &Arc<Self>) -> Lease {
        self.users.send_modify(|n| *n += 1);
        Lease {
            server: self.clone(),
        }
    }

    /// Its state now.
    pub fn state(&self) -> ServerState {
        self.state.borrow().clone()
    }

    /// Its state as it changes.
    pub fn watch(&self) -> watch::Receiver<ServerState> {
        self.state.subscribe()
    }

    /// Every status from now on, in order (a receiver that falls 64 behind is told it lagged).
    pub fn statuses(&self) -> broadcast::Receiver<Status> {
        self.statuses.subscribe()
    }

    /// Starts it again now rather than after the backoff (a person asked).
    pub fn retry(&self) {
        self.kick.notify_one();
    }

    /// A call found the connection broken: the server is treated as exited.
    pub(crate) fn connection_broken(&self) {
        self.broken.notify_one();
    }

    fn wanted(&self) -> bool {
        !self.shutdown.is_cancelled() && (self.spec.eager || *self.users.borrow() > 0)
    }

    fn set(&self, status: Status, tools: Arc<Vec<McpTool>>, restarted: bool) {
        if let Status::Failed(why) = &status {
            tracing::warn!(server = %self.name, "MCP server failed: {why}");
        } else {
            tracing::info!(server = %self.name, status = status.word(), tools = tools.len(), "MCP server");
        }
        let _ = self.statuses.send(status.clone());
        self.state.send_modify(|s| {
            s.status = status;
            s.tools = tools;
            if restarted {
                s.restarts += 1;
            }
        });
        self.hub_changed.send_modify(|n| *n += 1);
    }

    async fn until_wanted(&self) -> bool {
        let mut users = self.users.subscribe();
        loop {
            if self.shutdown.is_cancelled() {
                return false;
            }
            if self.wanted() {
                return true;
            }
            tokio::select! {
                r = users.changed() => if r.is_err() { return false },
                () = self.shutdown.cancelled() => return false,
            }
        }
    }

    async fn until_unwanted(&self) {
        let mut users = self.users.subscribe();
        while self.wanted() {
            tokio::select! {
                r = users.changed() => if r.is_err() { return },
                () = self.shutdown.cancelled() => return,
            }
        }
    }

    async fn supervise(self: Arc<Self>) {
        let mut failures = 0u32;
        loop {
            if !self.until_wanted().await {
                self.set(Status::Stopped, Arc::default(), false);
                return;
            }
            self.set(Status::Starting, Arc::default(), failures > 0);
            let connected = tokio::select! {
                c = connect(&self.name, &self.spec, &self.secrets) => c,
                () = self.until_unwanted() => continue,
            };
            let why = match connected {
                Err(Unreached { why, lasting: true }) => {
                    // Nothing changes by trying again: it waits for a person's retry.
                    self.set(Status::Failed(why), Arc::default(), false);
                    tokio::select! {
                        () = self.kick.notified() => {}
                        () = self.until_unwanted() => self.set(Status::Stopped, Arc::default(), false),
                    }
                    continue;
                }
                Err(Unreached { why, .. }) => why,
                Ok(conn) => match self.run(conn).await {
                    Ended::Unwanted => {
                        failures = 0;
                        self.set(Status::Stopped, Arc::default(), false);
                        continue;
                    }
                    Ended::Shutdown => {
                        self.set(Status::Stopped, Arc::default(), false);
                        return;
                    }
                    Ended::Crashed(why, ran) => {
                        if ran >= STEADY {
                            failures = 0;
                        }
                        why
                    }
                },
            };
            failures += 1;
            self.set(Status::Failed(why), Arc::default(), false);
            tokio::select! {
                () = tokio::time::sleep(backoff(failures)) => {}
                () = self.kick.notified() => failures = 0,
                () = self.until_unwanted() => self.set(Status::Stopped, Arc::default(), false),
            }
        }
    }

    /// Serves a connected server until it ends; its process tree is gone when this returns.
    async fn run(&self, conn: Connected) -> Ended {
        let started = Instant::now();
        let Connected {
            service,
            mut tools_changed,
            group,
            stderr,
        } = conn;
        let peer = service.peer().clone();
        let stop = service.cancellation_token();
        let (done_tx, mut done) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let _ = done_tx.send(service.waiting().await);
        });
        let end = |ended: Ended| {
            *self.peer.lock().unwrap_or_else(|p| p.into_inner()) = None;
            if let Some(pid) = group {
                crate::tree::kill_group(pid);
            }
            ended
        };
        match list_tools(&peer, &self.spec.tools).await {
            Ok(tools) => {
                *self.peer.lock().unwrap_or_else(|p| p.into_inner()) = Some(peer.clone());
                self.set(Status::Ready, Arc::new(tools), false);
            }
            Err(why) => {
                stop.cancel();
                let _ = done.await;
                return end(Ended::Crashed(why, started.elapsed()));
            }
        }
        loop {
            tokio::select! {
                _ = &mut done => {
                    let mut why = "the server exited".to_owned();
                    if let Some(last) = stderr.lock().ok().and_then(|t| t.back().cloned()) {
                        why.push_str(&format!(" (its last words: {last})"));
                    }
                    return end(Ended::Crashed(why, started.elapsed()));
                }
                () = self.broken.notified() => {
                    stop.cancel();
                    let _ = done.await;
                    return end(Ended::Crashed("the connection to the server broke".into(), started.elapsed()));
                }
                Some(()) = tools_changed.recv() => match list_tools(&peer, &self.spec.tools).await {
                    Ok(tools) => self.set(Status::Ready, Arc::new(tools), false),
                    Err(why) => tracing::warn!(server = %self.name, "{why}"),
                },
                () = self.until_unwanted() => {
                    stop.cancel();
                    let _ = done.await;
                    let ended = if self.shutdown.is_cancelled() { Ended::Shutdown } else { Ended::Unwanted };
                    return end(ended);
                }
            }
        }
    }
}

/// The server's tools that its entry offers.
async fn list_tools(peer: &Peer<RoleClient>, offered: &ToolFilter) -> Result<Vec<McpTool>, String> {
    let tools = peer
        .list_all_tools()
        .await
        .map_err(|e| format!("the server did not list its tools: {e}"))?;
    Ok(tools
        .into_iter()
        .filter(|t| offered.offers(&t.name))
        .map(|t| {
            let hints = t.annotations.as_ref();
            McpTool {
                name: t.name.to_string(),
                title: t
                    .title
                    .clone()
                    .or_else(|| hints.and_then(|a| a.title.clone())),
                description: t.description.as_ref().map(|d| d.to_string()),
                input_schema: Value::Object((*t.input_schema).clone()),
                read_only: hints.and_then(|a| a.read_only_hint).unwrap_or(false),
                destructive: hints.and_then(|a| a.destructive_hint).unwrap_or(true),
                open_world: hints.and_then(|a| a.open_world_hint).unwrap_or(true),
            }
        })
        .collect())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_a_ceiling() {
        assert_eq!(backoff(1), FIRST_BACKOFF);
        assert_eq!(backoff(2), FIRST_BACKOFF * 2);
        assert_eq!(backoff(40), MAX_BACKOFF);
    }
}
