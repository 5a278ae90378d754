//! `soak`: a host serving the cofold engine (file store, scripted loopback model) for many
//! sessions in a row. Each session is created by one client, given one turn (a 40-chunk
//! streamed answer), left by it, then browsed by a second client (subscribed, its snapshot
//! checked, unsubscribed) and left again, so the host unloads it in its own time (the default
//! cap of 64 unused sessions, least recently used first).
//!
//! Prints this process's memory (`VmRSS` and the private `RssAnon`, from `/proc/self/status`)
//! once the first 1,000 sessions are done and at the end, with the ratio (goal: end ≤ 1.5× the
//! first), and checks after every session that the replay ring's bytes never pass its bound.
//! The clients and the scripted endpoint share the process; neither keeps anything per session
//! (the endpoint's request log is emptied as it goes).
//!
//! Run with `cargo bench -p ahpd --bench soak`. `AHPD_SOAK_SESSIONS` (default
//! 10,000) and `AHPD_SOAK_PARALLEL` (sessions in flight at once, default 4) scale it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ahp::{Client, ClientConfig, SubscriptionEvent};
use ahp_types::actions::StateAction;
use ahp_types::state::SnapshotState;
use ahp_ws::WebSocketTransport;
use ahpd_agent_cofold::{Embedder, Environment, cofold_agent_with};
use ahpd_sdk::host::HostBuilder;
use ahpd_sdk::ports::FileSessionStore;
use ahpd_sdk::transport::ws::WsConfig;
use serde_json::{Value, json};
use testkit::{Endpoint, Frame, Reply, chunk};

const CHUNKS: usize = 40;
const FIRST: usize = 1000;
const RING_BYTES: usize = 16 * 1024 * 1024;

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn endpoint() -> Endpoint {
    let mut frames = vec![Frame::Chunk(chunk::role())];
    frames.extend((0..CHUNKS).map(|j| Frame::Chunk(chunk::text(&format!("word{j} ")))));
    frames.push(Frame::Chunk(chunk::finish("stop")));
    Endpoint::builder()
        .fallback(Reply::stream(frames))
        .start()
        .expect("endpoint")
}

/// `VmRSS` and `RssAnon` of this process, in KiB.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("RssAnon:"))
}

