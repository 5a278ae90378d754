//! Sessions in a machine on a real engine: how long a session takes to be ready with a new
//! machine and with a running one, and the memory of an idle inner host, each beside a
//! baseline measured in the same run. Skipped (with a line) where no engine answers.
//!
//! `cargo bench -p ahpd --bench machines` (release build). `AHPD_BENCH_SAMPLES` sets the
//! number of warm samples (default 10; cold ones are half as many).

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

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
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
    _dir: tempfile::TempDir,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn daemon(image: &str) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    std::fs::create_dir_all(xdg.join("ahpd")).unwrap();
    std::fs::create_dir_all(xdg.join("copapo")).unwrap();
    std::fs::write(xdg.join("copapo").join("config.json"), "{}").unwrap();
    std::fs::write(
        xdg.join("ahpd").join("config.json"),
        json!({ "plugins": [
            { "name": "@ahpd/agent-cofold", "options": { "memory": true } },
            { "name": "@ahpd/computer", "options": {
                "image": image, "pull": "never", "network": "host", "max": 20,
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
        _dir: dir,
    }
}

async fn connect(address: &str) -> Client {
    let t = WebSocketTransport::connect(address).await.unwrap();
    let c = Client::connect(t, ClientConfig::default()).await.unwrap();
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
            json!({ "channel": uri, "provider": "cofold", "config": { "computer": computer } }),
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

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let docker = match Docker::connect_with_unix("/var/run/docker.sock", 10, bollard::API_DEFAULT_VERSION) {
            Ok(d) => match d.negotiate_version().await {
                Ok(d) => d,
                Err(_) => return println!("skipped: no container engine answers"),
            },
            Err(_) => return println!("skipped: no container engine answers"),
        };
        let samples: usize = std::env::var("AHPD_BENCH_SAMPLES").ok().and_then(|s| s.parse().ok()).unwrap_or(10);
        let image = image(&docker).await;
        let d = daemon(&image);
        let client = connect(&d.address).await;

        // Cold: a disposable machine per session, against create + start of the same image.
        let mut cold = Vec::new();
        let mut base_cold = Vec::new();
        for _ in 0..samples.div_ceil(2) {
            base_cold.push(baseline_start(&docker, &image).await.as_secs_f64() * 1e3);
            let (uri, t) = create(&client, "disposable:cold").await;
            cold.push(t.as_secs_f64() * 1e3);
            let _: Value = client.request("disposeSession", json!({ "channel": uri })).await.unwrap();
        }

        // Warm: sessions in one running machine, against an exec of `<build> --version` there.
        let _: Value = client
            .request(
                "resourceWrite",
                json!({ "channel": "ahp-root://", "uri": "computer://benchbox", "data": "{}", "encoding": "utf-8", "createOnly": true }),
            )
            .await
            .unwrap();
        let status: Value = client
            .request("resourceRead", json!({ "channel": "ahp-root://", "uri": "computer://benchbox/status" }))
            .await
            .unwrap();
        let _ = status;
        let inspected = docker.inspect_container("benchbox", None).await.unwrap();
        let build = format!(
            "/opt/ahpd/bin/{}",
            inspected.config.unwrap().labels.unwrap()["ahpd.init"]
        );
        let mut warm = Vec::new();
        let mut base_warm = Vec::new();
        for _ in 0..samples {
            base_warm.push(baseline_exec(&docker, "benchbox", &build).await.as_secs_f64() * 1e3);
            let (_, t) = create(&client, "computer://benchbox").await;
            warm.push(t.as_secs_f64() * 1e3);
        }

        // Idle memory of the inner hosts now open, against the outer daemon's.
        let pids = inner_pids();
        let inner: Vec<f64> = pids.iter().map(|p| rss_kb(*p) as f64 / 1024.0).collect();
        let outer = rss_kb(d.child.id()) as f64 / 1024.0;

        let (c, bc) = (median(cold), median(base_cold));
        let (w, bw) = (median(warm), median(base_warm));
        println!("nested_ready_cold   median {c:8.1} ms   baseline (create+start) {bc:8.1} ms   ratio {:.2}x   over baseline {:+.1} ms", c / bc, c - bc);
        println!("nested_ready_warm   median {w:8.1} ms   baseline (exec --version) {bw:8.1} ms   ratio {:.2}x", w / bw);
        if !inner.is_empty() {
            let m = median(inner.clone());
            let sum: f64 = inner.iter().sum();
            println!("inner_idle_rss      median {m:8.1} MB   baseline (outer daemon idle) {outer:8.1} MB   ratio {:.2}x   {} inner hosts: {sum:.1} MB in all", m / outer, inner.len());
        }
        let _ = docker
            .remove_container("benchbox", Some(RemoveContainerOptions { force: true, ..Default::default() }))
            .await;
    });
}
