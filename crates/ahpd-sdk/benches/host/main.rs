//! Host benchmarks (a bench binary, `harness = false`), each against a baseline in the same run:
//!
//! - `emit_to_frame`: a backend's `emit` of a `chat/delta` until a loopback WebSocket client
//!   has the frame (10,000 samples, p50/p99), against a raw axum WebSocket server that pushes
//!   a frame from a channel to its socket.
//! - `fanout_100`: one session streaming 256-byte deltas to 100 loopback clients with one
//!   stalled client present, against a raw axum + `tokio::sync::broadcast` server sending the
//!   same payloads to the same clients (the issue's figure).
//! - `fanout_50` and `throughput_one_connection`: see `sustained.rs`.
//! - `long_chat`: per-turn time at about 1,000 turns in one chat against about 100 turns in
//!   the same chat; see `long_chat.rs`.
//!
//! `idle_rss` is the daemon's figure and is measured by `crates/ahpd/benches/startup.rs`.
//!
//! Run with `cargo bench -p ahpd-sdk --bench host`; `AHPD_BENCH_SECS=5` shortens the two
//! 30-second phases and `-- --quick` also the sample counts of the first two; `-- long_chat`
//! runs only that case.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ahp::{Transport, TransportMessage};
use ahp_types::actions::*;
use ahp_types::state::*;
use ahp_ws::WebSocketTransport;
use ahpd_sdk::agent::*;
use ahpd_sdk::host::HostBuilder;
use ahpd_sdk::transport::ws::WsConfig;
use async_trait::async_trait;
use axum::extract::ws::{Message as WsMessage, WebSocketUpgrade};
use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio::sync::broadcast;

mod long_chat;
mod sustained;

type Slot = Arc<Mutex<Option<(SessionContext, String)>>>;

/// A backend that hands its context and turn id to the benchmark.
struct Probe(Slot);
struct ProbeSession(Slot, SessionContext);

#[async_trait]
impl Agent for Probe {
    fn descriptor(&self) -> AgentDescriptor {
        AgentDescriptor::new("bench", "Bench")
    }
    async fn create(&self, start: SessionStart) -> Result<Box<dyn Session>, AgentError> {
        Ok(Box::new(ProbeSession(self.0.clone(), start.ctx)))
    }
}

#[async_trait]
impl Session for ProbeSession {
    fn backend_id(&self) -> String {
        "bench".into()
    }
    fn begin(&mut self, turn: TurnRequest) {
        self.1
            .emit(StateAction::ChatResponsePart(ChatResponsePartAction {
                turn_id: turn.turn_id.clone(),
                part: ResponsePart::Markdown(MarkdownResponsePart {
                    id: "m".into(),
                    content: String::new(),
                }),
                meta: None,
            }));
        *self.0.lock().unwrap() = Some((self.1.clone(), turn.turn_id));
    }
    fn cancel(&mut self, _: &str) {}
    async fn close(&mut self) {}
}

struct RawClient(WebSocketTransport);

