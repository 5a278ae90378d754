//! `mcpServers` in the daemon: a wrong entry fails its own server while the daemon serves;
//! `${VAR}` references expand at the start and are never written down; `ahpd mcp list` shows
//! the servers and, while the daemon runs, their state; `ahpd mcp add|remove|enable|disable`
//! edit the file; secrets stay out of every file and log; the daemon's stop ends a stdio
//! server's whole process tree (cases M9–M11 of docs/acceptance.md).

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

fn server_named(listed: &Value, name: &str) -> Value {
    listed["servers"]
        .as_array()
        .and_then(|all| all.iter().find(|s| s["name"] == name).cloned())
        .unwrap_or(Value::Null)
}

#[test]
fn a_wrong_entry_fails_only_its_server_and_the_daemon_serves() {
    // M9: Claude Code's and Codex's shapes are read; an unknown key, an `sse` server and a
    // disabled one are each reported on their own line while the good server runs.
    let server = testkit::McpServer::start().unwrap();
    let env = Env::new();
    env.write_base(
        &json!({
            "port": 0,
            "plugins": [ECHO],
            "mcpServers": {
                "good": { "type": "http", "url": server.url(), "eager": true,
                          "startup_timeout_sec": 20, "disabled_tools": ["note"] },
                "typo": { "command": "x", "comand": "y", "eager": true },
                "old": { "type": "sse", "url": "https://example.test/sse", "eager": true },
                "off": { "command": "/nonexistent/never", "enabled": false, "eager": true },
                "cmdless": { "type": "stdio", "args": ["x"] }
            }
        })
        .to_string(),
    );
    let out = env.run(&["config"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = env.run(&["mcp", "list"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    let file = env.base_file().display().to_string();
    assert!(
        shown.contains(&format!(
            "typo\tinvalid\t\tfailed: {file}: mcpServers.typo.comand: is not a setting of a stdio server"
        )),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "cmdless\tinvalid\t\tfailed: {file}: mcpServers.cmdless.command: a stdio server needs a non-empty command"
        )),
        "{shown}"
    );
    assert!(
        shown.contains("off\tstdio\t/nonexistent/never\tdisabled"),
        "{shown}"
    );
    let daemon = env.daemon(&[], "mcp-wrong.log");
    let listed = list_until(&env, |v| server_named(v, "good")["status"] == "ready");
    // The entry's disabled tool is not offered.
    assert_eq!(server_named(&listed, "good")["tools"], 3);
    let old = server_named(&listed, "old");
    assert_eq!(old["status"], "failed");
    assert!(
        old["error"]
            .as_str()
            .unwrap()
            .contains("HTTP+SSE transport"),
        "{old}"
    );
    assert_eq!(server_named(&listed, "off")["status"], "disabled");
    assert_eq!(daemon.stop(), 0);
}

#[test]
fn a_variable_is_expanded_when_the_server_starts_and_never_written_down() {
    // Claude Code's `${VAR}`: the reference stays in the configuration and in what is shown;
    // the value reaches the server's environment only.
    let Some(program) = time_server() else { return };
    let env = Env::new();
    let value = format!("expanded-{}-never-logged", std::process::id());
    env.write_base(
        &json!({
            "port": 0,
            "plugins": [ECHO],
            "mcpServers": {
                "time": { "command": "${MCP_TIME_PROGRAM}", "eager": true,
                          "env": { "TIME_MARK": "${MCP_TEST_MARK}", "TZ": "${MCP_UNSET_TZ:-UTC}" } },
                "unset": { "command": "${MCP_NOT_SET_ANYWHERE}", "eager": true }
            }
        })
        .to_string(),
    );
    let mut cmd = env.cmd();
    cmd.env("MCP_TIME_PROGRAM", &program)
        .env("MCP_TEST_MARK", &value);
    cmd.env("RUST_LOG", "debug");
    let daemon = env.daemon_with(cmd, &[], "mcp-expand.log");
    let listed = list_until(&env, |v| {
        server_named(v, "time")["status"] == "ready"
            && server_named(v, "unset")["status"] == "failed"
    });
    let unset = server_named(&listed, "unset");
    assert!(
        unset["error"]
            .as_str()
            .unwrap()
            .starts_with("command: the variable MCP_NOT_SET_ANYWHERE is not set"),
        "{unset}"
    );
    // The server was given the value.
    assert!(!marked(&format!("TIME_MARK={value}")).is_empty());
    assert!(!marked("TZ=UTC").is_empty());
    let out = env.run(&["mcp", "get", "time"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("${MCP_TIME_PROGRAM}"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        text(&out.stdout).contains("env: TIME_MARK, TZ"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(daemon.stop(), 0);
    let holders = env.files_containing(&value);
    assert!(holders.is_empty(), "{holders:?}");
}

#[test]
fn mcp_add_list_get_disable_enable_remove_round_trip() {
    let server = testkit::McpServer::start().unwrap();
    let env = Env::new();
    env.write_base(r#"{"port": 0, "plugins": ["@ahpd/agent-echo"], "custom": {"kept": true}}"#);
    let url = server.url();
    let out = env.run(&[
        "mcp",
        "add",
        "--transport",
        "http",
        "--eager",
        "-H",
        "X-Team: ${TEAM:-core}",
        "own",
        &url,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("added the http MCP server own"),
        "{}",
        text(&out.stdout)
    );
    let out = env.run(&[
        "mcp",
        "add",
        "time",
        "--",
        "uvx",
        "mcp-server-time",
        "--local-timezone=UTC",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(mode(&env.base_file()), 0o600);
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(env.base_file()).unwrap()).unwrap();
    assert_eq!(written["custom"], json!({"kept": true}));
    assert_eq!(written["port"], 0);
    assert_eq!(
        written["mcpServers"]["time"],
        json!({"command": "uvx", "args": ["mcp-server-time", "--local-timezone=UTC"]})
    );
    assert_eq!(
        written["mcpServers"]["own"]["headers"],
        json!({"X-Team": "${TEAM:-core}"})
    );
    // A name taken and an entry the daemon would fail are refused with one sentence.
    let out = env.run(&["mcp", "add", "time", "--", "other"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("already has an MCP server time"),
        "{}",
        text(&out.stderr)
    );
    let out = env.run(&[
        "mcp",
        "add",
        "bad",
        "--json",
        r#"{"command": "x", "comand": "y"}"#,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr)
            .lines()
            .next()
            .unwrap_or_default()
            .split_once(" (these")
            .map(|p| p.0),
        Some("ahpd: mcpServers.bad.comand: is not a setting of a stdio server")
    );

    let daemon = env.daemon(&[], "mcp-add.log");
    let listed = list_until(&env, |v| server_named(v, "own")["status"] == "ready");
    assert_eq!(server_named(&listed, "time")["status"], "not started");
    assert_eq!(daemon.stop(), 0);

    let out = env.run(&["mcp", "disable", "time"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed = list_until(&env, |_| true);
    assert_eq!(server_named(&listed, "time")["status"], "disabled");
    let out = env.run(&["mcp", "enable", "time"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = env.run(&["mcp", "get", "time", "--json"]);
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["enabled"], true);
    assert_eq!(got["target"], "uvx mcp-server-time --local-timezone=UTC");

    for name in ["time", "own"] {
        let out = env.run(&["mcp", "remove", name]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let out = env.run(&["mcp", "remove", "own"]);
    assert_eq!(out.status.code(), Some(2));
    let listed = list_until(&env, |_| true);
    assert_eq!(listed["servers"], json!([]));
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(env.base_file()).unwrap()).unwrap();
    assert_eq!(written["custom"], json!({"kept": true}));
    assert_eq!(written["plugins"], json!([ECHO]));
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

#[test]
fn mcp_import_reads_claude_codes_and_vs_codes_files() {
    let env = Env::new();
    env.write_base(r#"{"port": 0, "mcpServers": {"time": {"command": "uvx"}}}"#);
    let claude = env.root.path().join(".mcp.json");
    std::fs::write(
        &claude,
        json!({"mcpServers": {
            "api": {"type": "sse", "url": "${API_BASE_URL:-https://api.example.com}/sse",
                    "headers": {"Authorization": "Bearer ${API_KEY}"}},
            "time": {"command": "other"},
            "typo": {"command": "x", "comand": "y"}
        }})
        .to_string(),
    )
    .unwrap();
    let out = env.run(&["mcp", "import", claude.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("mcpServers.typo.comand"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("time is already configured"),
        "{}",
        text(&out.stderr)
    );
    let vscode = env.root.path().join("mcp.json");
    std::fs::write(
        &vscode,
        json!({"servers": {"gh": {"type": "stdio", "command": "npx", "env": {"T": "${env:GH_TOKEN}"}}}})
            .to_string(),
    )
    .unwrap();
    let out = env.run(&["mcp", "import", vscode.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(env.base_file()).unwrap()).unwrap();
    assert_eq!(written["mcpServers"]["time"], json!({"command": "uvx"}));
    assert_eq!(written["mcpServers"]["api"]["type"], "sse");
    assert_eq!(written["mcpServers"]["gh"]["env"]["T"], "${GH_TOKEN}");
    assert!(written["mcpServers"].get("typo").is_none());
    assert_eq!(mode(&env.base_file()), 0o600);
}
