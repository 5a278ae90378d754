//! One connection: a reader that decodes frames, keeps the handshake state and routes each
//! message, and a writer that drains the bounded outbound queue onto the peer.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahp_types::commands::*;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

use crate::error::{RpcError, codes};
use crate::host::{HostInner, KnownClient};
use crate::hub::{Frame, KillSwitch, Replay};
use crate::peer::{Inbound, Peer, PeerWriter};
use crate::root::ROOT;
use crate::session::{ConnRef, SessionMsg, mailbox};

/// Commands whose channel is the root literal (lenient when absent, strict when wrong).
const ROOT_COMMANDS: &[&str] = &[
    "reconnect",
    "listSessions",
    "authenticate",
    "resolveSessionConfig",
    "sessionConfigCompletions",
    "resourceRead",
    "resourceWrite",
    "resourceList",
    "resourceCopy",
    "resourceDelete",
    "resourceMove",
    "resourceResolve",
    "resourceMkdir",
    "resourceRequest",
    "createResourceWatch",
    "listAutomationTriggerDefinitions",
];

fn reply_frame(id: &Value, result: Result<Value, RpcError>) -> Frame {
    let v = match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => {
            let mut err = json!({"code": e.code, "message": e.message});
            if let Some(d) = e.data {
                err["data"] = d;
            }
            json!({"jsonrpc": "2.0", "id": id, "error": err})
        }
    };
    Arc::from(v.to_string())
}

pub(crate) fn to_json<T: serde::Serialize>(v: Result<T, RpcError>) -> Result<Value, RpcError> {
    v.and_then(|x| serde_json::to_value(x).map_err(|e| RpcError::internal(e.to_string())))
}

pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    method: &str,
    params: Value,
) -> Result<T, RpcError> {
    serde_json::from_value(params)
        .map_err(|e| RpcError::invalid_params(format!("invalid params for {method}: {e}")))
}

#[derive(PartialEq, Eq)]
enum Phase {
    New,
    Ready,
}

pub(crate) struct Conn {
    pub(crate) inner: Arc<HostInner>,
    pub(crate) id: u64,
    kill: Arc<KillSwitch>,
    phase: Phase,
    pub(crate) client_id: String,
    pub(crate) version: String,
}

pub(crate) async fn run(inner: Arc<HostInner>, peer: Peer) {
    let id = inner.next_conn_id();
    let (tx, rx) = mpsc::channel(inner.options.outbound_queue.max(1));
    let kill = Arc::new(KillSwitch::default());
    inner.hub.add_conn(id, tx, kill.clone());
    let closes_on_oversize = peer.writer.closes_on_oversize();
    tracing::info!(conn = id, peer = %peer.label, "connection opened");
    let writer = tokio::spawn(write_loop(
        peer.writer,
        rx,
        kill.clone(),
        inner.options.write_timeout,
    ));
    let mut reader = peer.reader;
    let mut conn = Conn {
        inner: inner.clone(),
        id,
        kill: kill.clone(),
        phase: Phase::New,
        client_id: String::new(),
        version: String::new(),
    };
    loop {
        tokio::select! {
            _ = kill.token().cancelled() => break,
            _ = inner.shutdown.cancelled() => {
                kill.kill(1001, "the host is shutting down");
                break;
            }
            item = reader.next() => match item {
                None => break,
                Some(Inbound::Oversized) if closes_on_oversize => {
                    kill.kill(1009, "frame too large");
                    break;
                }
                Some(Inbound::Oversized) => conn.send(reply_frame(&Value::Null, Err(RpcError::invalid_request("the message is larger than this host accepts")))),
                Some(Inbound::Frame(text)) => conn.handle(&text).await,
            },
        }
    }
    conn.finish();
    let _ = writer.await;
    tracing::info!(conn = id, "connection closed");
}

