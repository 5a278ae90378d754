//! Sessions in a machine on a real engine: how long a session takes to be ready with a new
//! machine and with a running one, and the memory of an idle inner host, each beside a
//! baseline measured in the same run. Skipped (with a line) where no engine answers.
//!
//! `cargo bench -p ahpd --bench machines` (release build). `AHPD_BENCH_SAMPLES` sets the
//! number of warm samples (default 10; cold ones are half as many). `nested_turn_overhead` runs
//! first and everywhere, on `testkit::FakeEngine` (the inner host a real process of this build);
//! `AHPD_BENCH_TURNS` sets its turns per session (default 1,000). Every container and volume the
//! bench's daemon made on the real engine is removed at the end.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ahp::client::{Client, ClientConfig};
use ahp_ws::WebSocketTransport;
use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, RemoveContainerOptions,
};
use futures::StreamExt;
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_ahpd");

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// A process's resident memory, in MB: `VmRSS` and its parts from `/proc/<pid>/status`, and
/// `Pss` from `smaps_rollup` (each shared page counted as its share among the processes that
/// map it, so the sum over processes is what they hold together).
#[derive(Clone, Copy, Default)]
struct Mem {
    total: f64,
    anon: f64,
    file: f64,
    shmem: f64,
    pss: f64,
}

/// One of [`Mem`]'s figures.
type Part = fn(&Mem) -> f64;

fn field_mb(text: &str, key: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0) as f64
        / 1024.0
}

fn mem(pid: u32) -> Mem {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    Mem {
        total: field_mb(&status, "VmRSS:"),
        anon: field_mb(&status, "RssAnon:"),
        file: field_mb(&status, "RssFile:"),
        shmem: field_mb(&status, "RssShmem:"),
        pss: field_mb(&rollup, "Pss:"),
    }
}

/// Host processes that are inner hosts (`/opt/ahpd/bin/<build> --stdio`).
fn inner_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            let argv = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let argv = String::from_utf8_lossy(&argv);
            argv.starts_with("/opt/ahpd/bin/") && argv.contains("--stdio")
        })
        .collect()
}

async fn image(docker: &Docker) -> String {
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let busybox = testkit::images::busybox(&cache).unwrap();
    let fs = testkit::images::glibc_rootfs(&busybox, Path::new(BIN)).unwrap();
    let name = format!("ahpd-test/glibc:{}", fs.tag);
    if docker.inspect_image(&name).await.is_err() {
        let mut s = docker.create_image(
            Some(CreateImageOptions {
                from_src: Some("-".into()),
                repo: Some("ahpd-test/glibc".into()),
                tag: Some(fs.tag.clone()),
                changes: vec!["ENV PATH=/usr/local/bin:/usr/bin:/bin".into()],
                ..Default::default()
            }),
            Some(bollard::body_full(fs.tar.into())),
            None,
        );
        while let Some(step) = s.next().await {
            step.unwrap();
        }
    }
    name
}

struct Daemon {
    child: Child,
    address: String,
    dir: tempfile::TempDir,
}

