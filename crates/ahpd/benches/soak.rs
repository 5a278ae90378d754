//! `soak`: the release daemon in its own process, serving the cofold engine (its file store,
//! the daemon's session store, a scripted loopback model) for many sessions in a row. Each
//! session is created by one client, given one turn (a 40-chunk streamed answer), left by it,
//! then browsed by a second client (subscribed, its snapshot checked, unsubscribed) and left
//! again, so the daemon unloads it in its own time (the default cap of 64 unused sessions,
//! least recently used first).
//!
//! Prints the daemon's memory (`VmRSS` and the private `RssAnon`, from `/proc/<pid>/status`)
//! once the first 1,000 sessions are done and at the end, with the ratio (goal: end ≤ 1.5× the
//! first). The two clients and the scripted endpoint run in this process, so none of their
//! memory is counted; this process's own figures are printed beside for comparison. The replay
//! ring's bytes must never pass its bound: the daemon logs (at `debug`, target
//! `ahpd_sdk::channels::ring`) every new high of the ring's length or weight, and this bench
//! reads those lines from its standard error and checks each.
//!
//! Run with `cargo bench -p ahpd --bench soak`. `AHPD_SOAK_SESSIONS` (default 10,000) and
//! `AHPD_SOAK_PARALLEL` (sessions in flight at once, default 4) scale it. The daemon gets this
//! process's `MALLOC_*` and `GLIBC_TUNABLES` variables (to try the allocator's settings), and
//! `AHPD_SOAK_WRAP` (a command and its arguments, split at spaces, e.g. `heaptrack -o
//! /tmp/soak`) runs it under another program; the figures are still read from the daemon's
//! own process (which a profiler makes bigger).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ahp::{Client, ClientConfig, SubscriptionEvent};
use ahp_types::actions::StateAction;
use ahp_types::state::SnapshotState;
use ahp_ws::WebSocketTransport;
use serde_json::{Value, json};
use testkit::{Endpoint, Frame, Reply, chunk};

const CHUNKS: usize = 40;
const FIRST: usize = 1000;
/// The daemon's default bound on the replay ring's weight (`HostOptions::replay_bytes`).
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

/// `VmRSS` and `RssAnon` of a process, in KiB.
fn memory(pid: &str) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
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

/// What the daemon's log lines told: sessions created, opened and unloaded, and the replay
/// ring's highest length and weight.
#[derive(Default)]
struct Told {
    created: AtomicUsize,
    opened: AtomicUsize,
    unloaded: AtomicUsize,
    ring_len: AtomicUsize,
    ring_bytes: AtomicUsize,
}

