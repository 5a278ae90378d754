//! Host cases 11.4 (docs/acceptance.md) item 27: the official `MultiHostClient` against this host. A forced `reconnect_host`
//! comes back through `reconnect` (not a fallback `initialize`), replays what happened while it
//! was away, and its mirror equals the host's snapshots.

use std::sync::{Arc, Mutex};

use ahp::hosts::{HostConfig, HostEvent, HostId, HostState, MultiHostClient};
use ahp::{
    BoxedTransport, ClientConfig, MultiHostStateMirror, Transport, TransportError, TransportMessage,
};
use ahp_types::actions::StateAction;
use ahp_types::state::SnapshotState;
use ahp_ws::WebSocketTransport;
use serde_json::{Value, json};
use tokio::sync::Semaphore;

use super::support::*;

/// Which connection (1, 2, …) sent which request method, in order.
type Log = Arc<Mutex<Vec<(usize, String)>>>;

/// The official WebSocket transport, recording the methods it sends.
struct Recording {
    inner: WebSocketTransport,
    conn: usize,
    log: Log,
}

impl Transport for Recording {
    async fn send(&mut self, msg: TransportMessage) -> Result<(), TransportError> {
        let v: Value = match &msg {
            TransportMessage::Text(t) => serde_json::from_str(t).unwrap_or(Value::Null),
            TransportMessage::Binary(b) => serde_json::from_slice(b).unwrap_or(Value::Null),
            TransportMessage::Parsed(p) => serde_json::to_value(p).unwrap_or(Value::Null),
        };
        if let Some(m) = v.get("method").and_then(Value::as_str) {
            self.log.lock().unwrap().push((self.conn, m.to_owned()));
        }
        self.inner.send(msg).await
    }

    async fn recv(&mut self) -> Result<Option<TransportMessage>, TransportError> {
        self.inner.recv().await
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        self.inner.close().await
    }
}