impl Daemon {
    fn host_id(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("xdg/ahpd/host-id"))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    /// SIGTERM and wait, as a person's stop.
    fn stop(&mut self) {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let _ = self.child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn daemon(image: &str, endpoint: &str) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    spawn(dir, image, endpoint)
}

/// Starts the daemon in `dir` (configuring it first when it has no configuration yet).
fn spawn(dir: tempfile::TempDir, image: &str, endpoint: &str) -> Daemon {
    let xdg = dir.path().join("xdg");
    std::fs::create_dir_all(xdg.join("ahpd")).unwrap();
    std::fs::create_dir_all(xdg.join("copapo")).unwrap();
    std::fs::write(xdg.join("copapo").join("config.json"), "{}").unwrap();
    std::fs::write(
        xdg.join("ahpd").join("config.json"),
        json!({ "plugins": [
            { "name": "@ahpd/agent-cofold", "options": { "memory": true } },
            { "name": "@ahpd/computer", "options": {
                "image": image, "pull": "never", "network": "host", "max": 40,
                "needs": { "cofoldBaseUrl": endpoint, "cofoldApiKey": "bench-key", "cofoldModel": "m1" },
                "profiles": { "cold": { "disposable": true, "disposableDelay": 0 } } } }
        ]})
        .to_string(),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["--port", "0", "--without-connection-token"])
        .env_clear()
        .env("HOME", dir.path())
        .env("XDG_CONFIG_HOME", &xdg)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line
        .trim()
        .strip_prefix("ahpd listening on ")
        .unwrap()
        .to_owned();
    Daemon {
        child,
        address,
        dir,
    }
}

async fn connect(address: &str) -> Client {
    let t = WebSocketTransport::connect(address).await.unwrap();
    let c = Client::connect(
        t,
        ClientConfig {
            subscription_buffer: 4096,
            ..ClientConfig::default()
        },
    )
    .await
    .unwrap();
    c.initialize("bench".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    c
}

async fn create(client: &Client, computer: &str) -> (String, Duration) {
    let uri = format!("cofold:/{}", uuid::Uuid::new_v4());
    let t = Instant::now();
    let r: Value = client
        .request(
            "createSession",
            json!({ "channel": uri, "provider": "cofold",
                    "config": { "computer": computer, "permissionMode": "bypassPermissions" } }),
        )
        .await
        .unwrap();
    let _ = r;
    (uri, t.elapsed())
}

async fn baseline_start(docker: &Docker, image: &str) -> Duration {
    let name = format!("ahpd-bench-{:08x}", fastrand::u32(..));
    let t = Instant::now();
    docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(name.clone()),
                ..Default::default()
            }),
            ContainerCreateBody {
                image: Some(image.into()),
                cmd: Some(vec!["sleep".into(), "600".into()]),
                host_config: Some(HostConfig {
                    network_mode: Some("host".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    docker.start_container(&name, None).await.unwrap();
    let d = t.elapsed();
    let _ = docker
        .remove_container(
            &name,
            Some(RemoveContainerOptions {
                force: true,
                ..Default::default()
            }),
        )
        .await;
    d
}

async fn baseline_exec(docker: &Docker, id: &str, build: &str) -> Duration {
    let t = Instant::now();
    let e = docker
        .create_exec(
            id,
            CreateExecOptions {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(vec![build.to_owned(), "--version".to_owned()]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    if let StartExecResults::Attached { mut output, .. } =
        docker.start_exec(&e.id, None).await.unwrap()
    {
        while output.next().await.is_some() {}
    }
    t.elapsed()
}

/// Starts a turn and waits for its first delta (ms to it), then for its end.
async fn first_delta(client: &Client, session: &str, turn: &str) -> Option<f64> {
    let chat = default_chat(session);
    let (_, mut sub) = client.subscribe(chat.clone()).await.ok()?;
    let t = Instant::now();
    client
        .notify(
            "dispatchAction",
            json!({ "channel": chat, "clientSeq": fastrand::u32(..), "action": {
                "type": "chat/turnStarted", "turnId": turn,
                "startedAt": jiff::Timestamp::now().to_string(),
                "message": { "text": "hello", "origin": { "kind": "user" } },
            }}),
        )
        .await
        .ok()?;
    let mut first = None;
    let ended = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(ev) = sub.recv().await {
            if let ahp::SubscriptionEvent::Action(env) = ev {
                let v = serde_json::to_value(&env.action).unwrap_or(Value::Null);
                if v["turnId"] != turn {
                    continue;
                }
                match v["type"].as_str() {
                    Some("chat/delta" | "chat/responsePart") if first.is_none() => {
                        first = Some(t.elapsed().as_secs_f64() * 1e3);
                    }
                    Some("chat/turnComplete") => return true,
                    Some("chat/error" | "chat/turnCancelled") => return false,
                    _ => {}
                }
            }
        }
        false
    })
    .await;
    match ended {
        Ok(true) => first,
        _ => None,
    }
}

/// Runs turns on a session whose chat `sub` follows and times each from its start to its
/// `chat/turnComplete`, in ms; `None` when one fails.
async fn turn_times(
    client: &Client,
    sub: &mut ahp::SessionSubscription,
    session: &str,
    label: &str,
    turns: usize,
) -> Option<Vec<f64>> {
    let chat = default_chat(session);
    let mut times = Vec::with_capacity(turns);
    for i in 0..turns {
        let turn = format!("{label}{i}");
        let t = Instant::now();
        client
            .notify(
                "dispatchAction",
                json!({ "channel": chat, "clientSeq": i, "action": {
                    "type": "chat/turnStarted", "turnId": turn,
                    "startedAt": jiff::Timestamp::now().to_string(),
                    "message": { "text": "one delta", "origin": { "kind": "user" } },
                }}),
            )
            .await
            .ok()?;
        let done = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(ev) = sub.recv().await {
                if let ahp::SubscriptionEvent::Action(env) = ev {
                    let v = serde_json::to_value(&env.action).unwrap_or(Value::Null);
                    if v["turnId"] != turn {
                        continue;
                    }
                    match v["type"].as_str() {
                        Some("chat/turnComplete") => return true,
                        Some("chat/error" | "chat/turnCancelled") => return false,
                        _ => {}
                    }
                }
            }
            false
        })
        .await;
        if done != Ok(true) {
            return None;
        }
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Some(times)
}

/// `nested_turn_overhead`: echo turns through the proxy to an inner host (a machine of
/// `testkit::FakeEngine`, whose execs are host processes of this build) against the same turns
/// on echo run on the host, by the same daemon, in one run.
async fn turn_overhead(turns: usize) {
    const IMAGE: &str = "ahpd-test/glibc:1";
    let engine = testkit::FakeEngine::start().unwrap();
    engine.image(testkit::FakeImage::new(IMAGE));
    let dir = tempfile::tempdir().unwrap();
    let (home, xdg) = (dir.path().join("home"), dir.path().join("xdg"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(xdg.join("ahpd")).unwrap();
    std::fs::write(
        xdg.join("ahpd").join("config.json"),
        json!({ "plugins": [
            "@ahpd/agent-echo",
            { "name": "@ahpd/computer", "options": {
                "engine": engine.uri(), "pull": "never", "image": IMAGE } }
        ]})
        .to_string(),
    )
    .unwrap();
    let mut child = Command::new(BIN)
        .args(["--port", "0", "--without-connection-token"])
        .env_clear()
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", &xdg)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .current_dir(&home)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let mut d = Daemon {
        address: line
            .trim()
            .strip_prefix("ahpd listening on ")
            .unwrap()
            .to_owned(),
        child,
        dir,
    };
    let client = connect(&d.address).await;
    let _: Value = client
        .request(
            "resourceWrite",
            json!({ "channel": "ahp-root://", "uri": "computer://box", "data": "{}",
                    "encoding": "utf-8", "createOnly": true }),
        )
        .await
        .unwrap();
    let mut sessions = Vec::new();
    for computer in ["", "computer://box"] {
        let uri = format!("echo:/{}", uuid::Uuid::new_v4());
        let _: Value = client
            .request(
                "createSession",
                json!({ "channel": uri, "provider": "echo", "config": { "computer": computer } }),
            )
            .await
            .unwrap();
        let (_, sub) = client.subscribe(default_chat(&uri)).await.unwrap();
        sessions.push((uri, sub));
    }
    // Alternating blocks of 100, so a change of load falls on both alike.
    let (mut host, mut nested) = (Vec::new(), Vec::new());
    let mut left = turns;
    let mut block = 0;
    while left > 0 {
        let n = left.min(100);
        for (k, (uri, sub)) in sessions.iter_mut().enumerate() {
            let label = format!("b{block}s{k}t");
            let Some(t) = turn_times(&client, sub, uri, &label, n).await else {
                println!("nested_turn_overhead skipped: a turn failed");
                d.stop();
                return;
            };
            if k == 0 {
                host.extend(t)
            } else {
                nested.extend(t)
            }
        }
        left -= n;
        block += 1;
    }
    drop(sessions);
    drop(client);
    d.stop();
    let (n, h) = (median(nested), median(host));
    row(
        "nested_turn_overhead",
        n,
        "ms",
        "echo on the host",
        h,
        &format!("   added per turn {:+.3} ms   median of {turns}", n - h),
    );
}

/// The default chat's URI of a session, as the daemon names it.
fn default_chat(session: &str) -> String {
    ahpd_sdk::util::default_chat_uri(session)
}

/// Removes every container and volume carrying the daemon's id.
async fn sweep(docker: &Docker, host_id: &str) {
    use bollard::query_parameters::{
        ListContainersOptions, ListVolumesOptions, RemoveVolumeOptions,
    };
    if host_id.is_empty() {
        return;
    }
    let mut filters = std::collections::HashMap::new();
    filters.insert("label".to_owned(), vec![format!("ahpd.host={host_id}")]);
    let list = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters.clone()),
            ..Default::default()
        }))
        .await
        .unwrap_or_default();
    for c in list.into_iter().filter_map(|c| c.id) {
        let _ = docker
            .remove_container(
                &c,
                Some(RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                }),
            )
            .await;
    }
    let vols = docker
        .list_volumes(Some(ListVolumesOptions {
            filters: Some(filters),
        }))
        .await
        .ok()
        .and_then(|v| v.volumes)
        .unwrap_or_default();
    for v in vols {
        let _ = docker
            .remove_volume(&v.name, Some(RemoveVolumeOptions { force: true }))
            .await;
    }
}