async fn write_loop(
    mut writer: Box<dyn PeerWriter>,
    mut rx: mpsc::Receiver<Frame>,
    kill: Arc<KillSwitch>,
    timeout: Duration,
) {
    const CLOSE_GRACE: Duration = Duration::from_secs(1);
    loop {
        tokio::select! {
            biased;
            _ = kill.token().cancelled() => {
                let (code, reason) = kill.reason().unwrap_or((1000, String::new()));
                if code != 1013 {
                    // A protocol close (e.g. after an unsupported version) lets queued replies out first.
                    while let Ok(f) = rx.try_recv() {
                        if tokio::time::timeout(CLOSE_GRACE, writer.send(&f)).await.is_err() {
                            break;
                        }
                    }
                }
                let _ = tokio::time::timeout(CLOSE_GRACE, writer.close(code, &reason)).await;
                return;
            }
            frame = rx.recv() => match frame {
                None => {
                    let _ = tokio::time::timeout(CLOSE_GRACE, writer.close(1000, "")).await;
                    return;
                }
                Some(f) => {
                    tokio::select! {
                        r = tokio::time::timeout(timeout, write_batch(writer.as_mut(), f, &mut rx)) => match r {
                            Ok(Ok(())) => {}
                            Ok(Err(_)) => {
                                kill.kill(1006, "connection lost");
                                return;
                            }
                            Err(_) => kill.kill(1013, "write timeout"),
                        },
                        _ = kill.token().cancelled() => {}
                    }
                }
            }
        }
    }
}

/// Write one frame and whatever else is already queued (up to a bound), then flush once, so
/// a burst costs one flush instead of one per frame.
async fn write_batch(
    writer: &mut dyn PeerWriter,
    first: Frame,
    rx: &mut mpsc::Receiver<Frame>,
) -> Result<(), crate::peer::PeerError> {
    const BATCH: usize = 64;
    writer.feed(&first).await?;
    for _ in 1..BATCH {
        match rx.try_recv() {
            Ok(f) => writer.feed(&f).await?,
            Err(_) => break,
        }
    }
    writer.flush().await
}

impl Conn {
    fn send(&self, frame: Frame) {
        self.inner.hub.send_to(self.id, frame);
    }

    pub(crate) fn conn_ref(&self) -> ConnRef {
        ConnRef {
            id: self.id,
            client_id: self.client_id.clone(),
        }
    }

