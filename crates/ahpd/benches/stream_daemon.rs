//! `stream_daemon`: the release daemon in its own process, 100 sessions each streaming one
//! 2,000-chunk answer (about 16 KB of text) at once, read by the official `ahp` + `ahp-ws`
//! client in this process, one connection per session. The model is the scripted SSE endpoint
//! from `testkit`.
//!
//! Baseline: 100 concurrent plain HTTP clients reading the same 100 streams from the same
//! endpoint. Prints the daemon's private memory (`RssAnon` from `/proc/<pid>/status`) idle,
//! with the sessions open, at its peak while the answers stream and once every turn has ended,
//! the CPU it used, and the wall time against the mean of the baseline passes run just before
//! and just after it, as ratios. Every session's deltas, joined in arrival
//! order, must equal its script, and every turn must end with one `turnComplete`.
//!
//! Run with `cargo bench -p ahpd --bench stream_daemon`. The daemon runs with its default
//! configuration (a 75 ms delta window), then again with `--delta-window-ms 0` (one frame per
//! chunk). `AHPD_BENCH_SESSIONS` changes the number of sessions for a quick look.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ahp::{Client, ClientConfig, SubscriptionEvent};
use ahp_types::actions::StateAction;
use ahp_ws::WebSocketTransport;
use serde_json::json;
use testkit::{Endpoint, Frame, RecordedRequest, Reply, chunk};

const CHUNKS: usize = 2000;
/// How long the daemon is left alone after the last turn before its memory is read again:
/// long enough for the runtime's idle file-system threads (kept 10 s) to end.
const SETTLE: Duration = Duration::from_secs(12);