fn row(name: &str, value: f64, unit: &str, baseline_name: &str, baseline: f64, extra: &str) {
    println!(
        "{name:<20} {value:9.1} {unit}   baseline ({baseline_name}) {baseline:9.1} {unit}   ratio {:.2}x{extra}",
        value / baseline
    );
}

/// `nested_ready_cold`: disposable machines, each against create + start of the same image.
async fn ready_cold(docker: &Docker, client: &Client, image: &str, n: usize) {
    let mut cold = Vec::new();
    let mut base = Vec::new();
    for _ in 0..n {
        base.push(baseline_start(docker, image).await.as_secs_f64() * 1e3);
        let (uri, t) = create(client, "disposable:cold").await;
        cold.push(t.as_secs_f64() * 1e3);
        let _: Value = client
            .request("disposeSession", json!({ "channel": uri }))
            .await
            .unwrap();
    }
    let (c, b) = (median(cold), median(base));
    row(
        "nested_ready_cold",
        c,
        "ms",
        "create+start",
        b,
        &format!("   over baseline {:+.1} ms   median of {n}", c - b),
    );
}

/// `nested_ready_warm`: sessions in one running machine, against an exec of `--version`
/// there; the sessions stay open. The machine's id.
async fn ready_warm(docker: &Docker, client: &Client, n: usize) -> Vec<String> {
    let _: Value = client
        .request(
            "resourceWrite",
            json!({ "channel": "ahp-root://", "uri": "computer://benchbox", "data": "{}",
                    "encoding": "utf-8", "createOnly": true }),
        )
        .await
        .unwrap();
    let inspected = docker.inspect_container("benchbox", None).await.unwrap();
    let build = format!(
        "/opt/ahpd/bin/{}",
        inspected.config.unwrap().labels.unwrap()["ahpd.init"]
    );
    let mut warm = Vec::new();
    let mut base = Vec::new();
    let mut sessions = Vec::new();
    for _ in 0..n {
        base.push(
            baseline_exec(docker, "benchbox", &build)
                .await
                .as_secs_f64()
                * 1e3,
        );
        let (uri, t) = create(client, "computer://benchbox").await;
        warm.push(t.as_secs_f64() * 1e3);
        sessions.push(uri);
    }
    row(
        "nested_ready_warm",
        median(warm),
        "ms",
        "exec --version",
        median(base),
        &format!("   median of {n}"),
    );
    sessions
}