    async fn handle(&mut self, text: &str) {
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(_) => {
                return self.send(reply_frame(
                    &Value::Null,
                    Err(RpcError::new(
                        codes::PARSE_ERROR,
                        "the message is not valid JSON",
                    )),
                ));
            }
        };
        let Value::Object(mut obj) = value else {
            return self.send(reply_frame(
                &Value::Null,
                Err(RpcError::invalid_request(
                    "a message must be one JSON-RPC object; batches are not supported",
                )),
            ));
        };
        let id = obj.remove("id").filter(|v| !v.is_null());
        if let Some(id) = &id
            && !(id.is_string() || id.is_number())
        {
            return self.send(reply_frame(
                &Value::Null,
                Err(RpcError::invalid_request("id must be a string or a number")),
            ));
        }
        let params = obj.remove("params").unwrap_or(Value::Null);
        match (obj.remove("method"), id) {
            (None, Some(_)) if obj.contains_key("result") || obj.contains_key("error") => {}
            (None, _) => self.send(reply_frame(
                &Value::Null,
                Err(RpcError::invalid_request(
                    "the message has neither a method nor an id",
                )),
            )),
            (Some(Value::String(m)), Some(id)) => self.request(id, &m, params).await,
            (Some(Value::String(m)), None) => self.notification(&m, params).await,
            (Some(_), id) => self.send(reply_frame(
                &id.unwrap_or(Value::Null),
                Err(RpcError::invalid_request("method must be a string")),
            )),
        }
    }

    async fn request(&mut self, id: Value, method: &str, params: Value) {
        if method == "ping" {
            return self.send(reply_frame(&id, Ok(Value::Null)));
        }
        if ROOT_COMMANDS.contains(&method)
            && let Some(ch) = params.get("channel")
            && ch.as_str() != Some(ROOT)
        {
            return self.send(reply_frame(
                &id,
                Err(RpcError::invalid_params(format!(
                    "{method} must be sent on the channel {ROOT}"
                ))),
            ));
        }
        let params = with_root_channel(method, params);
        match (&self.phase, method) {
            (Phase::New, "initialize") => self.initialize(id, params).await,
            (Phase::New, "reconnect") => self.reconnect(id, params).await,
            (Phase::New, _) => self.send(reply_frame(
                &id,
                Err(RpcError::invalid_request(
                    "send initialize or reconnect first",
                )),
            )),
            (Phase::Ready, "initialize" | "reconnect") => self.send(reply_frame(
                &id,
                Err(RpcError::invalid_request(
                    "this connection is already initialized",
                )),
            )),
            (Phase::Ready, "subscribe") => self.subscribe(id, params).await,
            (Phase::Ready, _) => {
                let r = self.command(method, params).await;
                self.send(reply_frame(&id, r));
            }
        }
    }

    async fn notification(&mut self, method: &str, params: Value) {
        if self.phase != Phase::Ready {
            return;
        }
        match method {
            "dispatchAction" => {
                let Some(channel) = params
                    .get("channel")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                else {
                    tracing::debug!("dispatchAction without a channel dropped");
                    return;
                };
                let client_seq = params.get("clientSeq").and_then(Value::as_i64).unwrap_or(0);
                let action = params.get("action").cloned().unwrap_or(Value::Null);
                if channel == ROOT {
                    crate::rootdispatch::dispatch(
                        &self.inner,
                        self.id,
                        &self.client_id,
                        client_seq,
                        action,
                    );
                } else if let Some(tx) = mailbox(&self.inner, &channel) {
                    let _ = tx
                        .send(SessionMsg::Dispatch {
                            conn: self.conn_ref(),
                            channel,
                            client_seq,
                            action,
                        })
                        .await;
                }
            }
            "unsubscribe" => {
                let Some(channel) = params.get("channel").and_then(Value::as_str) else {
                    return;
                };
                let held = self.inner.hub.unsubscribe(self.id, channel);
                if held
                    && let Some(tx) = mailbox(&self.inner, channel)
                    && self
                        .inner
                        .registry
                        .lock()
                        .is_ok_and(|r| r.sessions.contains_key(channel))
                {
                    let _ = tx
                        .send(SessionMsg::Unsubscribed {
                            client_id: self.client_id.clone(),
                        })
                        .await;
                }
            }
            other => tracing::debug!(method = other, "an unknown notification was ignored"),
        }
    }

    /// Register this connection on a channel and return its snapshot as JSON.
    async fn subscribe_channel(&self, channel: &str) -> Result<Value, RpcError> {
        if channel == ROOT {
            let snap = crate::root::subscribe(&self.inner, self.id);
            return serde_json::to_value(snap).map_err(|e| RpcError::internal(e.to_string()));
        }
        if channel.starts_with("x-") {
            let ext = self
                .inner
                .extension_for_scheme(channel)
                .ok_or_else(|| RpcError::session_not_found(channel))?;
            let (_, snap) = self.inner.hub.subscribe_with(self.id, channel, |seq| {
                ext.snapshot(channel)
                    .map(|state| json!({"resource": channel, "state": state, "fromSeq": seq}))
            });
            return match snap {
                Some(v) => Ok(v),
                None => {
                    self.inner.hub.unsubscribe(self.id, channel);
                    Err(RpcError::session_not_found(channel))
                }
            };
        }
        let tx = match mailbox(&self.inner, channel) {
            Some(tx) => tx,
            None => {
                crate::open::open_past(&self.inner, channel).await?;
                mailbox(&self.inner, channel).ok_or_else(|| RpcError::session_not_found(channel))?
            }
        };
        let (reply, rx) = oneshot::channel();
        tx.send(SessionMsg::Subscribe {
            conn: self.id,
            channel: channel.to_owned(),
            reply,
        })
        .await
        .map_err(|_| RpcError::session_not_found(channel))?;
        let snap = rx
            .await
            .map_err(|_| RpcError::session_not_found(channel))??;
        serde_json::to_value(snap).map_err(|e| RpcError::internal(e.to_string()))
    }

    async fn subscribe(&mut self, id: Value, params: Value) {
        let p: SubscribeParams = match decode("subscribe", params) {
            Ok(p) => p,
            Err(e) => return self.send(reply_frame(&id, Err(e))),
        };
        self.inner.hub.hold(self.id);
        let result = self
            .subscribe_channel(&p.channel)
            .await
            .map(|snap| json!({"snapshot": snap}));
        self.inner.hub.release(self.id, reply_frame(&id, result));
    }

    fn register_client(&mut self, client_id: &str, version: &str) {
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

    async fn initialize(&mut self, id: Value, params: Value) {
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
        self.inner.hub.hold(self.id);
        let mut snapshots = Vec::new();
        for ch in p.initial_subscriptions.unwrap_or_default() {
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

    async fn reconnect(&mut self, id: Value, params: Value) {
        let p: ReconnectParams = match decode("reconnect", params) {
            Ok(p) => p,
            Err(e) => return self.send(reply_frame(&id, Err(e))),
        };
        let known_version = {
            let mut known = self.inner.known.lock().unwrap_or_else(|p| p.into_inner());
            let ttl = self.inner.options.known_client_ttl;
            known.retain(|_, k| k.gone_since.is_none_or(|t| t.elapsed() < ttl));
            known.get(&p.client_id).map(|k| {
                for (_, kill) in k.conns.iter() {
                    kill.kill(1000, "superseded by reconnect");
                }
                k.version.clone()
            })
        };
        let version = known_version.clone().unwrap_or_else(|| "1.0.0".to_owned());
        self.register_client(&p.client_id, &version);
        self.inner.hub.hold(self.id);
        let mut existing = Vec::new();
        let mut missing = Vec::new();
        for ch in &p.subscriptions {
            let exists = ch == ROOT
                || (ch.starts_with("x-")
                    && self
                        .inner
                        .extension_for_scheme(ch)
                        .is_some_and(|e| e.snapshot(ch).is_some()))
                || mailbox(&self.inner, ch).is_some();
            if exists {
                existing.push(ch.as_str())
            } else {
                missing.push(ch.clone())
            }
        }
        let set: HashSet<&str> = existing.iter().copied().collect();
        let last_seen = u64::try_from(p.last_seen_server_seq).unwrap_or(u64::MAX);
        let replay = match known_version {
            Some(_) => self.inner.hub.replay_and_subscribe(
                self.id,
                last_seen,
                &set,
                version.starts_with("0."),
            ),
            None => Replay::TooOld,
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
        // A session the client was active in but no longer lists loses it.
        let listed: HashSet<&str> = p.subscriptions.iter().map(String::as_str).collect();
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
    fn finish(&mut self) {
        self.inner.hub.remove_conn(self.id);
        if self.client_id.is_empty() {
            return;
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
        if !last {
            return;
        }
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

/// Fill in the root channel for root commands that left it out, so typed decoding succeeds.
fn with_root_channel(method: &str, mut params: Value) -> Value {
    let root_like = ROOT_COMMANDS.contains(&method) || method == "initialize";
    if root_like {
        if params.is_null() {
            params = json!({});
        }
        if let Some(obj) = params.as_object_mut() {
            if method == "initialize" {
                obj.insert("channel".into(), Value::from(ROOT));
            } else {
                obj.entry("channel").or_insert(Value::from(ROOT));
            }
        }
    }
    params
}