async fn next_connected(events: &mut ahp::hosts::HostEventStream, generation: u64) {
    loop {
        let ev = tokio::time::timeout(PATIENCE, events.recv())
            .await
            .expect("a host event")
            .expect("the client lives");
        if matches!(ev, HostEvent::Connected { generation: g, .. } if g == generation) {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_host_client_reconnects_through_reconnect_and_its_mirror_matches() {
    let th = start().await;
    let log: Log = Arc::default();
    // Connection 1 opens at once; later ones wait for a permit, so the test can act on the
    // host while the client is away.
    let gate = Arc::new(Semaphore::new(1));
    let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let factory = {
        let (url, log, gate, opened) = (th.url.clone(), log.clone(), gate.clone(), opened.clone());
        move |_id: HostId| {
            let (url, log, gate, opened) = (url.clone(), log.clone(), gate.clone(), opened.clone());
            async move {
                gate.acquire().await.expect("gate open").forget();
                let conn = opened.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                let inner = WebSocketTransport::connect(&url)
                    .await
                    .map_err(|e| TransportError::Io(e.to_string()))?;
                Ok(BoxedTransport::new(Recording { inner, conn, log }))
            }
        }
    };
    let id = HostId::new("local");
    let config = HostConfig::new(id.clone(), "This host", factory)
        .with_client_id("multi")
        .with_client_config(ClientConfig {
            default_request_timeout: Some(PATIENCE),
            subscription_buffer: 4096,
        });
    let (multi, first) = MultiHostClient::single(config).await.unwrap();
    let mut host_events = multi.host_events();
    let mut events = multi.events();
    if !matches!(multi.host(&id).await.unwrap().state, HostState::Connected) {
        next_connected(&mut host_events, 1).await;
    }
    assert_eq!(first.client_id, "multi");

    let session = "mock:/multi".to_owned();
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    let conn = multi.client(&id).await.expect("connected");
    let _: Value = conn
        .request("createSession", json!({"channel": session}))
        .await
        .unwrap();
    let mut mirror = MultiHostStateMirror::new();
    let mut from = std::collections::HashMap::new();
    for uri in [&session, &chat] {
        let r = multi.subscribe(&id, uri.clone()).await.unwrap();
        let snap = r.snapshot.unwrap();
        from.insert(uri.clone(), snap.from_seq);
        mirror.apply_snapshot(&id, &snap);
    }
    // Feed the mirror from the client's fan-in until `pred` holds for an envelope.
    let mut feed = async |mirror: &mut MultiHostStateMirror,
                          pred: &dyn Fn(&StateAction) -> bool| loop {
        let ev = tokio::time::timeout(PATIENCE, events.recv())
            .await
            .expect("an event")
            .expect("the client lives");
        if let ahp::SubscriptionEvent::Action(env) = &ev.event {
            if from
                .get(&env.channel)
                .is_some_and(|f| env.server_seq as i64 > *f)
            {
                mirror.apply_event(&ev);
            }
            if pred(&env.action) {
                return;
            }
        }
    };
    multi
        .dispatch(&id, chat.clone(), turn_started("before", "hello"))
        .await
        .unwrap();
    feed(&mut mirror, &|a| {
        matches!(a, StateAction::ChatTurnComplete(_))
    })
    .await;

    // Force a reconnect; while the client is away, another client runs a turn.
    multi.reconnect_host(&id).await.unwrap();
    let other = client(&th.url).await;
    let mut wo = Watch::new(&other);
    other
        .initialize("other".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let (r, _) = other.subscribe(chat.clone()).await.unwrap();
    wo.snapshot(&r.snapshot.unwrap());
    other
        .dispatch(chat.clone(), turn_started("away", "reason"))
        .await
        .unwrap();
    wo.until(|e| matches!(e.action, StateAction::ChatTurnComplete(_)))
        .await;
    gate.add_permits(1);
    next_connected(&mut host_events, 2).await;
    let handle = multi.host(&id).await.unwrap();
    assert!(matches!(handle.state, HostState::Connected));
    assert_eq!(handle.generation, 2);

    // Connection 2 came back with `reconnect` and never needed `initialize`.
    let second: Vec<String> = log
        .lock()
        .unwrap()
        .iter()
        .filter(|(c, _)| *c == 2)
        .map(|(_, m)| m.clone())
        .collect();
    assert_eq!(
        second.first().map(String::as_str),
        Some("reconnect"),
        "{second:?}"
    );
    assert!(!second.iter().any(|m| m == "initialize"), "{second:?}");

    // The replayed turn reaches the mirror, which then equals the host's snapshots (the host
    // is quiet now; each event is taken as it arrives until they agree, or PATIENCE runs out).
    feed(
        &mut mirror,
        &|a| matches!(a, StateAction::ChatTurnComplete(c) if c.turn_id == "away"),
    )
    .await;
    loop {
        let mut equal = true;
        for uri in [&session, &chat] {
            let snap = th.host.snapshot(uri).await.unwrap();
            let key = ahp::HostedResourceKey::new(id.clone(), uri.clone());
            equal &= match snap.state {
                SnapshotState::Session(s) => mirror.sessions().get(&key) == Some(&*s),
                SnapshotState::Chat(c) => mirror.chats().get(&key) == Some(&*c),
                _ => panic!(),
            };
        }
        if equal {
            break;
        }
        feed(&mut mirror, &|_| true).await;
    }
    let turns: Vec<&str> = mirror.chats()[&ahp::HostedResourceKey::new(id.clone(), chat.clone())]
        .turns
        .iter()
        .map(|t| t.id.as_str())
        .collect();
    assert_eq!(turns, ["before", "away"]);
    // And the new connection is live: a turn dispatched through it streams back.
    multi
        .dispatch(&id, chat.clone(), turn_started("after", "hello"))
        .await
        .unwrap();
    feed(
        &mut mirror,
        &|a| matches!(a, StateAction::ChatTurnComplete(c) if c.turn_id == "after"),
    )
    .await;
}