/// `inner_idle_rss`: the inner hosts now open (one session each, no turn), against the
/// outer daemon's idle memory read before any session; then the parts of both, and what the
/// inner hosts of one machine hold in all.
fn idle_rss(outer: Mem) {
    let inner: Vec<Mem> = inner_pids().iter().map(|p| mem(*p)).collect();
    if inner.is_empty() {
        println!("inner_idle_rss       skipped: no inner host process is visible from here");
        return;
    }
    let n = inner.len();
    let of = |f: Part| -> (f64, f64) {
        let v: Vec<f64> = inner.iter().map(f).collect();
        (median(v.clone()), v.iter().sum())
    };
    let (total, total_sum) = of(|m| m.total);
    row(
        "inner_idle_rss",
        total,
        "MB",
        "outer daemon idle",
        outer.total,
        &format!("   {n} inner hosts in one machine: {total_sum:.1} MB in all"),
    );
    let parts: [(&str, Part); 4] = [
        ("  private RssAnon", |m| m.anon),
        ("  file RssFile", |m| m.file),
        ("  shmem RssShmem", |m| m.shmem),
        ("  Pss", |m| m.pss),
    ];
    for (name, f) in parts {
        let (median, sum) = of(f);
        println!(
            "{name:<20} {median:9.1} MB   outer daemon {:9.1} MB   {n} inner hosts: {sum:.1} MB in all",
            f(&outer)
        );
    }
}

