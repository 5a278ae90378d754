//! The handshake: `initialize` and `reconnect`, which name the client, settle the protocol
//! version and register the first subscriptions. It runs as its own task while the
//! connection goes on reading (a `ping` is answered meanwhile; other frames wait for it).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use ahp_types::commands::*;
use serde_json::{Value, json};

use crate::channels::hub::Replay;
use crate::channels::root::ROOT;
use crate::connection::{Conn, Phase, decode, reply_frame};
use crate::error::{RpcError, codes};
use crate::inner::KnownClient;
use crate::inner::mailbox;
use crate::session::SessionMsg;

/// Forget clients gone longer than `known_client_ttl`, and the tokens they pushed with
/// `authenticate`, so both tables stay as large as the clients of the last while. Runs at
/// every handshake: only handshakes add to them.
pub(crate) fn expire_clients(inner: &crate::inner::HostInner) {
    let ttl = inner.options.known_client_ttl;
    let kept: HashSet<String> = {
        let mut known = inner.known.lock().unwrap_or_else(|p| p.into_inner());
        known.retain(|_, k| k.gone_since.is_none_or(|t| t.elapsed() < ttl));
        known.keys().cloned().collect()
    };
    if let Ok(mut creds) = inner.credentials.lock() {
        creds.retain(|client, _| kept.contains(client));
    }
}

impl Conn {
    pub(crate) fn register_client(&mut self, client_id: &str, version: &str) {
        expire_clients(&self.inner);
        self.client_id = client_id.to_owned();
        self.version = version.to_owned();
        self.phase = Phase::Ready;
        self.inner
            .hub
            .set_legacy(self.id, version.starts_with("0."));
        let mut known = self.inner.known.lock().unwrap_or_else(|p| p.into_inner());
        let entry = known
            .entry(client_id.to_owned())
            .or_insert_with(|| KnownClient {
                version: version.to_owned(),
                conns: Default::default(),
                gone_since: None,
            });
        entry.version = version.to_owned();
        entry.gone_since = None;
        entry.conns.insert(self.id, self.kill.clone());
    }

    pub(crate) async fn initialize(&mut self, id: Value, params: Value) {
        let p: InitializeParams = match decode("initialize", params) {
            Ok(p) => p,
            Err(e) => return self.send(reply_frame(&id, Err(e))),
        };
        if p.client_id.is_empty() {
            return self.send(reply_frame(
                &id,
                Err(RpcError::invalid_params("clientId must not be empty")),
            ));
        }
        let version = match ahp_types::negotiate_protocol_version(&p.protocol_versions) {
            Err(msg) => return self.send(reply_frame(&id, Err(RpcError::invalid_params(msg)))),
            Ok(None) => {
                let err = RpcError::new(
                    codes::UNSUPPORTED_PROTOCOL_VERSION,
                    "none of the offered protocol versions is supported",
                )
                .with_data(json!({"supportedVersions": ahp_types::SUPPORTED_PROTOCOL_VERSIONS}));
                self.send(reply_frame(&id, Err(err)));
                self.kill.kill(1002, "unsupported protocol version");
                return;
            }
            Ok(Some(v)) => v.to_owned(),
        };
        self.register_client(&p.client_id, &version);
        let channels = p.initial_subscriptions.unwrap_or_default();
        // Stored sessions are opened before envelopes are held back: opening may take long.
        for ch in &channels {
            let _ = self.open_for(ch).await;
        }
        self.inner.hub.hold(self.id);
        let mut snapshots = Vec::new();
        for ch in channels {
            if let Ok(s) = self.subscribe_channel(&ch).await {
                snapshots.push(s);
            }
        }
        let o = &self.inner.options;
        let completions = self
            .inner
            .agents()
            .iter()
            .any(|a| a.descriptor().completions);
        let mut result = json!({
            "protocolVersion": version,
            "serverSeq": self.inner.hub.current_seq(),
            "serverInfo": o.server_info,
            "snapshots": snapshots,
        });
        if let Some(dir) = o.paths.first() {
            result["defaultDirectory"] = Value::from(crate::util::file_uri(dir));
        }
        if completions {
            result["completionTriggerCharacters"] = json!(["/"]);
        }
        if let Some(meta) = &o.initialize_meta {
            result["_meta"] = Value::Object(meta.clone());
        }
        self.inner
            .hub
            .release(self.id, reply_frame(&id, Ok(result)));
    }

