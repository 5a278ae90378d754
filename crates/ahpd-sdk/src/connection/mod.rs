//! One connection: a reader that decodes frames and routes each message, and a writer that
//! drains the bounded outbound queue onto the peer.
//!
//! The reader never waits on a request: the handshake runs as its own task (frames other than
//! `ping` wait for it), and every later request runs as a task of its own, in the order
//! `lanes` gives, with the host's request time limit, up to the connection's cap of work in
//! flight (`budget`). Notifications are handed to their session's mailbox at once unless
//! earlier work on that session is still running. The reader does wait on its client: while
//! more than half of the outbound queue is unread, it reads nothing more.
//!
//! This folder is the connection layer: one client's connection from its first frame to its
//! close. It owns the reader (this module), the handshake, the order requests keep
//! ([`lanes`]) and the writer. It takes frames from a [`Peer`] (the transport layer), hands each
//! request to its handler in `protocol`, and reaches sessions only through their mailboxes
//! (`session`) and the fan-out in `channels`. Nothing below it names a connection's internals.

pub(crate) mod budget;
pub(crate) mod handshake;
pub(crate) mod lanes;
pub(crate) mod writer;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::channels::hub::{Frame, KillSwitch};
use crate::channels::root::ROOT;
use crate::connection::budget::Budget;
use crate::connection::lanes::Lanes;
use crate::error::{RpcError, codes};
use crate::inner::HostInner;
use crate::inner::mailbox;
use crate::session::{ConnRef, SessionMsg};
use crate::transport::peer::{Inbound, Peer};

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

/// Requests that only read a session: they wait for earlier work on it but hold nothing up.
const READS: &[&str] = &["fetchTurns", "completions"];

/// Frames kept while the handshake runs (their bytes count against `HostOptions::held_bytes`
/// too); a client that sends more before its handshake is answered loses the rest (requests
/// are answered with an error).
const WAITING_CAP: usize = 1024;

pub(crate) fn reply_frame(id: &Value, result: Result<Value, RpcError>) -> Frame {
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

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    New,
    Ready,
}

/// One inbound frame, decoded far enough to route it.
enum Msg {
    /// Malformed: the error reply to send.
    Answer(Frame),
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// A response from the client: this host sends no requests, so it is dropped.
    Nothing,
}

impl Msg {
    fn is_ping(&self) -> bool {
        matches!(self, Msg::Request { method, .. } if method == "ping")
    }
}

