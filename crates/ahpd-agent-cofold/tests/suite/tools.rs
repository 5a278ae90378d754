//! Tool presentation, edit notices, permission modes and usage (engine cases (docs/acceptance.md) 83–94, 104,
//! 128–129).

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{ToolCallState, ToolInput};
use ahpd_agent_cofold::EditPhase;
use serde_json::{Value, json};
use testkit::chunk;
use testkit::{Frame, Reply};

use super::support::*;

fn plain(s: &StringOrMarkdown) -> String {
    match s {
        StringOrMarkdown::Plain(s) => s.clone(),
        other => format!("{other:?}"),
    }
}

/// One session in `mode` whose model calls `name` with `input` once and then answers `ok`.
async fn one_call(
    place: &Place,
    options: Value,
    mode: &str,
    name: &str,
    input: Value,
) -> (Watch, testkit::Endpoint, TestHost) {
    let ep = endpoint(vec![call("c1", name, input), text("ok")]);
    let mut options = options;
    options["baseUrl"] = json!(ep.base_url());
    options["model"] = json!("m");
    let agent = agent(options, place.embedder());
    let th = host(vec![Arc::new(agent)]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("tool"),
        Some(&place.work),
        json!({ "permissionMode": mode }),
    )
    .await;
    w.send("t1", "go").await;
    (w, ep, th)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_008_083_084_offered_tools_follow_the_options() {
    let place = Place::new();
    let store = place.home.join("store");
    for (options, expected) in [
        (
            json!({ "store": store.display().to_string() }),
            vec![
                "ask_user",
                "edit_file",
                "list_files",
                "memory_read",
                "memory_write",
                "read_file",
                "search_files",
                "shell_exec",
                "web_fetch",
                "write_file",
            ],
        ),
        (
            json!({ "store": store.display().to_string(), "tools": { "web": { "search": { "duckduckgo": true } } } }),
            vec![
                "ask_user",
                "edit_file",
                "list_files",
                "memory_read",
                "memory_write",
                "read_file",
                "search_files",
                "shell_exec",
                "web_fetch",
                "web_search",
                "write_file",
            ],
        ),
        (
            json!({ "memory": true, "tools": { "shell": false } }),
            vec![
                "ask_user",
                "edit_file",
                "list_files",
                "read_file",
                "search_files",
                "web_fetch",
                "write_file",
            ],
        ),
        (
            json!({ "memory": true, "strictTools": false, "tools": { "filse": true } }),
            vec![
                "ask_user",
                "edit_file",
                "list_files",
                "read_file",
                "search_files",
                "shell_exec",
                "web_fetch",
                "write_file",
            ],
        ),
    ] {
        let (mut w, ep, th) = one_call(
            &place,
            options,
            "auto",
            "list_files",
            json!({ "pattern": "*" }),
        )
        .await;
        w.end("t1").await;
        assert_eq!(offered(&ep.chat_bodies()[0]), expected);
        w.assert_mirror(&th).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_087_a_read_is_titled_by_the_file_relative_to_the_workspace() {
    let place = Place::new();
    std::fs::write(place.work.join("a.txt"), "hello world").unwrap();
    let absolute = place.work.join("a.txt").display().to_string();
    for path in ["a.txt", absolute.as_str()] {
        let (mut w, ep, th) = one_call(
            &place,
            json!({ "memory": true }),
            "auto",
            "read_file",
            json!({ "path": path }),
        )
        .await;
        w.end("t1").await;
        w.assert_mirror(&th).await;
        match w.last_calls().first() {
            Some(ToolCallState::Completed(c)) => {
                assert_eq!(plain(&c.invocation_message), "a.txt");
                assert_eq!(plain(&c.past_tense_message), "a.txt");
                assert!(c.success);
                let content = serde_json::to_string(&c.content).unwrap();
                assert!(content.contains("1│hello world"), "{content}");
            }
            other => panic!("expected a completed call, got {other:?}"),
        }
        assert!(request_text(&ep.chat_bodies()[1]).contains("1│hello world"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_088_a_shell_call_is_drawn_as_a_terminal() {
    let place = Place::new();
    let (mut w, _ep, th) = one_call(
        &place,
        json!({ "memory": true }),
        "bypassPermissions",
        "shell_exec",
        json!({ "command": "echo hi" }),
    )
    .await;
    w.end("t1").await;
    w.assert_mirror(&th).await;
    let actions: Vec<StateAction> = w.chat_actions().into_iter().cloned().collect();
    let start = actions
        .iter()
        .find_map(|a| match a {
            StateAction::ChatToolCallStart(s) => Some(s.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(start.intention.as_deref(), Some("echo hi"));
    assert_eq!(
        start.meta,
        serde_json::from_value(json!({ "toolKind": "terminal" })).unwrap()
    );
    let ready = actions
        .iter()
        .find_map(|a| match a {
            StateAction::ChatToolCallReady(s) => Some(s.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(ready.tool_input, Some(ToolInput::Inline("echo hi".into())));
    let meta = ready.meta.clone().unwrap();
    assert!(meta.contains_key("ahpd.startedAt") && !meta.contains_key("ahpd.endedAt"));
    assert_eq!(meta["toolKind"], "terminal");
    let complete = actions
        .iter()
        .find_map(|a| match a {
            StateAction::ChatToolCallComplete(s) => Some(s.clone()),
            _ => None,
        })
        .unwrap();
    let meta = complete.meta.unwrap();
    assert_eq!(meta["toolKind"], "terminal");
    assert_eq!(meta["ahpd.startedAt"], ready.meta_started());
    assert!(meta.contains_key("ahpd.endedAt") && meta.contains_key("ahpd.durationMs"));
    assert!(complete.result.success);
    for a in &actions {
        let v = serde_json::to_value(a).unwrap();
        for key in ["startedAt", "endedAt", "durationMs"] {
            assert!(
                v.get("_meta").and_then(|m| m.get(key)).is_none(),
                "a bare {key}"
            );
        }
    }
}

trait StartedAt {
    fn meta_started(&self) -> Value;
}

impl StartedAt for ahp_types::actions::ChatToolCallReadyAction {
    fn meta_started(&self) -> Value {
        self.meta
            .as_ref()
            .and_then(|m| m.get("ahpd.startedAt").cloned())
            .unwrap_or(Value::Null)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_089_a_shell_call_the_mode_refuses_has_no_times() {
    let place = Place::new();
    let (mut w, ep, th) = one_call(
        &place,
        json!({ "memory": true }),
        "plan",
        "shell_exec",
        json!({ "command": "echo hi" }),
    )
    .await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    w.assert_mirror(&th).await;
    match w.last_calls().first() {
        Some(ToolCallState::Completed(c)) => {
            assert!(!c.success);
            assert_eq!(
                c.meta,
                serde_json::from_value(json!({ "toolKind": "terminal" })).unwrap()
            );
        }
        other => panic!("expected a failed call, got {other:?}"),
    }
    assert!(request_text(&ep.chat_bodies()[1]).contains("the mode is plan"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_092_094_edits_are_announced_before_and_after() {
    let place = Place::new();
    std::fs::write(place.work.join("a.txt"), "one\n").unwrap();
    let mut embedder = place.embedder();
    let notices = notices_into(&mut embedder);
    // An edit of a file never read: refused by the read rule, with both notices.
    let ep = endpoint(vec![
        call(
            "c1",
            "edit_file",
            json!({ "path": "a.txt", "old": "one", "new": "two" }),
        ),
        text("refused"),
        call("c2", "read_file", json!({ "path": "a.txt" })),
        call(
            "c3",
            "edit_file",
            json!({ "path": "a.txt", "old": "one", "new": "two" }),
        ),
        text("edited"),
    ]);
    let agent = agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        embedder,
    );
    let th = host(vec![Arc::new(agent)]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("edits"),
        Some(&place.work),
        json!({ "permissionMode": "acceptEdits" }),
    )
    .await;
    w.send("t1", "edit").await;
    w.end("t1").await;
    assert_eq!(
        std::fs::read_to_string(place.work.join("a.txt")).unwrap(),
        "one\n"
    );
    assert!(request_text(&ep.chat_bodies()[1]).contains("read it with read_file first"));
    let file = place.work.join("a.txt");
    assert_eq!(
        *notices.lock().unwrap(),
        [
            ("t1".to_owned(), file.clone(), EditPhase::Before),
            ("t1".to_owned(), file.clone(), EditPhase::After),
        ]
    );
    notices.lock().unwrap().clear();
    w.send("t2", "read then edit").await;
    w.end("t2").await;
    assert_eq!(
        std::fs::read_to_string(place.work.join("a.txt")).unwrap(),
        "two\n"
    );
    assert_eq!(
        *notices.lock().unwrap(),
        [
            ("t2".to_owned(), file.clone(), EditPhase::Before),
            ("t2".to_owned(), file.clone(), EditPhase::After),
        ]
    );
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_104_each_mode_decides_as_the_table_says() {
    // (mode, tool, input, outcome): run, ask or deny.
    let place = Place::new();
    std::fs::write(place.work.join("in.txt"), "x").unwrap();
    let outside = place.home.join("out.txt");
    std::fs::write(&outside, "y").unwrap();
    let out = outside.display().to_string();
    let rows: Vec<(&str, Value, [&str; 6])> = vec![
        (
            "read_file",
            json!({ "path": "in.txt" }),
            ["run", "run", "run", "run", "run", "run"],
        ),
        (
            "read_file",
            json!({ "path": out }),
            ["ask", "ask", "ask", "run", "run", "deny"],
        ),
        (
            "write_file",
            json!({ "path": "new.txt", "content": "z" }),
            ["ask", "run", "deny", "ask", "run", "deny"],
        ),
        (
            "write_file",
            json!({ "path": place.home.join("new.txt").display().to_string(), "content": "z" }),
            ["ask", "ask", "deny", "ask", "run", "deny"],
        ),
        (
            "shell_exec",
            json!({ "command": "true" }),
            ["ask", "ask", "deny", "ask", "run", "deny"],
        ),
        (
            "web_fetch",
            json!({ "url": "http://127.0.0.1:1/" }),
            ["ask", "ask", "ask", "run", "run", "deny"],
        ),
    ];
    let modes = [
        "default",
        "acceptEdits",
        "plan",
        "auto",
        "bypassPermissions",
        "dontAsk",
    ];
    for (tool, input, outcomes) in rows {
        for (mode, expected) in modes.iter().zip(outcomes) {
            let (mut w, ep, _th) =
                one_call(&place, json!({ "memory": true }), mode, tool, input.clone()).await;
            let seen = loop {
                let env = w.next().await;
                match &env.action {
                    StateAction::SessionInputNeededSet(_) => break "ask",
                    StateAction::ChatToolCallComplete(_) | StateAction::ChatTurnComplete(_) => {
                        let text = ep
                            .chat_bodies()
                            .get(1)
                            .map(request_text)
                            .unwrap_or_default();
                        w.end("t1").await;
                        let text = if text.is_empty() {
                            request_text(&ep.chat_bodies()[1])
                        } else {
                            text
                        };
                        break if text.contains(&format!("the mode is {mode}")) {
                            "deny"
                        } else {
                            "run"
                        };
                    }
                    _ => {}
                }
            };
            assert_eq!(seen, expected, "{tool} {input} under {mode}");
            let _ = std::fs::remove_file(place.work.join("new.txt"));
            let _ = std::fs::remove_file(place.home.join("new.txt"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_128_usage_is_a_running_total_with_the_cost_last() {
    let place = Place::new();
    let first = Reply::stream(vec![
        Frame::Chunk(chunk::role()),
        Frame::Chunk(chunk::tool_call(
            0,
            Some("c1"),
            Some("list_files"),
            "{\"pattern\":\"*\"}",
        )),
        Frame::Chunk(chunk::finish("tool_calls")),
        Frame::Chunk(chunk::usage(100, 20)),
    ]);
    let second = Reply::stream(vec![
        Frame::Chunk(chunk::role()),
        Frame::Chunk(chunk::text("done")),
        Frame::Chunk(chunk::finish("stop")),
        Frame::Chunk(chunk::usage_value(json!({
            "prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60,
            "prompt_tokens_details": { "cached_tokens": 5 }
        }))),
    ]);
    let ep = endpoint(vec![first, second, text("again")]);
    let agent = agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    );
    let th = host(vec![Arc::new(agent)]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("usage"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "count").await;
    w.end("t1").await;
    let usages: Vec<(i64, i64, Option<i64>)> = w
        .chat_actions()
        .iter()
        .filter_map(|a| match a {
            StateAction::ChatUsage(u) => {
                assert!(u.usage.meta.is_none(), "no price, no _meta");
                Some((
                    u.usage.input_tokens.unwrap_or(0),
                    u.usage.output_tokens.unwrap_or(0),
                    u.usage.cache_read_tokens,
                ))
            }
            _ => None,
        })
        .collect();
    // The run's final tally equals the last running total here, and the host publishes no
    // replace-style action that changes nothing, so the final one may not reach clients.
    assert_eq!(usages[..2], [(100, 20, None), (150, 30, Some(5))]);
    assert!(usages[2..].iter().all(|u| *u == (150, 30, Some(5))));
    let actions = w.chat_actions();
    let complete = actions
        .iter()
        .position(|a| matches!(a, StateAction::ChatTurnComplete(_)))
        .unwrap();
    let last_usage = actions
        .iter()
        .rposition(|a| matches!(a, StateAction::ChatUsage(_)))
        .unwrap();
    assert!(last_usage < complete);
    w.assert_mirror(&th).await;
    // A second turn counts from zero.
    w.send("t2", "again").await;
    w.end("t2").await;
    let last = w
        .chat_actions()
        .iter()
        .rev()
        .find_map(|a| match a {
            StateAction::ChatUsage(u) => Some(u.usage.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(last.input_tokens, Some(10));
    assert_eq!(last.model.as_deref(), Some("m"));
}
