//! MCP servers in cofold sessions, through the official client on a loopback WebSocket: a real
//! third-party server (`mcp-server-time` from PyPI, over stdio) and the project's own test
//! server (`testkit::McpServer`, over streamable HTTP). Cases M1–M8 of docs/acceptance.md.

use std::path::PathBuf;
use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::state::{Customization, McpServerState};
use ahpd_agent_cofold::CofoldAgent;
use ahpd_mcp::McpHub;
use serde_json::{Value, json};
use testkit::McpServer;

use super::support::*;

/// Where `.ci/run` installs `mcp-server-time` (`AHPD_TEST_MCP_TIME` names another program).
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

fn hub(servers: Value) -> McpHub {
    let servers = ahpd_mcp::spec::parse_servers("mcpServers", &servers).expect("valid servers");
    McpHub::new(
        servers,
        Arc::new(|name: &str| Err(format!("the test vault holds no {name}"))),
    )
}

fn agent_with(place: &Place, ep: &testkit::Endpoint, hub: &McpHub) -> CofoldAgent {
    let mut embedder = place.embedder();
    embedder.mcp = Some(hub.clone());
    agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        embedder,
    )
}

async fn session(place: &Place, agent: CofoldAgent, mode: &str) -> (Watch, TestHost) {
    let th = host(vec![Arc::new(agent)]).await;
    let w = Watch::create(
        &th,
        "cofold",
        &fresh_id("mcp"),
        Some(&place.work),
        json!({ "permissionMode": mode }),
    )
    .await;
    (w, th)
}

/// The state the session's clients see for a server.
fn shown(w: &Watch, server: &str) -> Option<McpServerState> {
    let id = format!("mcp:{server}");
    w.mirror.sessions[&w.session]
        .customizations
        .iter()
        .flatten()
        .find_map(|c| match c {
            Customization::McpServer(m) if m.id == id => Some(m.state.clone()),
            _ => None,
        })
}

/// Reads actions until the server shows a state `pred` accepts; returns every kind it showed.
async fn until_shown(
    w: &mut Watch,
    server: &str,
    pred: impl Fn(&McpServerState) -> bool,
) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        if let Some(state) = shown(w, server) {
            let kind = kind(&state);
            if seen.last() != Some(&kind) {
                seen.push(kind);
            }
            if pred(&state) {
                return seen;
            }
        }
        w.next().await;
    }
}

fn kind(state: &McpServerState) -> String {
    match state {
        McpServerState::Starting(_) => "starting".into(),
        McpServerState::Ready(_) => "ready".into(),
        McpServerState::Error(e) => format!("error: {}", e.error.message),
        McpServerState::Stopped(_) => "stopped".into(),
        other => format!("{other:?}"),
    }
}

fn is_ready(s: &McpServerState) -> bool {
    matches!(s, McpServerState::Ready(_))
}

fn dispatch_mcp(kind: &str, id: &str) -> StateAction {
    serde_json::from_value(json!({ "type": kind, "id": id })).expect("an MCP action")
}

