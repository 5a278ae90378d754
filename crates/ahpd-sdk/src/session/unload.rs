//! Unloading sessions nobody uses, so a host that runs for months holds only what its clients
//! look at. A session is unloaded once no connection subscribes to it or its chats, no client
//! is active in it and nothing runs in it, when more than `loaded_cap` such sessions are open
//! (least recently used first) or when it has not been used for `idle_unload`. Sessions
//! opened from the store and failed ones qualify as they are; one created in this run only
//! once the agent's store has its conversation. It stays in the catalogue, and a later
//! `subscribe` or `reconnect` opens it again from the store.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::inner::HostInner;
use crate::session::actor::{Actor, Backend};
use crate::session::{SessionMsg, backend_id_of};

impl Actor {
    /// Whether the session can go: nobody subscribed, no turn, question, held dispatch or
    /// backend opening.
    pub(crate) fn unloadable(&self) -> bool {
        let busy = self.start_reply.is_some()
            || !self.asks.is_empty()
            || !self.parked.is_empty()
            || !self.state.active_clients.is_empty()
            || self.chats.values().any(|c| {
                c.state.active_turn.is_some() || matches!(c.backend, Backend::Creating(_))
            });
        if busy {
            return false;
        }
        let hub = &self.inner.hub;
        !hub.has_subscribers(&self.uri) && !self.chats.keys().any(|c| hub.has_subscribers(c))
    }

    /// Leave the registry and close the backends when [`Actor::unloadable`]; `true` ends the
    /// task. Done inside the task so nothing changes between the check and the removal.
    pub(crate) async fn unload(&mut self) -> bool {
        let count = {
            let mut reg = self
                .inner
                .registry
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if !self.unloadable() {
                return false;
            }
            reg.sessions.remove(&*self.uri);
            reg.chats.retain(|_, s| s.as_str() != &*self.uri);
            reg.live_count()
        };
        self.dispose().await;
        crate::channels::root::publish_active_sessions(&self.inner, count);
        tracing::info!(session = %self.uri, "session unloaded");
        true
    }
}

/// Ask the session at `uri` to unload; `true` when it did.
async fn ask(inner: &HostInner, uri: &str) -> bool {
    let tx = match inner.registry.lock() {
        Ok(reg) => reg.sessions.get(uri).map(|e| e.tx.clone()),
        Err(_) => None,
    };
    let Some(tx) = tx else { return false };
    let (reply, rx) = oneshot::channel();
    // A session whose mailbox is full or whose task is stuck is passed over, so one session
    // can never stop every later sweep.
    let asked =
        async { tx.send(SessionMsg::Unload { reply }).await.is_ok() && rx.await.unwrap_or(false) };
    tokio::time::timeout(ASK_LIMIT, asked)
        .await
        .unwrap_or(false)
}

/// How long a sweep waits on one session's answer.
const ASK_LIMIT: Duration = Duration::from_secs(1);

/// Sessions that may be unloaded, least recently used first: opened from the store or
/// failed (`true`), or created in this run and ready (`false`: unloaded only once the agent's
/// store has their conversation, so they can come back).
fn candidates(inner: &HostInner) -> Vec<(String, Instant, bool)> {
    let Ok(reg) = inner.registry.lock() else {
        return Vec::new();
    };
    // A session someone watches is not a candidate: counting it would push idle ones past the
    // cap early (its chats' subscribers are checked by the session itself).
    let mut out: Vec<(String, Instant, bool)> = reg
        .sessions
        .iter()
        .filter(|(uri, e)| (e.unloadable || e.summary.is_some()) && !inner.hub.has_subscribers(uri))
        .map(|(uri, e)| (uri.clone(), e.used_at(), e.unloadable))
        .collect();
    out.sort_by_key(|(_, t, _)| *t);
    out
}

/// Unload the least recently used unloadable sessions past the cap, and any idle too long.
pub(crate) async fn sweep(inner: &Arc<HostInner>) {
    let cap = inner.options.loaded_cap;
    let idle = inner.options.idle_unload;
    let list = candidates(inner);
    let mut over = list.len().saturating_sub(cap);
    for (uri, used, stored) in list {
        if over == 0 && used.elapsed() < idle {
            continue;
        }
        if !stored {
            if !reopenable(inner, &uri).await {
                continue;
            }
            // Asked once: the store keeps the conversation from now on, so the session
            // qualifies as a stored one and later sweeps skip the store read.
            if let Ok(mut reg) = inner.registry.lock()
                && let Some(entry) = reg.sessions.get_mut(&uri)
            {
                entry.unloadable = true;
            }
        }
        if ask(inner, &uri).await {
            over = over.saturating_sub(1);
        }
    }
}

/// Sweep every quarter of the idle time (at least once a second, at most once a minute) for
/// as long as the host lives.
pub(crate) async fn run(inner: std::sync::Weak<HostInner>) {
    let every = {
        let Some(i) = inner.upgrade() else { return };
        (i.options.idle_unload / 4).clamp(Duration::from_secs(1), Duration::from_secs(60))
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(i) = inner.upgrade() else { return };
        if i.shutdown.is_cancelled() {
            return;
        }
        sweep(&i).await;
    }
}

/// Sweep now without waiting, after a session was opened from the store.
pub(crate) fn soon(inner: &Arc<HostInner>) {
    let inner = inner.clone();
    tokio::spawn(async move { sweep(&inner).await });
}

/// Whether `open::open_past` would find the conversation a session URI names in an agent's store,
/// so a session unloaded now can be opened again.
pub(crate) async fn reopenable(inner: &Arc<HostInner>, uri: &str) -> bool {
    let remembered = inner.store.as_ref().and_then(|s| s.get(uri));
    if remembered.as_ref().is_some_and(|r| r.nested.is_some()) {
        return true;
    }
    let (scheme, id) = match remembered {
        Some(r) => (r.provider, r.backend_id),
        None => (
            uri.split_once(':')
                .map(|(s, _)| s.to_owned())
                .unwrap_or_default(),
            backend_id_of(uri).unwrap_or_default(),
        ),
    };
    if id.is_empty() {
        return false;
    }
    for agent in inner.agents() {
        if (scheme == "ahp-session" || agent.descriptor().provider == scheme)
            && agent.find(&id).await.is_some()
        {
            return true;
        }
    }
    false
}