fn field(line: &str, name: &str) -> Option<usize> {
    let at = line.find(&format!(" {name}="))? + name.len() + 2;
    line[at..]
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

impl Told {
    fn read(&self, line: &str) {
        if line.contains("replay ring at a new high") {
            if let Some(n) = field(line, "envelopes") {
                self.ring_len.fetch_max(n, Ordering::Relaxed);
            }
            if let Some(n) = field(line, "bytes") {
                self.ring_bytes.fetch_max(n, Ordering::Relaxed);
            }
        } else if line.contains("session created") {
            self.created.fetch_add(1, Ordering::Relaxed);
        } else if line.contains("session opened from the store") {
            self.opened.fetch_add(1, Ordering::Relaxed);
        } else if line.contains("session unloaded") {
            self.unloaded.fetch_add(1, Ordering::Relaxed);
        } else if !line.contains(" INFO ") {
            eprintln!("daemon: {line}");
        }
    }
}

struct Daemon {
    child: Child,
    /// The daemon's own process: the child, or under `AHPD_SOAK_WRAP` the `ahpd` below it.
    pid: u32,
    url: String,
    told: Arc<Told>,
    log_reader: Option<std::thread::JoinHandle<()>>,
    _root: tempfile::TempDir,
}

impl Daemon {
    /// Stops the daemon (SIGTERM, its graceful stop, so a wrapping profiler sees it exit) and
    /// waits until every line it logged has been read.
    fn finish(mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let _ = self.child.wait();
        if let Some(reader) = self.log_reader.take() {
            reader.join().unwrap();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `ahpd` process at or below `top` (a wrapping program runs it as its child).
fn daemon_pid(top: u32) -> u32 {
    let mut queue = std::collections::VecDeque::from([top]);
    while let Some(pid) = queue.pop_front() {
        let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
        if exe.file_name().is_some_and(|n| n == "ahpd") {
            return pid;
        }
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        queue.extend(
            children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
    }
    top
}

fn start_daemon(ep: &Endpoint) -> (Daemon, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    for d in ["home", "xdg/ahpd", "work"] {
        std::fs::create_dir_all(root.path().join(d)).unwrap();
    }
    let config = json!({
        "plugins": [{
            "name": "@ahpd/agent-cofold",
            "options": { "baseUrl": ep.base_url(), "model": "m" }
        }]
    });
    std::fs::write(root.path().join("xdg/ahpd/config.json"), config.to_string()).unwrap();
    let work = root.path().join("work");
    let wrap = std::env::var("AHPD_SOAK_WRAP").unwrap_or_default();
    let mut argv: Vec<String> = wrap.split_whitespace().map(str::to_owned).collect();
    argv.push(env!("CARGO_BIN_EXE_ahpd").to_owned());
    let mut command = Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .args(["--port", "0", "--path"])
        .arg(&work)
        .env_clear()
        .env("HOME", root.path().join("home"))
        .env("XDG_CONFIG_HOME", root.path().join("xdg"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env(
            "RUST_LOG",
            "warn,ahpd_sdk::channels::ring=debug,ahpd_sdk::session::open=info,ahpd_sdk::session::unload=info",
        )
        .current_dir(&work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in std::env::vars_os() {
        let name_text = name.to_string_lossy();
        if name_text.starts_with("MALLOC_") || name_text == "GLIBC_TUNABLES" {
            command.env(&name, value);
        }
    }
    let mut child = command.spawn().unwrap();
    let told = Arc::new(Told::default());
    let log_reader = {
        let (told, stderr) = (told.clone(), child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                told.read(&line);
            }
        })
    };
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    // A wrapping program may print lines of its own first.
    let url = loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "no listening line"
        );
        if let Some(url) = line.trim().strip_prefix("ahpd listening on ") {
            break url.to_owned();
        }
    };
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let pid = daemon_pid(child.id());
    (
        Daemon {
            pid,
            child,
            url,
            told,
            log_reader: Some(log_reader),
            _root: root,
        },
        work,
    )
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
        json!({ "channel": session, "workingDirectories": [format!("file://{}", work.display())] }),
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

/// The figures read once the first 1,000 sessions were done, and at the end.
struct Reading {
    daemon: (u64, u64),
    bench: (u64, u64),
    at: Duration,
}

fn reading(pid: &str, started: Instant) -> Reading {
    Reading {
        daemon: memory(pid),
        bench: memory("self"),
        at: started.elapsed(),
    }
}

/// Reads what the log told of the ring so far and checks it against the bound.
fn check_ring(told: &Told) {
    let bytes = told.ring_bytes.load(Ordering::Relaxed);
    assert!(bytes <= RING_BYTES, "the replay ring held {bytes} bytes");
}

fn report(total: usize, parallel: usize, first: &Reading, end: &Reading, told: &Told) {
    println!(
        "soak: {total} sessions ({parallel} at a time), each created, given a {CHUNKS}-chunk turn, browsed by a second client and left; the daemon in its own process"
    );
    for (name, r) in [
        (format!("after the first {}:", FIRST.min(total)), first),
        ("at the end:".to_owned(), end),
    ] {
        println!(
            "  {name:<24} daemon RSS {} (private {}); bench process RSS {} (private {}); {:.1} s",
            mib(r.daemon.0),
            mib(r.daemon.1),
            mib(r.bench.0),
            mib(r.bench.1),
            r.at.as_secs_f64()
        );
    }
    let ratio = end.daemon.0 as f64 / first.daemon.0.max(1) as f64;
    let per_session = (end.daemon.1 as f64 - first.daemon.1 as f64) * 1024.0
        / (total.saturating_sub(FIRST).max(1)) as f64;
    println!(
        "  daemon end/first: RSS {:.2}×, private {:.2}× (goal ≤ 1.5×: {}); private growth {:.0} bytes a session after the first {}",
        ratio,
        end.daemon.1 as f64 / first.daemon.1.max(1) as f64,
        if ratio <= 1.5 { "met" } else { "missed" },
        per_session,
        FIRST.min(total)
    );
    println!(
        "  replay ring: at most {} envelopes and {} bytes seen, bound {} bytes: never over",
        told.ring_len.load(Ordering::Relaxed),
        told.ring_bytes.load(Ordering::Relaxed),
        RING_BYTES
    );
    let (created, opened, unloaded) = (
        told.created.load(Ordering::Relaxed),
        told.opened.load(Ordering::Relaxed),
        told.unloaded.load(Ordering::Relaxed),
    );
    println!(
        "  sessions: {created} created, {opened} opened from the store, {unloaded} unloaded; {} still loaded at the end",
        (created + opened).saturating_sub(unloaded)
    );
}

fn main() {
    let total = setting("AHPD_SOAK_SESSIONS", 10_000);
    let parallel = setting("AHPD_SOAK_PARALLEL", 4).max(1);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let ep = Arc::new(endpoint());
        let (daemon, work) = start_daemon(&ep);
        let pid = daemon.pid.to_string();
        let maker = Arc::new(connect(&daemon.url, "maker").await);
        let browser = Arc::new(connect(&daemon.url, "browser").await);
        let told = daemon.told.clone();

        let next = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let (first_tx, first_rx) = tokio::sync::oneshot::channel::<Reading>();
        let first_tx = Arc::new(std::sync::Mutex::new(Some(first_tx)));
        let started = Instant::now();
        let mut lanes = Vec::new();
        for _ in 0..parallel {
            let (maker, browser, work) = (maker.clone(), browser.clone(), work.clone());
            let (next, done, ep, told) = (next.clone(), done.clone(), ep.clone(), told.clone());
            let (first_tx, pid) = (first_tx.clone(), pid.clone());
            lanes.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    one_session(&maker, &browser, &work, i).await;
                    ep.forget_requests();
                    check_ring(&told);
                    if done.fetch_add(1, Ordering::Relaxed) + 1 == FIRST.min(total)
                        && let Some(tx) = first_tx.lock().unwrap().take()
                    {
                        let _ = tx.send(reading(&pid, started));
                    }
                }
            }));
        }
        for lane in lanes {
            lane.await.unwrap();
        }
        let end = reading(&pid, started);
        let first = first_rx.await.unwrap();
        drop((maker, browser));
        daemon.finish();
        check_ring(&told);
        report(total, parallel, &first, &end, &told);
    });
}