    /// `reconnect`: replay or snapshots for every listed channel at once, the missing ones named.
    pub(crate) async fn reconnect(&mut self, id: Value, params: Value) {
        let p: ReconnectParams = match decode("reconnect", params) {
            Ok(p) => p,
            Err(e) => return self.send(reply_frame(&id, Err(e))),
        };
        expire_clients(&self.inner);
        let known_version = {
            let known = self.inner.known.lock().unwrap_or_else(|p| p.into_inner());
            known.get(&p.client_id).map(|k| {
                for (_, kill) in k.conns.iter() {
                    kill.kill(1000, "superseded by reconnect");
                }
                k.version.clone()
            })
        };
        let version = known_version.clone().unwrap_or_else(|| "1.0.0".to_owned());
        self.register_client(&p.client_id, &version);
        let reopened = self.reopen(&p.subscriptions).await;
        self.inner.hub.hold(self.id);
        let mut existing = Vec::new();
        let mut missing = Vec::new();
        for ch in &p.subscriptions {
            if self.channel_exists(ch) {
                existing.push(ch.as_str())
            } else {
                missing.push(ch.clone())
            }
        }
        let set: HashSet<&str> = existing.iter().copied().collect();
        let last_seen = u64::try_from(p.last_seen_server_seq).unwrap_or(u64::MAX);
        // A session read back from the store is rebuilt (a new page cursor, say), so what the
        // client holds of it cannot be brought up to date by envelopes: snapshots instead.
        let replay = match known_version {
            Some(_) if !reopened => self.inner.hub.replay_and_subscribe(
                self.id,
                last_seen,
                &set,
                version.starts_with("0."),
            ),
            _ => Replay::TooOld,
        };
        let result = match replay {
            Replay::Actions(actions) => {
                let actions: Vec<Value> = actions
                    .iter()
                    .filter_map(|a| serde_json::from_str(a).ok())
                    .collect();
                json!({"type": "replay", "actions": actions, "missing": missing})
            }
            Replay::TooOld => {
                let mut snapshots = Vec::new();
                for ch in existing {
                    if let Ok(s) = self.subscribe_channel(ch).await {
                        snapshots.push(s);
                    }
                }
                json!({"type": "snapshot", "snapshots": snapshots})
            }
        };
        self.inner
            .hub
            .release(self.id, reply_frame(&id, Ok(result)));
        self.leave_unlisted(&p.subscriptions).await;
    }

    /// Opens the listed sessions that are stored but not open (the host restarted, or they were
    /// unloaded), so they come back instead of being reported gone; `true` when one was.
    async fn reopen(&self, subscriptions: &[String]) -> bool {
        let mut reopened = false;
        for ch in subscriptions {
            let live = mailbox(&self.inner, ch).is_some();
            match self.open_for(ch).await {
                Ok(()) => reopened |= !live && mailbox(&self.inner, ch).is_some(),
                Err(e) => {
                    tracing::debug!(channel = %ch, error = %e.message, "a reconnecting client's channel could not be opened")
                }
            }
        }
        reopened
    }

    /// Whether a channel a reconnecting client lists is still there.
    fn channel_exists(&self, ch: &str) -> bool {
        ch == ROOT
            || (ch.starts_with("x-")
                && self
                    .inner
                    .extension_for_scheme(ch)
                    .is_some_and(|e| e.snapshot(ch).is_some()))
            || mailbox(&self.inner, ch).is_some()
    }

    /// The sessions the client was active in but no longer lists lose it.
    async fn leave_unlisted(&self, subscriptions: &[String]) {
        let listed: HashSet<&str> = subscriptions.iter().map(String::as_str).collect();
        let others: Vec<_> = self
            .inner
            .registry
            .lock()
            .map(|r| {
                r.sessions
                    .iter()
                    .filter(|(uri, _)| !listed.contains(uri.as_str()))
                    .map(|(_, e)| e.tx.clone())
                    .collect()
            })
            .unwrap_or_default();
        for tx in others {
            let _ = tx
                .send(SessionMsg::Unsubscribed {
                    client_id: self.client_id.clone(),
                })
                .await;
        }
    }

    /// Forget the connection; after the grace period a client with no connection left is
    /// removed from every session's `activeClients`.
    pub(crate) fn finish(&mut self) {
        self.inner.hub.remove_conn(self.id);
        if self.client_id.is_empty() {
            // A handshake cut short may have registered the client in its own copy.
            if let Ok(mut known) = self.inner.known.lock() {
                for (client, k) in known.iter_mut() {
                    if k.conns.remove(&self.id).is_some() && k.conns.is_empty() {
                        k.gone_since = Some(Instant::now());
                        self.client_id = client.clone();
                    }
                }
            }
            if self.client_id.is_empty() {
                return;
            }
            return self.forget_later();
        }
        let last = {
            let mut known = self.inner.known.lock().unwrap_or_else(|p| p.into_inner());
            match known.get_mut(&self.client_id) {
                Some(k) => {
                    k.conns.remove(&self.id);
                    if k.conns.is_empty() {
                        k.gone_since = Some(Instant::now());
                        true
                    } else {
                        false
                    }
                }
                None => false,
            }
        };
        if last {
            self.forget_later();
        }
    }

    /// After the grace period, remove a client with no connection left from every session's
    /// `activeClients`.
    fn forget_later(&self) {
        let inner = Arc::downgrade(&self.inner);
        let client = self.client_id.clone();
        let grace = self.inner.options.active_client_grace;
        tokio::spawn(async move {
            tokio::time::sleep(grace).await;
            let Some(inner) = inner.upgrade() else { return };
            let back = inner
                .known
                .lock()
                .map(|k| k.get(&client).is_some_and(|c| !c.conns.is_empty()))
                .unwrap_or(true);
            if back {
                return;
            }
            let txs: Vec<_> = inner
                .registry
                .lock()
                .map(|r| r.sessions.values().map(|e| e.tx.clone()).collect())
                .unwrap_or_default();
            for tx in txs {
                let _ = tx
                    .send(SessionMsg::ClientGone {
                        client_id: client.clone(),
                    })
                    .await;
            }
        });
    }
}