fn confirm(turn: &str, call: &str, approved: bool) -> StateAction {
    serde_json::from_value(json!({
        "type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call, "approved": approved
    }))
    .expect("a confirmation")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_server_from_pypi_answers_a_call_the_model_makes() {
    // M1.
    let Some(program) = time_server() else { return };
    let place = Place::new();
    // Trusted, so its read-only marks count.
    let hub = hub(
        json!({ "time": { "command": program, "args": ["--local-timezone", "UTC"], "trust": true } }),
    );
    let ep = endpoint(vec![
        call(
            "c1",
            "mcp__time__convert_time",
            json!({
                "source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"
            }),
        ),
        text("noon in Tokyo is 21:00"),
    ]);
    let (mut w, th) = session(&place, agent_with(&place, &ep, &hub), "default").await;
    let seen = until_shown(&mut w, "time", is_ready).await;
    assert_eq!(seen.last().map(String::as_str), Some("ready"), "{seen:?}");
    w.send("t1", "what time is it in Tokyo at noon UTC?").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let bodies = ep.chat_bodies();
    let names = offered(&bodies[0]);
    assert!(
        names.contains(&"mcp__time__get_current_time".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"mcp__time__convert_time".to_owned()),
        "{names:?}"
    );
    // The server's own input schema reaches the model.
    let convert = bodies[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "mcp__time__convert_time")
        .cloned()
        .unwrap();
    assert!(convert["function"]["parameters"]["properties"]["target_timezone"].is_object());
    // Read-only: nothing was asked; the converted time is in the conversation.
    let second = request_text(&bodies[1]);
    assert!(
        second.contains("Asia/Tokyo") && second.contains("21:00"),
        "{second}"
    );
    assert!(
        !w.envelopes
            .iter()
            .any(|e| matches!(e.action, StateAction::SessionInputNeededSet(_)))
    );
    w.assert_mirror(&th).await;
    drop(w);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stops_and_starts_a_server_and_the_next_turn_follows() {
    // M2: starting → ready, stopped by a client (tools gone), started again.
    let server = McpServer::start().expect("test server");
    let place = Place::new();
    let hub = hub(json!({ "own": { "type": "http", "url": server.url() } }));
    let ep = endpoint(vec![text("one"), text("two"), text("three")]);
    let (mut w, th) = session(&place, agent_with(&place, &ep, &hub), "default").await;
    let seen = until_shown(&mut w, "own", is_ready).await;
    assert!(
        seen.iter().all(|k| k == "starting" || k == "ready"),
        "{seen:?}"
    );
    w.send("t1", "hi").await;
    w.end("t1").await;
    w.client
        .dispatch(
            w.session.clone(),
            dispatch_mcp("session/mcpServerStopRequested", "mcp:own"),
        )
        .await
        .expect("dispatch");
    until_shown(&mut w, "own", |s| matches!(s, McpServerState::Stopped(_))).await;
    w.send("t2", "again").await;
    w.end("t2").await;
    w.client
        .dispatch(
            w.session.clone(),
            dispatch_mcp("session/mcpServerStartRequested", "mcp:own"),
        )
        .await
        .expect("dispatch");
    until_shown(&mut w, "own", is_ready).await;
    w.send("t3", "and again").await;
    w.end("t3").await;
    let bodies = ep.chat_bodies();
    assert!(offered(&bodies[0]).contains(&"mcp__own__echo".to_owned()));
    assert!(
        !offered(&bodies[1])
            .iter()
            .any(|n| n.starts_with("mcp__own__"))
    );
    assert!(offered(&bodies[2]).contains(&"mcp__own__echo".to_owned()));
    // An id the session does not show is refused.
    w.client
        .dispatch(
            w.session.clone(),
            dispatch_mcp("session/mcpServerStopRequested", "mcp:nope"),
        )
        .await
        .expect("dispatch");
    w.assert_mirror(&th).await;
    drop(w);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_command_fails_with_a_sentence_and_the_others_go_on() {
    // M3.
    let server = McpServer::start().expect("test server");
    let place = Place::new();
    let hub = hub(json!({
        "broken": { "command": "/nonexistent/mcp-server-nowhere" },
        "typo": { "command": "x", "comand": "y" },
        "own": { "type": "http", "url": server.url(), "trust": true }
    }));
    let ep = endpoint(vec![
        call("c1", "mcp__own__echo", json!({"text": "still here"})),
        text("ok"),
    ]);
    let (mut w, _th) = session(&place, agent_with(&place, &ep, &hub), "default").await;
    let seen = until_shown(&mut w, "broken", |s| matches!(s, McpServerState::Error(_))).await;
    let failed = seen.last().cloned().unwrap_or_default();
    assert!(
        failed.contains("cannot start /nonexistent/mcp-server-nowhere"),
        "{failed}"
    );
    // A wrong entry fails its own server with its reason, for the clients to see.
    let seen = until_shown(&mut w, "typo", |s| matches!(s, McpServerState::Error(_))).await;
    let typo = seen.last().cloned().unwrap_or_default();
    assert!(
        typo.starts_with("error: mcpServers.typo.comand: is not a setting of a stdio server"),
        "{typo}"
    );
    until_shown(&mut w, "own", is_ready).await;
    w.send("t1", "echo").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let bodies = ep.chat_bodies();
    assert!(request_text(&bodies[1]).contains("echo: still here"));
    // Structured content reaches the model beside the text.
    assert!(request_text(&bodies[1]).contains("echoed"));
    drop(w);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_is_not_read_only_asks_and_denied_does_not_run() {
    // M4.
    let server = McpServer::start().expect("test server");
    let place = Place::new();
    let hub = hub(json!({ "own": { "type": "http", "url": server.url() } }));
    let ep = endpoint(vec![
        call("c1", "mcp__own__note", json!({"text": "x"})),
        text("fine"),
    ]);
    let (mut w, _th) = session(&place, agent_with(&place, &ep, &hub), "default").await;
    until_shown(&mut w, "own", is_ready).await;
    w.send("t1", "write it down").await;
    w.until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    w.client
        .dispatch(w.chat.clone(), confirm("t1", "c1", false))
        .await
        .expect("dispatch");
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert!(
        server.calls().iter().all(|(name, _)| name != "note"),
        "{:?}",
        server.calls()
    );
    assert!(request_text(&ep.chat_bodies()[1]).contains("declined"));
    drop(w);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_tool_runs_without_asking() {
    // M5.
    let server = McpServer::start().expect("test server");
    let place = Place::new();
    let hub = hub(json!({ "own": { "type": "http", "url": server.url(), "allow": ["note"] } }));
    let ep = endpoint(vec![
        call("c1", "mcp__own__note", json!({"text": "x"})),
        text("fine"),
    ]);
    let (mut w, _th) = session(&place, agent_with(&place, &ep, &hub), "default").await;
    until_shown(&mut w, "own", is_ready).await;
    w.send("t1", "write it down").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert!(server.calls().iter().any(|(name, _)| name == "note"));
    assert!(request_text(&ep.chat_bodies()[1]).contains("noted: x"));
    drop(w);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_servers_read_only_mark_still_asks_in_default() {
    // Anyone can write `readOnlyHint`: it counts for a server the person trusts, not this one.
    let server = McpServer::start().expect("test server");
    let place = Place::new();
    let hub = hub(json!({ "own": { "type": "http", "url": server.url() } }));
    let ep = endpoint(vec![
        call("c1", "mcp__own__echo", json!({"text": "x"})),
        text("fine"),
    ]);
    let (mut w, _th) = session(&place, agent_with(&place, &ep, &hub), "default").await;
    until_shown(&mut w, "own", is_ready).await;
    w.send("t1", "say it").await;
    w.until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    w.client
        .dispatch(w.chat.clone(), confirm("t1", "c1", false))
        .await
        .expect("dispatch");
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert!(server.calls().is_empty(), "{:?}", server.calls());
    drop(w);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_and_dont_ask_refuse_a_trusted_tool_that_is_not_read_only() {
    // `trust` and `allow` decide asking, never a mode's refusal.
    for (mode, entry) in [
        ("plan", json!({"trust": true})),
        ("dontAsk", json!({"allow": ["note"]})),
    ] {
        let server = McpServer::start().expect("test server");
        let place = Place::new();
        let mut own = json!({ "type": "http", "url": server.url() });
        own.as_object_mut()
            .unwrap()
            .extend(entry.as_object().cloned().unwrap());
        let hub = hub(json!({ "own": own }));
        let ep = endpoint(vec![
            call("c1", "mcp__own__note", json!({"text": "x"})),
            text("fine"),
        ]);
        let (mut w, _th) = session(&place, agent_with(&place, &ep, &hub), mode).await;
        until_shown(&mut w, "own", is_ready).await;
        w.send("t1", "write it down").await;
        assert!(matches!(
            w.end("t1").await,
            StateAction::ChatTurnComplete(_)
        ));
        assert!(
            server.calls().iter().all(|(name, _)| name != "note"),
            "{mode}: {:?}",
            server.calls()
        );
        assert!(
            !w.envelopes
                .iter()
                .any(|e| matches!(e.action, StateAction::SessionInputNeededSet(_))),
            "{mode} never asks"
        );
        let second = request_text(&ep.chat_bodies()[1]);
        assert!(
            second.contains(&format!("the mode is {mode}")),
            "{mode}: {second}"
        );
        drop(w);
        hub.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_turns_stop_cancels_a_slow_call_on_the_server() {
    // M6.
    let server = McpServer::start().expect("test server");
    let place = Place::new();
    let hub = hub(json!({ "own": { "type": "http", "url": server.url(), "trust": true } }));
    let ep = endpoint(vec![call("c1", "mcp__own__slow", json!({}))]);
    let (mut w, _th) = session(&place, agent_with(&place, &ep, &hub), "default").await;
    until_shown(&mut w, "own", is_ready).await;
    w.send("t1", "take your time").await;
    server
        .wait_for(|calls, _| calls.iter().any(|(n, _)| n == "slow"))
        .await;
    let cancel: StateAction = serde_json::from_value(
        json!({ "type": "chat/turnCancelled", "turnId": "t1", "duration": 0 }),
    )
    .expect("cancel");
    w.client
        .dispatch(w.chat.clone(), cancel)
        .await
        .expect("dispatch");
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnCancelled(_)
    ));
    // The server hears `notifications/cancelled` for the call.
    server.wait_for(|_, cancelled| cancelled >= 1).await;
    drop(w);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_result_is_kept_and_named_to_the_model() {
    // M7.
    let server = McpServer::start().expect("test server");
    let place = Place::new();
    let hub = hub(json!({ "own": { "type": "http", "url": server.url(), "trust": true } }));
    let ep = endpoint(vec![
        call("c1", "mcp__own__picture", json!({})),
        text("a dot"),
    ]);
    let (mut w, _th) = session(&place, agent_with(&place, &ep, &hub), "default").await;
    until_shown(&mut w, "own", is_ready).await;
    w.send("t1", "show me").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let second = request_text(&ep.chat_bodies()[1]);
    assert!(second.contains("a picture of one pixel"), "{second}");
    let start = second.find("kept at ").expect("the image is named") + "kept at ".len();
    let rest = &second[start..];
    let path = &rest[..rest.find(".png").expect("a png") + 4];
    let bytes = std::fs::read(path).expect("the image file");
    assert!(bytes.starts_with(b"\x89PNG"));
    drop(w);
    hub.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_and_a_crash_reach_the_session() {
    // M8: a tool added later is offered to the next turn; a crashed server shows its failure,
    // comes back once it can be reached, and its tools with it.
    let server = McpServer::start().expect("test server");
    let place = Place::new();
    let hub = hub(json!({ "own": { "type": "http", "url": server.url(), "trust": true } }));
    let ep = endpoint(vec![
        text("one"),
        call("c1", "mcp__own__echo", json!({"text": "after"})),
        text("two"),
        text("three"),
    ]);
    let agent = agent_with(&place, &ep, &hub);
    let (mut w, _th) = session(&place, agent, "default").await;
    until_shown(&mut w, "own", is_ready).await;
    // The session may show the server ready a moment before the hub's report counts its
    // tools; wait for the count rather than read it once.
    let mut changes = hub.changes();
    while hub.report()[0].tools != 4 {
        changes.changed().await.expect("hub alive");
    }
    server.add_tool().await;
    while hub.report()[0].tools != 5 {
        changes.changed().await.expect("hub alive");
    }
    w.send("t1", "hi").await;
    w.end("t1").await;
    assert!(offered(&ep.chat_bodies()[0]).contains(&"mcp__own__extra".to_owned()));
    // A crash: the next call finds the connection gone and the server shows it failed.
    server.crash();
    w.send("t2", "echo").await;
    w.end("t2").await;
    until_shown(&mut w, "own", |s| matches!(s, McpServerState::Error(_))).await;
    server.restart().expect("the server comes back");
    until_shown(&mut w, "own", is_ready).await;
    assert!(hub.report()[0].restarts >= 1);
    w.send("t3", "still there?").await;
    w.end("t3").await;
    let bodies = ep.chat_bodies();
    assert!(offered(&bodies[3]).contains(&"mcp__own__echo".to_owned()));
    drop(w);
    hub.shutdown().await;
}