fn parse(text: &str) -> Msg {
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(_) => {
            return Msg::Answer(reply_frame(
                &Value::Null,
                Err(RpcError::new(
                    codes::PARSE_ERROR,
                    "the message is not valid JSON",
                )),
            ));
        }
    };
    let Value::Object(mut obj) = value else {
        return Msg::Answer(reply_frame(
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
        return Msg::Answer(reply_frame(
            &Value::Null,
            Err(RpcError::invalid_request("id must be a string or a number")),
        ));
    }
    let params = obj.remove("params").unwrap_or(Value::Null);
    match (obj.remove("method"), id) {
        (None, Some(_)) if obj.contains_key("result") || obj.contains_key("error") => Msg::Nothing,
        (None, _) => Msg::Answer(reply_frame(
            &Value::Null,
            Err(RpcError::invalid_request(
                "the message has neither a method nor an id",
            )),
        )),
        (Some(Value::String(method)), Some(id)) => Msg::Request { id, method, params },
        (Some(Value::String(method)), None) => Msg::Notification { method, params },
        (Some(_), id) => Msg::Answer(reply_frame(
            &id.unwrap_or(Value::Null),
            Err(RpcError::invalid_request("method must be a string")),
        )),
    }
}

#[derive(Clone)]
pub(crate) struct Conn {
    pub(crate) inner: Arc<HostInner>,
    pub(crate) id: u64,
    pub(crate) kill: Arc<KillSwitch>,
    pub(crate) phase: Phase,
    pub(crate) client_id: String,
    pub(crate) version: String,
    pub(crate) budget: Budget,
}

// Long: the connection's one loop (frames in, queue out, shutdown, keep-alive) reads best as a
// single `select!`.
pub(crate) async fn run(inner: Arc<HostInner>, peer: Peer) {
    let id = inner.next_conn_id();
    let (tx, rx) = mpsc::channel(inner.options.outbound_queue.max(1));
    let kill = Arc::new(KillSwitch::default());
    // The reader looks at how full the queue is (it never sends on this handle); it is
    // dropped before the writer is awaited, so the writer sees the queue close.
    let queue = tx.clone();
    let drained = Arc::new(tokio::sync::Notify::new());
    inner.hub.add_conn(id, tx, kill.clone());
    let closes_on_oversize = peer.writer.closes_on_oversize();
    let label = peer.label.clone();
    tracing::info!(conn = id, peer = %label, "connection opened");
    let writer = tokio::spawn(crate::connection::writer::write_loop(
        peer.writer,
        rx,
        kill.clone(),
        inner.options.write_timeout,
        drained.clone(),
    ));
    let mut reader = peer.reader;
    let mut conn = Conn {
        inner: inner.clone(),
        id,
        kill: kill.clone(),
        phase: Phase::New,
        client_id: String::new(),
        version: String::new(),
        budget: Budget::new(inner.options.in_flight_cap),
    };
    let mut lanes = Lanes::default();
    let mut handshake: Option<JoinHandle<Conn>> = None;
    let mut waiting: VecDeque<Msg> = VecDeque::new();
    let mut waiting_bytes = 0usize;
    let mut peer_closed = false;
    loop {
        tokio::select! {
            _ = kill.token().cancelled() => break,
            _ = inner.shutdown.cancelled() => {
                kill.kill(1001, "the host is shutting down");
                break;
            }
            done = finished(&mut handshake) => {
                if let Ok(c) = done {
                    conn = c;
                }
                while handshake.is_none()
                    && let Some(m) = waiting.pop_front()
                {
                    conn.route(m, &mut lanes, &mut handshake);
                }
                if waiting.is_empty() {
                    waiting_bytes = 0;
                }
            }
            item = reader.next() => match item {
                None => {
                    peer_closed = true;
                    break;
                }
                Some(Inbound::Oversized) if closes_on_oversize => {
                    kill.kill(1009, "frame too large");
                    break;
                }
                Some(Inbound::Oversized) => conn.send(reply_frame(&Value::Null, Err(RpcError::invalid_request("the message is larger than this host accepts")))),
                Some(Inbound::Frame(text)) => {
                    let m = parse(&text);
                    if handshake.is_none() || m.is_ping() {
                        conn.route(m, &mut lanes, &mut handshake);
                    } else if waiting.len() < WAITING_CAP
                        && waiting_bytes + text.len() <= inner.options.held_bytes
                    {
                        waiting_bytes += text.len();
                        waiting.push_back(m);
                    } else if let Msg::Request { id, .. } = m {
                        conn.send(reply_frame(&id, Err(RpcError::invalid_request("too many messages arrived before the handshake was answered"))));
                    }
                    // A client that does not read its answers is not read from either: past
                    // half a queue of unread frames, the next frame waits until the writer has
                    // made room, so its own answers (refusals included) never fill the queue.
                    let half = (queue.max_capacity() / 2).max(1);
                    while queue.capacity() < half && !kill.token().is_cancelled() {
                        tokio::select! {
                            _ = drained.notified() => {}
                            _ = kill.token().cancelled() => {}
                            _ = inner.shutdown.cancelled() => break,
                        }
                    }
                }
            },
        }
    }
    if let Some(h) = handshake.take() {
        h.abort();
    }
    conn.finish();
    drop(queue);
    let _ = writer.await;
    let reason = match kill.reason() {
        Some((code, reason)) => format!("{code} {reason}"),
        None if peer_closed => "closed by the peer".to_owned(),
        None => "closed".to_owned(),
    };
    tracing::info!(
        conn = id,
        peer = %label,
        client = %conn.client_id,
        version = %conn.version,
        reason = %reason,
        "connection closed"
    );
}

/// The running handshake's result; never resolves when there is none.
async fn finished(h: &mut Option<JoinHandle<Conn>>) -> Result<Conn, tokio::task::JoinError> {
    let Some(job) = h.as_mut() else {
        return std::future::pending().await;
    };
    let r = job.await;
    *h = None;
    r
}

impl Conn {
    pub(crate) fn send(&self, frame: Frame) {
        self.inner.hub.send_to(self.id, frame);
    }

    pub(crate) fn conn_ref(&self) -> ConnRef {
        ConnRef {
            id: self.id,
            client_id: self.client_id.clone(),
        }
    }

    pub(crate) fn limit(&self) -> Duration {
        self.inner
            .options
            .request_timeout
            .max(Duration::from_millis(1))
    }

    fn route(&self, m: Msg, lanes: &mut Lanes, handshake: &mut Option<JoinHandle<Conn>>) {
        match m {
            Msg::Answer(frame) => self.send(frame),
            Msg::Nothing => {}
            Msg::Request { id, method, params } => {
                self.request(id, method, params, lanes, handshake)
            }
            Msg::Notification { method, params } => {
                if self.phase == Phase::Ready {
                    self.notification(&method, params, lanes);
                }
            }
        }
    }

    fn request(
        &self,
        id: Value,
        method: String,
        params: Value,
        lanes: &mut Lanes,
        handshake: &mut Option<JoinHandle<Conn>>,
    ) {
        if method == "ping" {
            return self.send(reply_frame(&id, Ok(Value::Null)));
        }
        if ROOT_COMMANDS.contains(&method.as_str())
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
        let params = with_root_channel(&method, params);
        match (self.phase, method.as_str()) {
            (Phase::New, "initialize" | "reconnect") => {
                let mut c = self.clone();
                *handshake = Some(tokio::spawn(async move {
                    if method == "initialize" {
                        c.initialize(id, params).await;
                    } else {
                        c.reconnect(id, params).await;
                    }
                    c
                }));
            }
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
            (Phase::Ready, _) => self.spawn_request(id, method, params, lanes),
        }
    }

    /// Run a request as its own task, after the work it must follow (see `lanes`), unless the
    /// connection has as many in flight as it may (see `budget`).
    fn spawn_request(&self, id: Value, method: String, params: Value, lanes: &mut Lanes) {
        let Some(slot) = self.budget.take(&self.inner.budget_marks) else {
            return self.send(reply_frame(&id, Err(self.budget.refusal())));
        };
        let channel = params
            .get("channel")
            .and_then(Value::as_str)
            .filter(|c| *c != ROOT && !ROOT_COMMANDS.contains(&method.as_str()));
        let place = channel.map(|channel| {
            let key = lanes.key(&self.inner, channel);
            if method == "createChat"
                && let Some(chat) = params.get("chat").and_then(Value::as_str)
            {
                lanes.chat_pending(chat, &key);
            }
            if READS.contains(&method.as_str()) {
                lanes.after(&key)
            } else {
                lanes.tail(&key)
            }
        });
        let conn = self.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let mut place = place;
            if let Some(p) = place.as_mut() {
                p.ready().await;
            }
            if method == "subscribe" {
                return conn.subscribe(id, params).await;
            }
            let limit = conn.limit();
            let result = if method == "createSession" {
                // Bounded by the same limit on the agent's opening, which also marks the
                // session failed; answering first would leave it looking still open.
                conn.command(&method, params).await
            } else {
                match tokio::time::timeout(limit, conn.command(&method, params)).await {
                    Ok(r) => r,
                    Err(_) => Err(RpcError::timed_out(&method, limit)),
                }
            };
            conn.send(reply_frame(&id, result));
        });
    }

    fn notification(&self, method: &str, params: Value, lanes: &mut Lanes) {
        let Some(channel) = params
            .get("channel")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            tracing::debug!(method, "a notification without a channel was dropped");
            return;
        };
        match method {
            "dispatchAction" => {
                let client_seq = params.get("clientSeq").and_then(Value::as_i64).unwrap_or(0);
                let action = params.get("action").cloned().unwrap_or(Value::Null);
                if channel == ROOT {
                    return crate::protocol::rootdispatch::dispatch(
                        &self.inner,
                        self.id,
                        &self.client_id,
                        client_seq,
                        action,
                    );
                }
                let key = lanes.key(&self.inner, &channel);
                let mut msg = SessionMsg::Dispatch {
                    conn: self.conn_ref(),
                    channel: channel.clone(),
                    client_seq,
                    action,
                };
                if !lanes.busy(&key) {
                    let Some(tx) = mailbox(&self.inner, &channel) else {
                        return;
                    };
                    match tx.try_send(msg) {
                        Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => return,
                        // A busy session: queue it in the lane so later ones stay behind it.
                        Err(mpsc::error::TrySendError::Full(m)) => msg = m,
                    }
                }
                let Some(slot) = self.budget.take(&self.inner.budget_marks) else {
                    // The protocol's answer to a dispatch is its envelope: a refused one, so the
                    // client rolls its optimistic change back.
                    let origin = ahp_types::actions::ActionOrigin {
                        client_id: self.client_id.clone(),
                        client_seq,
                    };
                    let action = match msg {
                        SessionMsg::Dispatch { action, .. } => action,
                        _ => Value::Null,
                    };
                    return self.inner.hub.reject(
                        self.id,
                        &channel,
                        &action.to_string(),
                        &origin,
                        &self.budget.sentence(),
                    );
                };
                let mut place = lanes.tail(&key);
                let inner = self.inner.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    place.ready().await;
                    if let Some(tx) = mailbox(&inner, &channel) {
                        let _ = tx.send(msg).await;
                    }
                    drop(place);
                });
            }
            "unsubscribe" => {
                let Some(slot) = self.budget.take(&self.inner.budget_marks) else {
                    // A notification has no answer to carry the refusal; closing is the one
                    // signal left, and dropping it would leave the client subscribed unawares.
                    return self.kill.kill(1008, &self.budget.close_reason());
                };
                let mut place = lanes.tail(&lanes.key(&self.inner, &channel));
                let conn = self.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    place.ready().await;
                    conn.unsubscribe(&channel).await;
                    drop(place);
                });
            }
            other => tracing::debug!(method = other, "an unknown notification was ignored"),
        }
    }

    async fn unsubscribe(&self, channel: &str) {
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
