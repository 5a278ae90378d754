//! The hub against real servers: the project's test server over streamable HTTP on loopback and
//! the reference `mcp-server-time` over stdio when `.ci/run` installed it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ahpd_mcp::{CallError, McpHub, Server, Status};
use serde_json::{Map, Value, json};
use testkit::McpServer;

/// Long enough never to fire on a healthy machine; only turns a hang into a failure.
const PATIENCE: Duration = Duration::from_secs(30);

fn hub(servers: Value, secrets: &[(&str, &str)]) -> McpHub {
    let servers = ahpd_mcp::spec::parse_servers("mcpServers", &servers).unwrap();
    let secrets: Vec<(String, String)> = secrets
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    McpHub::new(
        servers,
        Arc::new(move |name: &str| {
            secrets
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .ok_or_else(|| format!("the vault holds no {name}"))
        }),
    )
}

fn server_of(hub: &McpHub, name: &str) -> Arc<Server> {
    hub.server(name, &hub.configured()[name])
}

async fn until(server: &Server, pred: impl Fn(&Status) -> bool) -> Status {
    let mut state = server.watch();
    let found = tokio::time::timeout(PATIENCE, state.wait_for(|s| pred(&s.status)))
        .await
        .expect("the state arrives")
        .expect("the server lives");
    found.status.clone()
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_its_time_limit_is_cancelled_on_the_server() {
    let test = McpServer::start().unwrap();
    let hub = hub(
        json!({ "own": { "url": test.url(), "timeoutSec": 0.3 } }),
        &[],
    );
    let server = server_of(&hub, "own");
    let _lease = server.lease();
    until(&server, |s| *s == Status::Ready).await;
    let out = server
        .call("slow", Map::new(), None, std::future::pending())
        .await;
    assert!(matches!(out, Err(CallError::TimedOut { .. })), "{out:?}");
    tokio::time::timeout(PATIENCE, test.wait_for(|_, cancelled| cancelled >= 1))
        .await
        .expect("the server hears the cancellation");
    // The server is still there for the next call.
    let echo = server
        .call(
            "echo",
            json!({"text": "hi"}).as_object().cloned().unwrap(),
            None,
            std::future::pending(),
        )
        .await
        .unwrap();
    assert_eq!(echo.text, "echo: hi");
    assert_eq!(echo.structured, Some(json!({"echoed": "hi"})));
    drop(_lease);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_secret_fails_the_server_naming_the_secret_only() {
    let hub = hub(
        json!({ "web": { "url": "http://127.0.0.1:9/mcp", "headers": { "A": { "$secret": "host:absent" } } } }),
        &[],
    );
    let server = server_of(&hub, "web");
    let _lease = server.lease();
    let Status::Failed(why) = until(&server, |s| matches!(s, Status::Failed(_))).await else {
        unreachable!()
    };
    assert!(why.contains("host:absent"), "{why}");
    let report = hub.report();
    assert_eq!(report[0].status, "failed");
    drop(_lease);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_unused_stops_and_equal_entries_share_one() {
    let test = McpServer::start().unwrap();
    let hub = hub(json!({ "own": { "url": test.url() } }), &[]);
    let first = server_of(&hub, "own");
    let second = server_of(&hub, "own");
    assert!(Arc::ptr_eq(&first, &second));
    let lease = first.lease();
    until(&first, |s| *s == Status::Ready).await;
    assert_eq!(first.state().tools.len(), 4);
    drop(lease);
    until(&first, |s| *s == Status::Stopped).await;
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_that_exits_is_started_again() {
    let Some(program) = time_server() else { return };
    let hub = hub(
        json!({ "time": { "command": program, "env": { "TIME_TOKEN": { "$secret": "host:t" } } } }),
        &[("host:t", "value-kept-from-logs")],
    );
    let server = server_of(&hub, "time");
    let _lease = server.lease();
    until(&server, |s| *s == Status::Ready).await;
    let names: Vec<String> = server
        .state()
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert!(names.contains(&"get_current_time".to_owned()), "{names:?}");
    assert!(server.state().tools.iter().all(|t| t.read_only));
    let now = server
        .call(
            "get_current_time",
            json!({"timezone": "UTC"}).as_object().cloned().unwrap(),
            None,
            std::future::pending(),
        )
        .await
        .unwrap();
    assert!(now.text.contains("UTC"), "{}", now.text);
    // Kill it from outside: it is noticed, reported and started again.
    let pid = find_child_with(&program).expect("the server's process");
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let mut state = server.watch();
    tokio::time::timeout(
        PATIENCE,
        state.wait_for(|s| s.restarts >= 1 && s.status == Status::Ready),
    )
    .await
    .expect("started again")
    .expect("the server lives");
    drop(_lease);
    hub.shutdown().await;
}

/// A child of this process whose command line names `program`.
fn find_child_with(program: &std::path::Path) -> Option<i32> {
    let me = std::process::id().to_string();
    let needle = program.to_string_lossy().into_owned();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let ppid = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .to_owned();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        (ppid == me && String::from_utf8_lossy(&cmdline).contains(&needle)).then_some(pid)
    })
}
