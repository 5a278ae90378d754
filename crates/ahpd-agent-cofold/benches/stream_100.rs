//! `stream_100`: 100 sessions in one host, each one turn whose 2,000-token answer
//! the scripted endpoint streams as 2,000 SSE chunks, one client subscribed to every chat.
//! Baseline: 100 concurrent plain HTTP clients reading the same 100 streams. Checks that every
//! session's deltas, joined in arrival order, equal its script, and that the client's mirror of
//! every chat (reduced with the official reducers) equals the host's snapshot at the end; prints
//! both wall times and the ratio.
//!
//! Memory: the host and its client share this process, so the process's private memory
//! (`RssAnon`) is read before the client connects, right after (the client allocates its whole
//! event queue at once: that step is the client's share), at its peak while the answers
//! stream (read every 2 ms on a thread of its own) and when the last turn has ended. The host's
//! share is what the process holds beyond the idle host and the client's queue; the text the
//! bench itself collects (about 16 KB a session) is counted with it. The daemon measured alone,
//! in its own process, is `cargo bench -p ahpd --bench stream_daemon`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ahp::{Client, ClientConfig, SubscriptionEvent};
use ahp_types::actions::StateAction;
use ahp_types::commands::SubscribeResult;
use ahp_types::state::SnapshotState;
use ahp_ws::WebSocketTransport;
use ahpd_agent_cofold::{Embedder, Environment, cofold_agent_with};
use ahpd_sdk::host::HostBuilder;
use ahpd_sdk::testing::Mirror;
use ahpd_sdk::transport::ws::WsConfig;
use serde_json::json;
use testkit::{Endpoint, Frame, RecordedRequest, Reply, chunk};

const SESSIONS: usize = 100;
const TOKENS: usize = 2000;

fn answer(i: usize) -> Vec<String> {
    (0..TOKENS).map(|j| format!("s{i}t{j} ")).collect()
}

fn endpoint() -> Endpoint {
    let scripts: Arc<Vec<Vec<String>>> = Arc::new((0..SESSIONS).map(answer).collect());
    Endpoint::builder()
        .respond_with(move |req: &RecordedRequest| {
            let body = req.body.as_str();
            let i = body
                .find("session number ")
                .and_then(|at| {
                    body[at + 15..]
                        .split(|c: char| !c.is_ascii_digit())
                        .next()
                        .and_then(|n| n.parse::<usize>().ok())
                })
                .unwrap_or(0);
            let mut frames = vec![Frame::Chunk(chunk::role())];
            frames.extend(scripts[i].iter().map(|t| Frame::Chunk(chunk::text(t))));
            frames.push(Frame::Chunk(chunk::finish("stop")));
            Reply::stream(frames)
        })
        .start()
        .expect("endpoint")
}

