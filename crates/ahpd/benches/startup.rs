//! Startup and idle memory of `ahpd`, next to a bare Node.js process and `ahpd --version`.
//!
//! Measures, for the daemon with the echo plugin on a free loopback port: the time from spawn to
//! the answer of `initialize` over a real WebSocket (official `ahp` client), and the resident
//! memory after 5 s idle (again at 10 s). The baselines, spawned the same way in the same run:
//! `node -e` with a timer (time to its first line on standard output, and its resident memory
//! at the same moments) and `ahpd --version` (spawn to exit: what loading the binary costs).
//!
//! Run with `cargo bench -p ahpd --bench startup`: that measures the binary `cargo bench`
//! builds, with the `bench` profile. To measure another build, name it:
//! `cargo build --release -p ahpd --features test-plugins` (the README's build, plus the echo
//! plugin the benchmark talks to), then
//! `AHPD_BENCH_BIN=target/release/ahpd AHPD_BENCH_PROFILE=release cargo bench -p ahpd --bench
//! startup`. (`cargo bench` writes its own binary to the same path, so copy the release one
//! elsewhere first.) The first line printed names the binary and its profile.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ahp::client::{Client, ClientConfig};

const RUNS: usize = 30;
const IDLE: Duration = Duration::from_secs(5);
const IDLE_LATER: Duration = Duration::from_secs(10);
const NODE_SCRIPT: &str = "console.log('ready'); setInterval(() => {}, 1000)";

/// The binary measured and the profile it was built with.
fn measured() -> (String, String) {
    match std::env::var("AHPD_BENCH_BIN") {
        Ok(bin) => {
            let profile = std::env::var("AHPD_BENCH_PROFILE")
                .unwrap_or_else(|_| "not stated (set AHPD_BENCH_PROFILE)".to_owned());
            (bin, profile)
        }
        Err(_) => (
            env!("CARGO_BIN_EXE_ahpd").to_owned(),
            "bench (opt-level 3, as Cargo.toml's [profile.bench] says)".to_owned(),
        ),
    }
}

fn ahpd(config: &std::path::Path) -> Command {
    let mut c = Command::new(measured().0);
    c.args(["--plugin", "@ahpd/agent-echo", "--port", "0"])
        .env("HOME", config)
        .env("XDG_CONFIG_HOME", config)
        .env_remove("AHPD_CONFIG")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    c
}

fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim().to_owned()
}

/// Resident memory in KiB: total (`VmRSS`), private anonymous memory (`RssAnon`: heap, stacks,
/// relocated data) and file pages (`RssFile`: the executable's and libraries' code and read-only
/// data mapped from the page cache, shared with any other process mapping the same file).
struct Rss {
    total: u64,
    anon: u64,
    file: u64,
}

fn rss_kib(pid: u32) -> Rss {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap()
    };
    Rss {
        total: field("VmRSS:"),
        anon: field("RssAnon:"),
        file: field("RssFile:"),
    }
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Spawn → `initialize` answered, once.
fn ahpd_startup(rt: &tokio::runtime::Runtime, config: &std::path::Path) -> (Duration, Duration) {
    let started = Instant::now();
    let mut child = ahpd(config).spawn().unwrap();
    let line = first_line(&mut child);
    let listening = started.elapsed();
    let address = line.strip_prefix("ahpd listening on ").unwrap().to_owned();
    rt.block_on(async {
        let transport = ahp_ws::WebSocketTransport::connect(&address).await.unwrap();
        let client = Client::connect(transport, ClientConfig::default())
            .await
            .unwrap();
        client
            .initialize("bench".into(), vec!["1.0.0".into()], Vec::new())
            .await
            .unwrap();
    });
    let answered = started.elapsed();
    stop(child);
    (listening, answered)
}

fn node_startup() -> Option<Duration> {
    let started = Instant::now();
    let mut child = Command::new("node")
        .args(["-e", NODE_SCRIPT])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let line = first_line(&mut child);
    let took = started.elapsed();
    stop(child);
    (line == "ready").then_some(took)
}