async fn connect(url: &str, name: &str) -> Client {
    let client = Client::connect(
        WebSocketTransport::connect(url).await.unwrap(),
        ClientConfig {
            default_request_timeout: Some(Duration::from_secs(120)),
            subscription_buffer: 4096,
        },
    )
    .await
    .unwrap();
    client
        .initialize(name.into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    client
}

async fn request(client: &Client, method: &str, params: Value) -> Value {
    client.request(method, params).await.unwrap()
}

/// One session's life: made, given a turn and left by `maker`, then browsed and left by
/// `browser`.
async fn one_session(maker: &Client, browser: &Client, work: &Path, i: usize) {
    let session = format!("cofold:/soak-{i}");
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    let mut events = maker.events();
    request(
        maker,
        "createSession",
        json!({ "channel": session, "workingDirectories": [ahpd_sdk::util::file_uri(work)] }),
    )
    .await;
    request(maker, "subscribe", json!({ "channel": chat })).await;
    let turn: StateAction = serde_json::from_value(json!({
        "type": "chat/turnStarted", "turnId": "t1", "startedAt": ahpd_sdk::util::now_iso(),
        "message": { "text": format!("session number {i}."), "origin": { "kind": "user" } }
    }))
    .unwrap();
    maker.dispatch(chat.clone(), turn).await.unwrap();
    loop {
        let ev = events.recv().await.expect("event");
        let SubscriptionEvent::Action(env) = ev.event else {
            continue;
        };
        if env.channel != chat {
            continue;
        }
        match env.action {
            StateAction::ChatTurnComplete(_) => break,
            StateAction::ChatError(e) => panic!("session {i} failed: {}", e.part.error.message),
            _ => {}
        }
    }
    drop(events);
    // `unsubscribe` is a notification; later requests on the channel wait for it.
    maker.unsubscribe(chat.clone()).await.unwrap();
    maker.unsubscribe(session).await.unwrap();

    let browsed = request(browser, "subscribe", json!({ "channel": chat })).await;
    let snapshot: ahp_types::state::Snapshot =
        serde_json::from_value(browsed["snapshot"].clone()).unwrap();
    let SnapshotState::Chat(state) = snapshot.state else {
        panic!("session {i}: not a chat snapshot");
    };
    assert_eq!(state.turns.len(), 1, "session {i} shows its turn");
    browser.unsubscribe(chat).await.unwrap();
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn main() {
    let total = setting("AHPD_SOAK_SESSIONS", 10_000);
    let parallel = setting("AHPD_SOAK_PARALLEL", 4).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        let ep = Arc::new(endpoint());
        let env = Environment {
            vars: HashMap::from([("HOME".to_owned(), dir.path().display().to_string())]),
            home: dir.path().to_path_buf(),
        };
        let options = json!({
            "baseUrl": ep.base_url(),
            "model": "m",
            "store": dir.path().join("store").display().to_string(),
        });
        let agent = cofold_agent_with(
            &options,
            Embedder {
                env: Some(env),
                ..Embedder::default()
            },
        )
        .unwrap();
        let sessions = FileSessionStore::open(dir.path().join("sessions.json")).unwrap();
        let host = HostBuilder::new()
            .agent(Arc::new(agent))
            .session_store(Arc::new(sessions))
            .build()
            .unwrap();
        let server = host.serve_ws(WsConfig::loopback(0)).await.unwrap();
        let url = format!("ws://{}", server.local_addr());
        let maker = Arc::new(connect(&url, "maker").await);
        let browser = Arc::new(connect(&url, "browser").await);
        let handle = host.handle();

        let next = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let ring_peak = Arc::new(AtomicUsize::new(0));
        let ring_len_peak = Arc::new(AtomicUsize::new(0));
        let (first_tx, first_rx) = tokio::sync::oneshot::channel::<(u64, u64, Duration)>();
        let first_tx = Arc::new(std::sync::Mutex::new(Some(first_tx)));
        let started = Instant::now();
        let mut lanes = Vec::new();
        for _ in 0..parallel {
            let (maker, browser, work) = (maker.clone(), browser.clone(), work.clone());
            let (next, done, ep, handle) = (next.clone(), done.clone(), ep.clone(), handle.clone());
            let (ring_peak, ring_len_peak, first_tx) =
                (ring_peak.clone(), ring_len_peak.clone(), first_tx.clone());
            lanes.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    one_session(&maker, &browser, &work, i).await;
                    ep.forget_requests();
                    let (len, bytes) = handle.replay_ring_usage();
                    ring_peak.fetch_max(bytes, Ordering::Relaxed);
                    ring_len_peak.fetch_max(len, Ordering::Relaxed);
                    assert!(bytes <= RING_BYTES, "the replay ring holds {bytes} bytes");
                    if done.fetch_add(1, Ordering::Relaxed) + 1 == FIRST.min(total) {
                        let (rss, anon) = memory();
                        if let Some(tx) = first_tx.lock().unwrap().take() {
                            let _ = tx.send((rss, anon, started.elapsed()));
                        }
                    }
                }
            }));
        }
        for lane in lanes {
            lane.await.unwrap();
        }
        let took = started.elapsed();
        let (rss_end, anon_end) = memory();
        let (rss_first, anon_first, first_took) = first_rx.await.unwrap();
        let open = handle.open_sessions().len();
        println!(
            "soak: {total} sessions ({parallel} at a time), each created, given a {CHUNKS}-chunk turn, browsed by a second client and left"
        );
        println!(
            "  after the first {}: RSS {} (private {}), {:.1} s",
            FIRST.min(total),
            mib(rss_first),
            mib(anon_first),
            first_took.as_secs_f64()
        );
        println!(
            "  at the end:          RSS {} (private {}), {:.1} s",
            mib(rss_end),
            mib(anon_end),
            took.as_secs_f64()
        );
        let ratio = rss_end as f64 / rss_first.max(1) as f64;
        println!(
            "  ratio end/first: RSS {:.2}×, private {:.2}× (goal ≤ 1.5×: {})",
            ratio,
            anon_end as f64 / anon_first.max(1) as f64,
            if ratio <= 1.5 { "met" } else { "missed" }
        );
        println!(
            "  replay ring: at most {} envelopes and {} bytes seen, bound {} bytes: never over",
            ring_len_peak.load(Ordering::Relaxed),
            ring_peak.load(Ordering::Relaxed),
            RING_BYTES
        );
        println!("  sessions still loaded at the end: {open}");
        host.shutdown();
    });
}