async fn baseline(ep: &Endpoint) -> Duration {
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..SESSIONS {
        let http = http.clone();
        let url = ep.chat_url();
        tasks.push(tokio::spawn(async move {
            let body = json!({ "model": "m", "stream": true, "messages": [{ "role": "user", "content": format!("session number {i}.") }] });
            let text = http.post(url).json(&body).send().await.unwrap().text().await.unwrap();
            assert!(text.contains(&format!("s{i}t{} ", TOKENS - 1)));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    started.elapsed()
}

/// This process's private memory in KiB (`RssAnon`).
fn private_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("RssAnon:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// The process's private memory at the moments the memory report names, in KiB; `peak` is
/// kept by a thread reading it every 2 ms while `sampling` is set.
#[derive(Default)]
struct Marks {
    host_idle: AtomicU64,
    client_connected: AtomicU64,
    peak: AtomicU64,
    turns_ended: AtomicU64,
    sampling: AtomicBool,
}

impl Marks {
    fn sample(self: &Arc<Self>) -> std::thread::JoinHandle<()> {
        let marks = self.clone();
        marks.sampling.store(true, Ordering::SeqCst);
        std::thread::spawn(move || {
            while marks.sampling.load(Ordering::SeqCst) {
                marks.peak.fetch_max(private_kib(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    }

    fn report(&self) {
        let mib = |kib: u64| kib as f64 / 1024.0;
        let idle = self.host_idle.load(Ordering::Relaxed);
        let client = self.client_connected.load(Ordering::Relaxed);
        let peak = self.peak.load(Ordering::Relaxed).max(client);
        let ended = self.turns_ended.load(Ordering::Relaxed);
        let queue = client.saturating_sub(idle);
        let host_peak = peak.saturating_sub(client);
        let host_ended = ended.saturating_sub(client);
        println!("  memory (private, this process):");
        println!("    host idle, before the client:  {:>8.1} MiB", mib(idle));
        println!(
            "    client's share (its event queue, allocated at connect): {:>8.1} MiB",
            mib(queue)
        );
        println!(
            "    host's share at the peak:       {:>8.1} MiB ({:.2} MiB a session)",
            mib(host_peak),
            mib(host_peak) / SESSIONS as f64
        );
        println!(
            "    host's share once the turns ended: {:>5.1} MiB ({:.2}× its peak)",
            mib(host_ended),
            host_ended as f64 / host_peak.max(1) as f64
        );
        println!(
            "    process peak {:.1} MiB: client {:.0}%, host {:.0}%",
            mib(peak),
            100.0 * queue as f64 / peak.max(1) as f64,
            100.0 * host_peak as f64 / peak.max(1) as f64
        );
    }
}

async fn engine(ep: &Endpoint, home: &std::path::Path, marks: &Arc<Marks>) -> (Duration, usize) {
    let env = Environment {
        vars: HashMap::from([("HOME".to_owned(), home.display().to_string())]),
        home: home.to_path_buf(),
    };
    let agent = cofold_agent_with(
        &json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        Embedder {
            env: Some(env),
            ..Embedder::default()
        },
    )
    .unwrap();
    let host = HostBuilder::new()
        .agent(Arc::new(agent))
        .delta_window(Duration::ZERO)
        .build()
        .unwrap();
    let server = host.serve_ws(WsConfig::loopback(0)).await.unwrap();
    let url = format!("ws://{}", server.local_addr());
    marks.host_idle.store(private_kib(), Ordering::Relaxed);
    let t = WebSocketTransport::connect(&url).await.unwrap();
    let client = Client::connect(
        t,
        ClientConfig {
            default_request_timeout: Some(Duration::from_secs(120)),
            subscription_buffer: 1 << 20,
        },
    )
    .await
    .unwrap();
    client
        .initialize("bench".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    marks
        .client_connected
        .store(private_kib(), Ordering::Relaxed);
    let mut events = client.events();
    let mut chats = HashMap::new();
    // The client's view of every chat, reduced from the snapshot and each envelope with the
    // official reducers; it must equal the host's state at the end.
    let mut mirror = Mirror::default();
    for i in 0..SESSIONS {
        let session = format!("cofold:/bench-{i}");
        let _: serde_json::Value = client
            .request("createSession", json!({ "channel": session, "workingDirectories": [ahpd_sdk::util::file_uri(home)] }))
            .await
            .unwrap();
        let chat = ahpd_sdk::util::default_chat_uri(&session);
        // A raw subscribe: the client fans every action out to `events()` anyway, and a
        // subscription handle would preallocate a broadcast ring of `subscription_buffer`
        // events per chat (100 of them at 2^20 slots each did not fit in memory).
        let res: SubscribeResult = client
            .request("subscribe", json!({ "channel": chat }))
            .await
            .unwrap();
        mirror.apply_snapshot(&res.snapshot.expect("a snapshot"));
        chats.insert(chat, i);
    }
    let sampler = marks.sample();
    let started = Instant::now();
    for (chat, i) in &chats {
        let turn: StateAction = serde_json::from_value(json!({
            "type": "chat/turnStarted", "turnId": "t1", "startedAt": ahpd_sdk::util::now_iso(),
            "message": { "text": format!("session number {i}."), "origin": { "kind": "user" } }
        }))
        .unwrap();
        client.dispatch(chat.clone(), turn).await.unwrap();
    }
    let mut texts: HashMap<usize, String> = HashMap::new();
    let mut parts: HashMap<usize, usize> = HashMap::new();
    let mut done = 0;
    let mut deltas = 0;
    while done < SESSIONS {
        let ev = events.recv().await.expect("event");
        let SubscriptionEvent::Action(env) = ev.event else {
            continue;
        };
        let Some(i) = chats.get(&env.channel).copied() else {
            continue;
        };
        mirror.apply(&env);
        match env.action {
            StateAction::ChatDelta(d) => {
                deltas += 1;
                texts.entry(i).or_default().push_str(&d.content);
            }
            StateAction::ChatResponsePart(_) => *parts.entry(i).or_default() += 1,
            StateAction::ChatTurnComplete(_) => done += 1,
            StateAction::ChatError(e) => panic!("session {i} failed: {}", e.part.error.message),
            _ => {}
        }
    }
    let elapsed = started.elapsed();
    marks.turns_ended.store(private_kib(), Ordering::Relaxed);
    marks.sampling.store(false, Ordering::SeqCst);
    sampler.join().unwrap();
    for i in 0..SESSIONS {
        assert_eq!(
            texts.get(&i).map(String::as_str),
            Some(answer(i).concat().as_str()),
            "session {i}"
        );
        assert_eq!(parts.get(&i), Some(&1), "session {i} opened one part");
    }
    // The host may still be applying the last actions (the activity cleared after each turn)
    // when the last turn ends: a difference is read again after another round trip, and only
    // one that outlasts a generous deadline fails.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        client.ping().await.unwrap();
        while let Ok(Some(ev)) = tokio::time::timeout(Duration::ZERO, events.recv()).await {
            if let SubscriptionEvent::Action(env) = ev.event {
                mirror.apply(&env);
            }
        }
        let mut differing = Vec::new();
        for (chat, i) in &chats {
            let snapshot = host.snapshot(chat).await.expect("a snapshot");
            let SnapshotState::Chat(state) = &snapshot.state else {
                panic!("session {i}: not a chat snapshot");
            };
            if mirror.chats.get(chat) != Some(&**state) {
                differing.push(*i);
            }
        }
        if differing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the mirrors of sessions {differing:?} differ from the host's snapshots"
        );
    }
    host.shutdown();
    (elapsed, deltas)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let marks = Arc::new(Marks::default());
    runtime.block_on(async {
        let home = tempfile::tempdir().unwrap();
        let ep = endpoint();
        let base = baseline(&ep).await;
        let (took, deltas) = engine(&ep, home.path(), &marks).await;
        println!("stream_100: {SESSIONS} sessions x {TOKENS} chunks");
        println!(
            "  baseline (plain HTTP clients): {:>8.1} ms",
            base.as_secs_f64() * 1e3
        );
        println!(
            "  engine (host + cofold + client): {:>8.1} ms",
            took.as_secs_f64() * 1e3
        );
        println!(
            "  ratio engine/baseline: {:.2}",
            took.as_secs_f64() / base.as_secs_f64()
        );
        println!(
            "  deltas per second: {:.0}",
            deltas as f64 / took.as_secs_f64()
        );
        println!("  every delta arrived, in order, once per session: yes");
        println!("  every client mirror equals the host's snapshot: yes");
    });
    marks.report();
}
