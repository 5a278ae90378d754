//! What hosting an ACP agent costs, in one run:
//!
//! - the added latency of a turn: the same agent (the fake ACP agent's `echo`) driven turn by
//!   turn through an in-process host and the official `ahp` client over a loopback WebSocket,
//!   against the Python ACP SDK driving it directly (goal: at most 5 ms more per turn);
//! - the host's memory per ACP session, apart from the agent processes: the growth of this
//!   process's resident set over many open sessions, each with its child and one turn (goal: at
//!   most 2 MiB).
//!
//! `cargo bench -p ahpd-agent-acp --bench turn_latency`. The baseline needs the Python SDK
//! (`agent-client-protocol` 0.12.1, in the fast-agent virtual environment `.ci/run` makes); its
//! line is left out, saying so, when that is absent.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahp::{Client, ClientConfig, SubscriptionEvent};
use ahp_types::actions::{ChatTurnStartedAction, StateAction};
use ahp_types::state::{Message, MessageKind, MessageOrigin};
use ahp_ws::WebSocketTransport;
use ahpd_agent_acp::AcpEngine;
use ahpd_sdk::host::HostBuilder;
use ahpd_sdk::plugin::{AgentRecord, Engine, SecretError, SecretReader};
use ahpd_sdk::transport::ws::WsConfig;
use ahpd_sdk::{Agent, Secret};
use serde_json::{Value, json};

const FAKE: &str = env!("CARGO_BIN_EXE_fake-acp-agent");
const TURNS: usize = 200;
const WARMUP: usize = 20;
const SESSIONS: usize = 40;

struct NoVault;

impl SecretReader for NoVault {
    fn read(&self, name: &str) -> Result<Secret, SecretError> {
        Err(SecretError {
            name: name.to_owned(),
            reason: "no vault".into(),
        })
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn agent(store: &Path, work: &Path) -> Arc<dyn Agent> {
    let engine = AcpEngine::new(store.to_path_buf(), vec![work.to_path_buf()]);
    let record = AgentRecord {
        id: "fake".into(),
        engine: "acp".into(),
        owner: "host".into(),
        name: "fake".into(),
        description: None,
        icon: None,
        model: None,
        config: json!({"command": FAKE})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    };
    engine
        .agent(&record, &json!({}), Arc::new(NoVault))
        .expect("the agent builds")
}

fn message(text: &str) -> Message {
    Message {
        text: text.into(),
        origin: MessageOrigin {
            kind: MessageKind::User,
        },
        attachments: None,
        model: None,
        agent: None,
        meta: None,
    }
}

async fn client(url: &str, buffer: usize) -> Client {
    let t = WebSocketTransport::connect(url).await.expect("connects");
    let c = Client::connect(
        t,
        ClientConfig {
            default_request_timeout: Some(Duration::from_secs(60)),
            subscription_buffer: buffer,
        },
    )
    .await
    .expect("client");
    c.initialize("bench".into(), vec!["1.0.0".into()], vec![])
        .await
        .expect("initializes");
    c
}

/// Runs one turn and waits for its end.
async fn turn(c: &Client, events: &mut ahp::ClientEventStream, chat: &str, id: &str) {
    c.dispatch(
        chat.to_owned(),
        StateAction::ChatTurnStarted(ChatTurnStartedAction {
            turn_id: id.into(),
            started_at: ahpd_sdk::util::now_iso(),
            message: message("echo the benchmark turn"),
            queued_message_id: None,
            meta: None,
        }),
    )
    .await
    .expect("dispatch");
    loop {
        let ev = events.recv().await.expect("client alive");
        if let SubscriptionEvent::Action(env) = ev.event
            && matches!(&env.action, StateAction::ChatTurnComplete(a) if a.turn_id == id)
        {
            return;
        }
    }
}

async fn open(c: &Client, session: &str, work: &Path) -> String {
    let _: Value = c
        .request(
            "createSession",
            json!({"channel": session, "workingDirectories": [ahpd_sdk::util::file_uri(work)]}),
        )
        .await
        .expect("createSession");
    let chat = ahpd_sdk::util::default_chat_uri(session);
    let _ = c.subscribe(session.to_owned()).await.expect("subscribe");
    let _ = c.subscribe(chat.clone()).await.expect("subscribe");
    chat
}

fn baseline(work: &Path) -> Option<f64> {
    let python =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/acp-venv-fast-agent/bin/python");
    if !python.is_file() {
        println!(
            "baseline skipped: {} is absent (.ci/run makes it)",
            python.display()
        );
        return None;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/sdk_baseline.py");
    let out = std::process::Command::new(&python)
        .arg(script)
        .args([
            FAKE,
            &work.to_string_lossy(),
            &TURNS.to_string(),
            &WARMUP.to_string(),
        ])
        .output()
        .expect("python runs");
    if !out.status.success() {
        println!(
            "baseline failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    let mut ms: Vec<f64> = v["ms"]
        .as_array()?
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    Some(median(&mut ms))
}

#[tokio::main]
async fn main() {
    let root = tempfile::tempdir().expect("temp");
    let base: PathBuf = root.path().canonicalize().expect("real");
    let work = base.join("work");
    std::fs::create_dir_all(&work).expect("folder");
    let host = HostBuilder::new()
        .agent(agent(&base.join("store"), &work))
        .path(work.clone())
        .delta_window(Duration::ZERO)
        .build()
        .expect("host");
    let server = host.serve_ws(WsConfig::loopback(0)).await.expect("listens");
    let url = format!("ws://{}", server.local_addr());

    // Memory per session, measured first so no freed memory of the other phase hides it: each with its own child and one finished turn. The client in this
    // process preallocates a ring per subscription, so it watches one session at a time, with
    // a small ring, to leave only the host's share to measure.
    let m = client(&url, 16).await;
    let mut mevents = m.events();
    let before = rss_kib();
    for i in 0..SESSIONS {
        let session = format!("fake:/memory-{i}");
        let chat = open(&m, &session, &work).await;
        turn(&m, &mut mevents, &chat, &format!("m{i}")).await;
        m.unsubscribe(chat).await.expect("unsubscribe");
        m.unsubscribe(session).await.expect("unsubscribe");
    }
    let after = rss_kib();
    let per = (after.saturating_sub(before)) as f64 / SESSIONS as f64;
    println!(
        "host memory per ACP session, agent processes apart (over {SESSIONS}): {:.0} KiB = {:.2} MiB (goal ≤ 2 MiB)",
        per,
        per / 1024.0
    );
    // Latency per turn through the host.
    let c = client(&url, 8192).await;
    let mut events = c.events();
    let chat = open(&c, "fake:/latency", &work).await;
    let mut ms = Vec::new();
    for i in 0..WARMUP + TURNS {
        let started = Instant::now();
        turn(&c, &mut events, &chat, &format!("t{i}")).await;
        if i >= WARMUP {
            ms.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    let hosted = median(&mut ms);
    println!("turn through the host (median of {TURNS}): {hosted:.3} ms");
    match baseline(&work) {
        Some(direct) => println!(
            "turn through the Python SDK directly (median of {TURNS}): {direct:.3} ms; added by the host: {:.3} ms per turn (goal ≤ 5 ms), ratio {:.2}",
            hosted - direct,
            hosted / direct
        ),
        None => println!("no baseline: added latency not computed"),
    }

    host.shutdown();
    host.closed().await;
}