fn sessions() -> usize {
    std::env::var("AHPD_BENCH_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

fn answer(i: usize) -> Vec<String> {
    (0..CHUNKS).map(|j| format!("s{i}t{j} ")).collect()
}

fn endpoint(n: usize) -> Endpoint {
    let scripts: Arc<Vec<Vec<String>>> = Arc::new((0..n).map(answer).collect());
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

/// Private memory of a process in KiB: `RssAnon` (heap, stacks, relocated data).
fn private_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// CPU time a process has used, user and system, in seconds (`/proc/<pid>/stat` fields 14
/// and 15, in clock ticks of 1/100 s).
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name may hold spaces; the fields after it are counted from its `)`.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (ticks(11) + ticks(12)) as f64 / 100.0
}

fn threads(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Reads a process's private memory every 2 ms on its own thread and keeps the highest.
struct Sampler {
    peak: Arc<AtomicU64>,
    peak_threads: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let peak = Arc::new(AtomicU64::new(0));
        let peak_threads = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (peak, peak_threads, stop) = (peak.clone(), peak_threads.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(private_kib(pid), Ordering::Relaxed);
                    peak_threads.fetch_max(threads(pid), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        };
        Sampler {
            peak,
            peak_threads,
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        (
            self.peak.load(Ordering::Relaxed),
            self.peak_threads.load(Ordering::Relaxed),
        )
    }
}

struct Daemon {
    child: Child,
    url: String,
    _root: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_daemon(ep: &Endpoint, extra: &[&str]) -> (Daemon, PathBuf) {
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
    let mut child = Command::new(env!("CARGO_BIN_EXE_ahpd"))
        .args(["--port", "0", "--path"])
        .arg(&work)
        .args(extra)
        .env_clear()
        .env("HOME", root.path().join("home"))
        .env("XDG_CONFIG_HOME", root.path().join("xdg"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .current_dir(&work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("ahpd listening on ")
        .unwrap_or_else(|| panic!("no listening line: {line:?}"))
        .to_owned();
    (
        Daemon {
            child,
            url,
            _root: root,
        },
        work,
    )
}

async fn baseline(ep: &Endpoint, n: usize) -> Duration {
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..n {
        let http = http.clone();
        let url = ep.chat_url();
        tasks.push(tokio::spawn(async move {
            let body = json!({ "model": "m", "stream": true, "messages": [{ "role": "user", "content": format!("session number {i}.") }] });
            let text = http
                .post(url)
                .json(&body)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            assert!(text.contains(&format!("s{i}t{} ", CHUNKS - 1)));
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    started.elapsed()
}

/// One client connection with its session created and its chat subscribed.
struct Seat {
    client: Client,
    chat: String,
}

async fn seat(url: &str, work: &Path, i: usize) -> Seat {
    let transport = WebSocketTransport::connect(url).await.unwrap();
    let client = Client::connect(
        transport,
        ClientConfig {
            default_request_timeout: Some(Duration::from_secs(300)),
            // Room for a whole answer's frames even if this task is not scheduled for a while
            // (every slot is allocated up front, in this process).
            subscription_buffer: CHUNKS + 512,
        },
    )
    .await
    .unwrap();
    client
        .initialize(format!("bench-{i}"), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let session = format!("cofold:/stream-{i}");
    let folder = format!("file://{}", work.display());
    let _: serde_json::Value = client
        .request(
            "createSession",
            json!({ "channel": session, "workingDirectories": [folder] }),
        )
        .await
        .unwrap();
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    let _: serde_json::Value = client
        .request("subscribe", json!({ "channel": chat }))
        .await
        .unwrap();
    Seat { client, chat }
}

/// Starts the turn and reads until it completes; returns the text of its deltas and how many
/// delta frames carried it.
async fn stream(seat: Seat, i: usize) -> (String, usize) {
    let mut events = seat.client.events();
    let turn: StateAction = serde_json::from_value(json!({
        "type": "chat/turnStarted", "turnId": "t1", "startedAt": ahpd_sdk::util::now_iso(),
        "message": { "text": format!("session number {i}."), "origin": { "kind": "user" } }
    }))
    .unwrap();
    seat.client.dispatch(seat.chat.clone(), turn).await.unwrap();
    let mut text = String::new();
    let mut frames = 0;
    let mut last = String::from("nothing");
    loop {
        // A lost end of turn shows as this panic, naming what the session got, not as a hang.
        let ev = match tokio::time::timeout(Duration::from_secs(60), events.recv()).await {
            Ok(ev) => ev.expect("event"),
            Err(_) => panic!(
                "session {i}: nothing for 60 s after {frames} delta frames ({} bytes of text); \
                 the last action was {last}",
                text.len()
            ),
        };
        let SubscriptionEvent::Action(env) = ev.event else {
            last = "a non-action event".into();
            continue;
        };
        if env.channel != seat.chat {
            continue;
        }
        last = format!("{:?}", env.action).chars().take(200).collect();
        match env.action {
            StateAction::ChatDelta(d) => {
                frames += 1;
                text.push_str(&d.content);
            }
            StateAction::ChatTurnComplete(_) => break,
            StateAction::ChatError(e) => panic!("session {i} failed: {}", e.part.error.message),
            _ => {}
        }
    }
    (text, frames)
}

struct Figures {
    idle: u64,
    open: u64,
    peak: u64,
    peak_threads: u64,
    ended: u64,
    settled: u64,
    took: Duration,
    frames: usize,
    /// CPU seconds the daemon used while the answers streamed.
    daemon_cpu: f64,
    /// CPU seconds this process (the endpoint and the clients) used meanwhile.
    own_cpu: f64,
}

async fn through_daemon(ep: &Endpoint, n: usize, extra: &[&str]) -> Figures {
    let (daemon, work) = start_daemon(ep, extra);
    let pid = daemon.child.id();
    let idle = private_kib(pid);
    let mut seats = Vec::new();
    for i in 0..n {
        seats.push(seat(&daemon.url, &work, i).await);
    }
    let open = private_kib(pid);
    let sampler = Sampler::start(pid);
    let (daemon_cpu, own_cpu) = (cpu_seconds(&pid.to_string()), cpu_seconds("self"));
    let started = Instant::now();
    let tasks: Vec<_> = seats
        .into_iter()
        .enumerate()
        .map(|(i, s)| tokio::spawn(stream(s, i)))
        .collect();
    let mut frames = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        let (text, f) = t.await.unwrap();
        assert_eq!(text, answer(i).concat(), "session {i}");
        frames += f;
    }
    let took = started.elapsed();
    let daemon_cpu = cpu_seconds(&pid.to_string()) - daemon_cpu;
    let own_cpu = cpu_seconds("self") - own_cpu;
    let ended = private_kib(pid);
    let (peak, peak_threads) = sampler.finish();
    tokio::time::sleep(SETTLE).await;
    let settled = private_kib(pid);
    drop(daemon);
    Figures {
        idle,
        open,
        peak: peak.max(ended),
        peak_threads,
        ended,
        settled,
        took,
        frames,
        daemon_cpu,
        own_cpu,
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

fn report(label: &str, f: &Figures, base: Duration, n: usize) {
    let per = |from: u64, to: u64| to.saturating_sub(from) as f64 / 1024.0 / n as f64;
    println!("{label}");
    println!("  private memory idle:                  {}", mib(f.idle));
    println!("  with {n} sessions open:              {}", mib(f.open));
    println!(
        "  peak while streaming:                 {}  ({:.2} MiB a session above open, {:.2} above idle; goal ≤ 0.95 MiB: {})",
        mib(f.peak),
        per(f.open, f.peak),
        per(f.idle, f.peak),
        if per(f.open, f.peak) <= 0.95 {
            "met"
        } else {
            "missed"
        }
    );
    println!("  threads at the peak:                  {}", f.peak_threads);
    println!(
        "  when the last turn ended:             {}  ({:.2}× the open figure)",
        mib(f.ended),
        f.ended as f64 / f.open.max(1) as f64
    );
    println!(
        "  {} s later:                           {}  ({:.2}× the open figure, {:.3} MiB a session above it)",
        SETTLE.as_secs(),
        mib(f.settled),
        f.settled as f64 / f.open.max(1) as f64,
        per(f.open, f.settled)
    );
    let ratio = f.took.as_secs_f64() / base.as_secs_f64();
    println!(
        "  wall time: {:.1} ms, {:.2}× the plain HTTP clients' mean on either side (goal ≤ 1.5×: {})",
        f.took.as_secs_f64() * 1e3,
        ratio,
        if ratio <= 1.5 { "met" } else { "missed" }
    );
    println!(
        "  CPU while streaming: daemon {:.2} s ({:.1} µs a chunk), endpoint and clients {:.2} s",
        f.daemon_cpu,
        f.daemon_cpu * 1e6 / (n * CHUNKS) as f64,
        f.own_cpu
    );
    println!(
        "  delta frames received: {} ({:.1} a session; {} chunks each were streamed)",
        f.frames,
        f.frames as f64 / n as f64,
        CHUNKS
    );
}

fn main() {
    let n = sessions();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let ep = endpoint(n);
        // One unmeasured pass warms the endpoint's and the client's connection paths.
        baseline(&ep, n).await;
        let base_cpu = cpu_seconds("self");
        let before = baseline(&ep, n).await;
        let base_cpu = cpu_seconds("self") - base_cpu;
        let default = through_daemon(&ep, n, &[]).await;
        let between = baseline(&ep, n).await;
        let unmerged = through_daemon(&ep, n, &["--delta-window-ms", "0"]).await;
        let after = baseline(&ep, n).await;
        // Each daemon pass is judged against the plain clients' passes on either side of it,
        // so a change in the machine's other load during the run weighs on both sides.
        let around = |a: Duration, b: Duration| (a + b) / 2;
        println!("stream_daemon: {n} sessions × {CHUNKS} chunks, daemon in its own process");
        println!(
            "  baseline (plain HTTP clients): {:.1} ms, {:.1} ms and {:.1} ms, before, between and after the daemon's passes",
            before.as_secs_f64() * 1e3,
            between.as_secs_f64() * 1e3,
            after.as_secs_f64() * 1e3
        );
        println!("  CPU of the first baseline (endpoint and plain clients): {base_cpu:.2} s");
        report(
            "daemon, default configuration (75 ms delta window)",
            &default,
            around(before, between),
            n,
        );
        report(
            "daemon, --delta-window-ms 0",
            &unmerged,
            around(between, after),
            n,
        );
        println!("  every session's deltas equal its script, every turn completed: yes");
    });
}
