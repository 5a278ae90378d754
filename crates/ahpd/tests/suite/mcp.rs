//! `mcpServers` in the daemon: a wrong entry stops the start naming the key; `ahpd mcp list`
//! shows the servers and, while the daemon runs, their state; secrets stay out of every file
//! and log; the daemon's stop ends a stdio server's whole process tree (cases M9–M11 of
//! docs/acceptance.md).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::*;

/// Long enough never to pass on a healthy machine; only turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(30);

fn time_server() -> Option<PathBuf> {
    let path = std::env::var_os("AHPD_TEST_MCP_TIME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/mcp-venv/bin/mcp-server-time")
        });
    if path.exists() {
        Some(path)
    } else {
        println!(
            "SKIP: {} is absent (.ci/run installs mcp-server-time there)",
            path.display()
        );
        None
    }
}

/// `ahpd mcp list --json`, polled until `pred` holds: the state lives in another process and
/// no event reaches this one.
fn list_until(env: &Env, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let out = env.run(&["mcp", "list", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        if pred(&listed) {
            return listed;
        }
        assert!(Instant::now() < deadline, "never held: {listed}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Processes whose environment holds `marker`.
fn marked(marker: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ"))
            && env.windows(marker.len()).any(|w| w == marker.as_bytes())
        {
            out.push(pid);
        }
    }
    out
}

#[test]
fn a_wrong_entry_exits_2_naming_the_key() {
    // M9.
    let env = Env::new();
    env.write_base(r#"{"mcpServers": {"time": {"type": "stdio", "args": ["x"]}}}"#);
    let out = env.run(&["--plugin", ECHO]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim(),
        format!(
            "ahpd: {}: mcpServers.time.command: a stdio server needs a non-empty command",
            env.base_file().display()
        )
    );
    env.write_base(r#"{"mcpServers": {"web": {"url": "https://x.test", "headers": {"A": 1}}}}"#);
    let out = env.run(&["--plugin", ECHO]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains(": mcpServers.web.headers.A: must be a string or"));
}

#[test]
fn mcp_list_shows_servers_and_their_state_while_the_daemon_runs_and_keeps_secrets() {
    // M10.
    let server = testkit::McpServer::start().unwrap();
    let env = Env::new();
    let secret = "hdr-value-4417-never-shown";
    let out = env.run_with_input(&["vault", "set", "host:own-token"], secret);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    env.write_base(
        &json!({
            "port": 0,
            "plugins": [ECHO],
            "mcpServers": {
                "own": { "type": "http", "url": server.url(), "eager": true,
                         "headers": { "Authorization": { "$secret": "host:own-token" } } },
                "gone": { "command": "/nonexistent/mcp-nowhere", "eager": true }
            }
        })
        .to_string(),
    );
    let out = env.run(&["mcp", "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(
        shown.contains("own\thttp\t") && shown.contains("the daemon is not running"),
        "{shown}"
    );

    let daemon = env.daemon(&[], "mcp-list.log");
    let listed = list_until(&env, |v| {
        let servers = v["servers"].as_array().cloned().unwrap_or_default();
        let of = |n: &str| {
            servers
                .iter()
                .find(|s| s["name"] == n)
                .cloned()
                .unwrap_or(Value::Null)
        };
        of("own")["status"] == "ready" && of("gone")["status"] == "failed"
    });
    let servers = listed["servers"].as_array().unwrap();
    let own = servers.iter().find(|s| s["name"] == "own").unwrap();
    assert_eq!(own["tools"], 4);
    let gone = servers.iter().find(|s| s["name"] == "gone").unwrap();
    assert!(
        gone["error"]
            .as_str()
            .unwrap()
            .contains("cannot start /nonexistent/mcp-nowhere")
    );
    let out = env.run(&["mcp", "list"]);
    assert!(
        text(&out.stdout).contains("ready, 4 tools"),
        "{}",
        text(&out.stdout)
    );
    let out = env.run(&["config", "--json"]);
    assert!(text(&out.stdout).contains("Authorization"));
    assert_eq!(daemon.stop(), 0);
    // The vault is the one file that holds the value.
    let holders = env.files_containing(secret);
    assert!(
        holders.iter().all(|p| p.ends_with("vault.json")),
        "{holders:?}"
    );
}

#[test]
fn the_daemons_stop_ends_a_stdio_servers_whole_tree() {
    // M11.
    let Some(program) = time_server() else { return };
    let env = Env::new();
    let marker = format!("AHPD_MCP_TREE_{}", std::process::id());
    // The server starts a child of its own that outlives nothing but the group.
    let script = format!("sleep 600 & exec {}", program.display());
    env.write_base(
        &json!({
            "port": 0,
            "plugins": [ECHO],
            "mcpServers": {
                "time": { "command": "sh", "args": ["-c", script], "eager": true,
                          "env": { "TREE_MARKER": marker } }
            }
        })
        .to_string(),
    );
    let daemon = env.daemon(&[], "mcp-tree.log");
    list_until(&env, |v| v["servers"][0]["status"] == "ready");
    let listed = list_until(&env, |v| v["servers"][0]["tools"] == 2);
    assert_eq!(listed["servers"][0]["name"], "time");
    // The server, its sleep and the helper that contains them (two processes).
    assert!(marked(&marker).len() >= 2, "{:?}", marked(&marker));
    assert_eq!(daemon.stop(), 0);
    assert!(marked(&marker).is_empty(), "{:?}", marked(&marker));
}
