//! Whole conversations: a host with the cofold agent, the official client over a real WebSocket,
//! and the scripted endpoint over real HTTP.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::state::{ResponsePart, SessionStatus, ToolCallState};
use serde_json::json;

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_079_a_turn_reads_edits_searches_and_runs_a_command() {
    let place = Place::new();
    std::fs::write(place.work.join("a.txt"), "hello world\n").unwrap();
    let ep = endpoint(vec![
        call("c1", "read_file", json!({ "path": "a.txt" })),
        call(
            "c2",
            "edit_file",
            json!({ "path": "a.txt", "old": "world", "new": "there" }),
        ),
        call("c3", "search_files", json!({ "pattern": "there" })),
        call("c4", "shell_exec", json!({ "command": "echo hi" })),
        text("all done"),
    ]);
    let agent = agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    );
    let th = host(vec![Arc::new(agent)]).await;
    let id = fresh_id("conv");
    let mut w = Watch::create(
        &th,
        "cofold",
        &id,
        Some(&place.work),
        json!({ "permissionMode": "bypassPermissions" }),
    )
    .await;
    w.send("t1", "Fix the greeting\nplease").await;
    let end = w.end("t1").await;
    assert!(matches!(end, StateAction::ChatTurnComplete(_)), "{end:?}");
    assert_eq!(
        std::fs::read_to_string(place.work.join("a.txt")).unwrap(),
        "hello there\n"
    );

    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 5);
    assert_eq!(bodies[0]["model"], "m");
    assert_eq!(bodies[0]["messages"][0]["role"], "system");
    assert_eq!(
        offered(&bodies[0]),
        [
            "ask_user",
            "edit_file",
            "list_files",
            "read_file",
            "search_files",
            "shell_exec",
            "web_fetch",
            "write_file"
        ]
    );
    assert!(request_text(&bodies[1]).contains("1│hello world"));
    assert!(request_text(&bodies[3]).contains("a.txt"));
    assert!(request_text(&bodies[4]).contains("hi"));

    w.assert_mirror(&th).await;
    let calls = w.last_calls();
    let titles: Vec<(String, bool)> = calls
        .iter()
        .map(|c| match c {
            ToolCallState::Completed(c) => (
                match &c.invocation_message {
                    ahp_types::common::StringOrMarkdown::Plain(s) => s.clone(),
                    other => format!("{other:?}"),
                },
                c.success,
            ),
            other => panic!("not completed: {other:?}"),
        })
        .collect();
    assert_eq!(
        titles,
        [
            ("a.txt".to_owned(), true),
            ("a.txt".to_owned(), true),
            ("there".to_owned(), true),
            ("echo hi".to_owned(), true),
        ]
    );
    let turn = w.chat_state().turns.last().unwrap().clone();
    let answer: String = turn
        .response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Markdown(m) => Some(m.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(answer, "all done");
    let title = w.mirror.sessions[&w.session].title.clone();
    assert_eq!(title, "Fix the greeting");

    // A second turn carries the first exchange in its request.
    ep.push_reply(text("second answer"));
    w.send("t2", "and again").await;
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    let bodies = ep.chat_bodies();
    assert!(request_text(&bodies[5]).contains("Fix the greeting"));
    assert!(request_text(&bodies[5]).contains("all done"));
    w.assert_mirror(&th).await;
    assert_eq!(w.chat_state().turns.len(), 2);
    assert_eq!(w.mirror.sessions[&w.session].status, SessionStatus::Idle.0);
}