impl RawClient {
    async fn connect(url: &str) -> Self {
        Self(WebSocketTransport::connect(url).await.expect("connect"))
    }
    async fn send(&mut self, v: serde_json::Value) {
        self.0
            .send(TransportMessage::Text(v.to_string()))
            .await
            .unwrap();
    }
    async fn frame(&mut self) -> String {
        self.try_frame().await.expect("open")
    }
    /// The next frame, or `None` once the socket closed or failed.
    async fn try_frame(&mut self) -> Option<String> {
        Some(match self.0.recv().await.ok()?? {
            TransportMessage::Text(s) => s,
            TransportMessage::Binary(b) => String::from_utf8(b).unwrap(),
            TransportMessage::Parsed(p) => serde_json::to_string(&p).unwrap(),
        })
    }
    /// Read and drop frames until the socket ends, so this client never stalls.
    async fn drain(mut self) {
        while self.try_frame().await.is_some() {}
    }
    async fn reply(&mut self) -> serde_json::Value {
        loop {
            let v: serde_json::Value = serde_json::from_str(&self.frame().await).unwrap();
            if v.get("id").is_some() {
                return v;
            }
        }
    }
    async fn join(url: &str, id: &str, chat: &str) -> Self {
        let mut c = Self::connect(url).await;
        c.send(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersions":["1.0.0"],"clientId": id}})).await;
        c.reply().await;
        c.send(json!({"jsonrpc":"2.0","id":2,"method":"subscribe","params":{"channel": chat}}))
            .await;
        c.reply().await;
        c
    }
    /// As `join`, also returning the chat state of the subscribe reply's snapshot.
    async fn join_with_snapshot(url: &str, id: &str, chat: &str) -> (Self, ChatState) {
        let mut c = Self::connect(url).await;
        c.send(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersions":["1.0.0"],"clientId": id}})).await;
        c.reply().await;
        c.send(json!({"jsonrpc":"2.0","id":2,"method":"subscribe","params":{"channel": chat}}))
            .await;
        let reply = c.reply().await;
        let snap: Snapshot = serde_json::from_value(reply["result"]["snapshot"].clone()).unwrap();
        match snap.state {
            SnapshotState::Chat(state) => (c, *state),
            other => panic!("subscribe to {chat} gave {other:?}"),
        }
    }
}

/// A host with the probe agent, one session and a running turn.
async fn host_setup() -> (ahpd_sdk::host::Host, String, String, Slot, RawClient) {
    let slot: Slot = Arc::new(Mutex::new(None));
    let host = HostBuilder::new()
        .agent(Arc::new(Probe(slot.clone())))
        .delta_window(Duration::ZERO)
        .build()
        .unwrap();
    let server = host.serve_ws(WsConfig::loopback(0)).await.unwrap();
    let url = format!("ws://{}", server.local_addr());
    std::mem::forget(server);
    let session = "bench:/one".to_owned();
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    let mut ctl = RawClient::connect(&url).await;
    ctl.send(json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersions":["1.0.0"],"clientId":"ctl"}})).await;
    ctl.reply().await;
    ctl.send(
        json!({"jsonrpc":"2.0","id":2,"method":"createSession","params":{"channel": session}}),
    )
    .await;
    ctl.reply().await;
    ctl.send(json!({"jsonrpc":"2.0","method":"dispatchAction","params":{"channel": chat,"clientSeq":1,"action":{"type":"chat/turnStarted","turnId":"t","message":{"text":"go"}}}})).await;
    while slot.lock().unwrap().is_none() {
        tokio::task::yield_now().await;
    }
    (host, url, chat, slot, ctl)
}

fn delta(turn: &str, content: &str) -> StateAction {
    StateAction::ChatDelta(ChatDeltaAction {
        turn_id: turn.into(),
        part_id: "m".into(),
        content: content.into(),
        meta: None,
    })
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// A raw axum server: every connection forwards what the broadcast channel carries.
async fn raw_server(tx: broadcast::Sender<Arc<str>>) -> String {
    let app = axum::Router::new().fallback(move |ws: WebSocketUpgrade| {
        let tx = tx.clone();
        async move {
            ws.on_upgrade(move |socket| async move {
                let (mut sink, mut stream) = socket.split();
                let mut rx = tx.subscribe();
                tokio::spawn(async move { while stream.next().await.is_some() {} });
                loop {
                    match rx.recv().await {
                        Ok(f) => {
                            if sink.send(WsMessage::Text((*f).into())).await.is_err() {
                                return;
                            }
                        }
                        // A receiver that fell a whole buffer behind is cut off, as the
                        // host closes a connection whose queue is full.
                        Err(broadcast::error::RecvError::Lagged(_)) => return,
                        Err(_) => return,
                    }
                }
            })
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("ws://{addr}")
}

async fn emit_to_frame(samples: usize) {
    let (_host, url, chat, slot, _ctl) = host_setup().await;
    let mut c = RawClient::join(&url, "lat", &chat).await;
    let (ctx, turn) = slot.lock().unwrap().clone().unwrap();
    let mut host_lat = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t0 = Instant::now();
        ctx.emit(delta(&turn, "x"));
        c.frame().await;
        host_lat.push(t0.elapsed());
    }
    // Baseline: a frame handed to a raw server's socket task.
    let (tx, _) = broadcast::channel::<Arc<str>>(16);
    let raw_url = raw_server(tx.clone()).await;
    let mut rc = RawClient::connect(&raw_url).await;
    while tx.receiver_count() == 0 {
        tokio::task::yield_now().await;
    }
    let payload: Arc<str> = Arc::from(
        r#"{"jsonrpc":"2.0","method":"action","params":{"channel":"c","action":{"type":"chat/delta","turnId":"t","partId":"m","content":"x"},"serverSeq":1}}"#,
    );
    let mut raw_lat = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t0 = Instant::now();
        tx.send(payload.clone()).unwrap();
        rc.frame().await;
        raw_lat.push(t0.elapsed());
    }
    let (hp50, hp99) = (pct(&mut host_lat, 0.5), pct(&mut host_lat, 0.99));
    let (rp50, rp99) = (pct(&mut raw_lat, 0.5), pct(&mut raw_lat, 0.99));
    println!("emit_to_frame ({samples} samples, loopback WebSocket)");
    println!(
        "  ahpd-sdk : p50 {:>8.1} us  p99 {:>8.1} us",
        hp50.as_secs_f64() * 1e6,
        hp99.as_secs_f64() * 1e6
    );
    println!(
        "  raw axum : p50 {:>8.1} us  p99 {:>8.1} us",
        rp50.as_secs_f64() * 1e6,
        rp99.as_secs_f64() * 1e6
    );
    println!(
        "  ratio host/raw: p50 {:.2}x  p99 {:.2}x",
        hp50.as_secs_f64() / rp50.as_secs_f64(),
        hp99.as_secs_f64() / rp99.as_secs_f64()
    );
}

async fn count_frames(mut c: RawClient, n: usize) {
    for _ in 0..n {
        c.frame().await;
    }
}

async fn fanout(clients: usize, messages: usize) {
    let content = "y".repeat(256);
    // The host.
    let (_host, url, chat, slot, _ctl) = host_setup().await;
    let mut joined = Vec::new();
    for i in 0..clients {
        joined.push(RawClient::join(&url, &format!("c{i}"), &chat).await);
    }
    let _stalled = RawClient::join(&url, "stalled", &chat).await; // never read again
    let (ctx, turn) = slot.lock().unwrap().clone().unwrap();
    let t0 = Instant::now();
    let tasks: Vec<_> = joined
        .into_iter()
        .map(|c| tokio::spawn(count_frames(c, messages)))
        .collect();
    for _ in 0..messages {
        ctx.emit(delta(&turn, &content));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let host_rate = (clients * messages) as f64 / t0.elapsed().as_secs_f64();

    // The baseline: the same payload size through axum + broadcast.
    let (tx, _) = broadcast::channel::<Arc<str>>(messages.max(16));
    let raw_url = raw_server(tx.clone()).await;
    let mut raws = Vec::new();
    for _ in 0..clients {
        raws.push(RawClient::connect(&raw_url).await);
    }
    let _raw_stalled = RawClient::connect(&raw_url).await;
    while tx.receiver_count() < clients + 1 {
        tokio::task::yield_now().await;
    }
    let frame = json!({"jsonrpc":"2.0","method":"action","params":{"channel": chat,"action":{"type":"chat/delta","turnId":"t","partId":"m","content": content},"serverSeq":1}}).to_string();
    let frame: Arc<str> = Arc::from(frame);
    let t0 = Instant::now();
    let tasks: Vec<_> = raws
        .into_iter()
        .map(|c| tokio::spawn(count_frames(c, messages)))
        .collect();
    for _ in 0..messages {
        tx.send(frame.clone()).unwrap();
    }
    for t in tasks {
        t.await.unwrap();
    }
    let raw_rate = (clients * messages) as f64 / t0.elapsed().as_secs_f64();
    println!("fanout_{clients} ({messages} x 256-byte deltas, one stalled client present)");
    println!("  ahpd-sdk : {:>10.0} messages/s", host_rate);
    println!("  raw axum + broadcast : {:>10.0} messages/s", raw_rate);
    println!("  ratio host/raw: {:.2}x", host_rate / raw_rate);
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let quick = std::env::args().any(|a| a == "--quick");
    if std::env::args().any(|a| a == "long_chat") {
        rt.block_on(long_chat::long_chat());
        return;
    }
    rt.block_on(async {
        emit_to_frame(if quick { 500 } else { 10_000 }).await;
        fanout(100, if quick { 200 } else { 2_000 }).await;
        let secs = sustained::phase_secs();
        sustained::fanout_50(secs).await;
        sustained::throughput_one_connection(secs).await;
        long_chat::long_chat().await;
    });
}