/// `nested_first_turn`: after a restart, a past nested session's first turn to its first
/// delta, against the same turn on the sessions while they were open.
async fn first_turn(d: &mut Daemon, sessions: &[String], image: &str, endpoint: &str) {
    let client = connect(&d.address).await;
    let mut base = Vec::new();
    for (i, s) in sessions.iter().enumerate() {
        match first_delta(&client, s, &format!("open{i}")).await {
            Some(ms) => base.push(ms),
            None => {
                println!("nested_first_turn    skipped: a turn on an open nested session failed");
                return;
            }
        }
    }
    drop(client);
    d.stop();
    let dir = std::mem::replace(&mut d.dir, tempfile::tempdir().unwrap());
    *d = spawn(dir, image, endpoint);
    let client = connect(&d.address).await;
    let mut after = Vec::new();
    for (i, s) in sessions.iter().enumerate() {
        match first_delta(&client, s, &format!("after{i}")).await {
            Some(ms) => after.push(ms),
            None => {
                println!(
                    "nested_first_turn    skipped: a past nested session could not run a turn after the restart"
                );
                return;
            }
        }
    }
    let (a, b) = (median(after), median(base));
    row(
        "nested_first_turn",
        a,
        "ms",
        "same turn, session open",
        b,
        &format!(
            "   above baseline {:+.1} ms   median of {}",
            a - b,
            sessions.len()
        ),
    );
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let turns: usize = std::env::var("AHPD_BENCH_TURNS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1000);
        turn_overhead(turns).await;
        let docker = match Docker::connect_with_unix(
            "/var/run/docker.sock",
            10,
            bollard::API_DEFAULT_VERSION,
        ) {
            Ok(d) => match d.negotiate_version().await {
                Ok(d) => d,
                Err(_) => return println!("skipped: no container engine answers"),
            },
            Err(_) => return println!("skipped: no container engine answers"),
        };
        let samples: usize = std::env::var("AHPD_BENCH_SAMPLES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(10);
        let endpoint = testkit::Endpoint::builder()
            .fallback(testkit::Reply::stream([
                testkit::chunk::text("hi"),
                testkit::chunk::finish("stop"),
            ]))
            .models(["m1"])
            .start()
            .unwrap();
        let url = endpoint.base_url();
        let image = image(&docker).await;
        let mut d = daemon(&image, &url);
        let client = connect(&d.address).await;
        // Idle: listening, one client, no session yet.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let outer_idle = mem(d.child.id());

        ready_cold(&docker, &client, &image, samples.div_ceil(2)).await;
        let sessions = ready_warm(&docker, &client, samples).await;
        idle_rss(outer_idle);
        drop(client);
        first_turn(&mut d, &sessions[..sessions.len().min(5)], &image, &url).await;
        let host = d.host_id();
        d.stop();
        sweep(&docker, &host).await;
    });
}
