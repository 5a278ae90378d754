//! `ahpd acp`: how soon an editor that starts it hears back, and what the ACP hop costs a turn.
//!
//! 1. Spawn → `initialize` answered, against spawn → exit of `ahpd --version` (the cost of
//!    starting the binary at all) in the same run. The goal is 20 ms.
//! 2. A turn's first text: spawn → first `agent_message_chunk` of `ahpd acp` (initialize,
//!    `session/resume`, `session/prompt`) against spawn → first `chat/delta` line of
//!    `ahpd run --json --session`, on the same session of one detached daemon, turns alternating,
//!    the model the scripted endpoint on loopback.
//!
//! Run with `cargo bench -p ahpd --bench acp`; `AHPD_BENCH_BIN=path` measures another build of
//! `ahpd` (a release build, say) with the same harness.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use testkit::{Endpoint, Reply};

const RUNS: usize = 30;
const TURNS: usize = 15;
fn bin() -> String {
    std::env::var("AHPD_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_ahpd").to_owned())
}

fn cmd(root: &Path, dir: &Path) -> Command {
    let mut c = Command::new(bin());
    c.env_clear()
        .env("HOME", root.join("home"))
        .env("XDG_CONFIG_HOME", root.join("xdg"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .current_dir(dir)
        .stderr(Stdio::null());
    c
}

struct Agent {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Agent {
    fn spawn(root: &Path, dir: &Path) -> Agent {
        let mut child = cmd(root, dir)
            .arg("acp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Agent { child, out }
    }

    fn send(&mut self, v: Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    /// Reads messages until one satisfies `done`.
    fn until(&mut self, done: impl Fn(&Value) -> bool) -> Value {
        loop {
            let mut line = String::new();
            assert!(self.out.read_line(&mut line).unwrap() > 0, "ahpd acp ended");
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if done(&v) {
                return v;
            }
        }
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }));
        let v = self.until(|v| v["id"] == id);
        assert!(v.get("error").is_none(), "{method}: {v}");
        v["result"].clone()
    }

    fn initialize(&mut self) {
        self.request(
            0,
            "initialize",
            json!({ "protocolVersion": 1, "clientCapabilities": {} }),
        );
    }

    fn end(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn p90(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() * 9 / 10).min(v.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    println!("ahpd: {}", bin());
    let root = tempfile::tempdir().unwrap();
    let work = root.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(root.path().join("home")).unwrap();
    std::fs::create_dir_all(root.path().join("xdg/ahpd")).unwrap();
    let ep = Endpoint::builder()
        .models(["m"])
        .fallback(Reply::text_stream("the model answers here"))
        .start()
        .unwrap();
    let config = json!({
        "port": 1,
        "plugins": [{ "name": "@ahpd/agent-cofold", "options": { "baseUrl": ep.base_url(), "model": "m" } }]
    });
    std::fs::write(root.path().join("xdg/ahpd/config.json"), config.to_string()).unwrap();

    // 1. Startup, with no daemon: the host is built in the background while initialize is
    // answered.
    let mut spawn_only = Vec::new();
    let mut to_init = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let status = cmd(root.path(), &work)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        spawn_only.push(t.elapsed());
        let t = Instant::now();
        let mut agent = Agent::spawn(root.path(), &work);
        agent.initialize();
        to_init.push(t.elapsed());
        agent.end();
    }
    let (base, init) = (median(spawn_only.clone()), median(to_init.clone()));
    println!(
        "spawn → initialize answered: median {:.1} ms, p90 {:.1} ms (goal 20 ms); `ahpd --version` spawn → exit: median {:.1} ms; ratio {:.2}",
        ms(init),
        ms(p90(to_init)),
        ms(base),
        init.as_secs_f64() / base.as_secs_f64()
    );

    // 2. First text of a turn, through a detached daemon.
    let status = cmd(root.path(), &work)
        .args(["start", "--port", "0"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let mut agent = Agent::spawn(root.path(), &work);
    agent.initialize();
    let session =
        agent.request(1, "session/new", json!({ "cwd": work, "mcpServers": [] }))["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
    agent.request(
        2,
        "session/prompt",
        json!({ "sessionId": session, "prompt": [{ "type": "text", "text": "warm up" }] }),
    );
    agent.end();
    let mut via_acp = Vec::new();
    let mut via_run = Vec::new();
    for n in 0..TURNS {
        let t = Instant::now();
        let mut agent = Agent::spawn(root.path(), &work);
        agent.initialize();
        agent.request(
            1,
            "session/resume",
            json!({ "sessionId": session, "cwd": work, "mcpServers": [] }),
        );
        agent.send(json!({ "jsonrpc": "2.0", "id": 2, "method": "session/prompt",
            "params": { "sessionId": session, "prompt": [{ "type": "text", "text": format!("acp {n}") }] } }));
        agent.until(|v| v["params"]["update"]["sessionUpdate"] == "agent_message_chunk");
        via_acp.push(t.elapsed());
        agent.until(|v| v["id"] == 2);
        agent.end();

        let t = Instant::now();
        let mut run = cmd(root.path(), &work)
            .args(["run", "--json", "--session", &session, &format!("run {n}")])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(run.stdout.take().unwrap());
        loop {
            let mut line = String::new();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "ahpd run ended first"
            );
            if line.contains("\"chat/delta\"") {
                break;
            }
        }
        via_run.push(t.elapsed());
        let _ = std::io::copy(&mut out, &mut std::io::sink());
        let _ = run.wait();
    }
    let (acp, run) = (median(via_acp.clone()), median(via_run.clone()));
    println!(
        "spawn → first text of a turn: ahpd acp median {:.1} ms (p90 {:.1}), ahpd run --json median {:.1} ms (p90 {:.1}); ratio {:.2}",
        ms(acp),
        ms(p90(via_acp)),
        ms(run),
        ms(p90(via_run)),
        acp.as_secs_f64() / run.as_secs_f64()
    );
    let _ = cmd(root.path(), &work)
        .arg("stop")
        .stdout(Stdio::null())
        .status();
}