/// Spawn → exit of `ahpd --version`, once.
fn version_startup() -> Duration {
    let started = Instant::now();
    let status = Command::new(measured().0)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let took = started.elapsed();
    assert!(status.success(), "ahpd --version failed: {status}");
    took
}

fn stats(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p90 = v[(v.len() * 9 / 10).min(v.len() - 1)];
    (ms(v[0]), ms(v[v.len() / 2]), ms(p90))
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not used by this benchmark.
    let (bin, profile) = measured();
    println!("measuring {bin}, profile {profile}");
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // One warm-up run writes the default record, as a user's second start would find it.
    ahpd_startup(&rt, dir.path());

    let mut listen = Vec::new();
    let mut answered = Vec::new();
    for _ in 0..RUNS {
        let (l, a) = ahpd_startup(&rt, dir.path());
        listen.push(l);
        answered.push(a);
    }
    let version_times: Vec<Duration> = (0..RUNS).map(|_| version_startup()).collect();
    let node_available = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let node_times: Vec<Duration> = if node_available {
        (0..RUNS).filter_map(|_| node_startup()).collect()
    } else {
        Vec::new()
    };

    // Idle memory: both processes started together, measured after the same 5 s.
    let mut daemon = ahpd(dir.path()).spawn().unwrap();
    first_line(&mut daemon);
    let node = if node_available {
        let mut n = Command::new("node")
            .args(["-e", NODE_SCRIPT])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        first_line(&mut n);
        Some(n)
    } else {
        None
    };
    std::thread::sleep(IDLE);
    let daemon_rss = rss_kib(daemon.id());
    let node_rss = node.as_ref().map(|n| rss_kib(n.id()));
    // The host's design reads the same figure at 10 s.
    std::thread::sleep(IDLE_LATER - IDLE);
    let daemon_later = rss_kib(daemon.id());
    let node_later = node.as_ref().map(|n| rss_kib(n.id()));
    stop(daemon);
    if let Some(n) = node {
        stop(n);
    }

    let (lmin, lmed, lp90) = stats(listen);
    let (amin, amed, ap90) = stats(answered);
    println!("startup ({RUNS} runs, ms)            min      median   p90");
    println!("ahpd spawn -> listening line     {lmin:8.2} {lmed:8.2} {lp90:8.2}");
    println!("ahpd spawn -> initialize answer  {amin:8.2} {amed:8.2} {ap90:8.2}");
    let (vmin, vmed, vp90) = stats(version_times);
    println!("ahpd --version spawn -> exit     {vmin:8.2} {vmed:8.2} {vp90:8.2}");
    println!(
        "ratio ahpd initialize / ahpd --version (median): {:.2}",
        amed / vmed
    );
    if node_times.is_empty() {
        println!("node: not found on PATH; the Node.js baseline column is skipped");
    } else {
        let (nmin, nmed, np90) = stats(node_times);
        println!("node spawn -> first line         {nmin:8.2} {nmed:8.2} {np90:8.2}");
        println!(
            "ratio ahpd initialize / node first line (median): {:.2}",
            amed / nmed
        );
    }
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!(
        "idle RSS after {} s (MiB)            total   private  file-backed",
        IDLE.as_secs()
    );
    let row = |name: &str, r: &Rss| {
        println!(
            "{name:<34} {:7.2} {:8.2} {:8.2}",
            mib(r.total),
            mib(r.anon),
            mib(r.file)
        );
    };
    row("ahpd (echo plugin, no connection)", &daemon_rss);
    match node_rss {
        Some(n) => {
            row("node -e with a timer", &n);
            println!(
                "ratio ahpd / node: total {:.2}, private {:.2}",
                daemon_rss.total as f64 / n.total as f64,
                daemon_rss.anon as f64 / n.anon as f64
            );
        }
        None => println!("node: not found on PATH; the Node.js baseline column is skipped"),
    }
    println!("idle RSS after {} s (MiB)", IDLE_LATER.as_secs());
    row("ahpd (echo plugin, no connection)", &daemon_later);
    if let Some(n) = node_later {
        row("node -e with a timer", &n);
        println!(
            "ratio ahpd / node: total {:.2}",
            daemon_later.total as f64 / n.total as f64
        );
    }
}
