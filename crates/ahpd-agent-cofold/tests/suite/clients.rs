//! Tools a client runs.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::state::{SessionInputRequest, ToolCallContributor};
use serde_json::json;

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_111_112_a_client_tool_runs_on_its_client_and_its_result_reaches_the_model() {
    let place = Place::new();
    let ep = endpoint(vec![
        call("c1", "probe__openFile", json!({ "path": "/a.txt" })),
        text("opened it"),
    ]);
    let agent = agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    );
    let th = host(vec![Arc::new(agent)]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("client"),
        Some(&place.work),
        json!({}),
    )
    .await;
    let set: StateAction = serde_json::from_value(json!({
        "type": "session/activeClientSet",
        "activeClient": { "clientId": "probe", "tools": [{ "name": "openFile", "description": "Opens a file in the editor" }] }
    }))
    .unwrap();
    w.client.dispatch(w.session.clone(), set).await.unwrap();
    w.until(|a| matches!(a, StateAction::SessionActiveClientSet(_)))
        .await;
    w.send("t1", "open a.txt").await;
    let asked = w
        .until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    match &asked.action {
        StateAction::SessionInputNeededSet(s) => assert!(
            matches!(&s.request, SessionInputRequest::ToolClientExecution(r) if r.client_id == "probe"),
            "{s:?}"
        ),
        _ => unreachable!(),
    }
    assert!(offered(&ep.chat_bodies()[0]).contains(&"probe__openFile".to_owned()));
    let start = w
        .chat_actions()
        .into_iter()
        .find_map(|a| match a {
            StateAction::ChatToolCallStart(s) => Some(s.clone()),
            _ => None,
        })
        .unwrap();
    match start.contributor {
        Some(ToolCallContributor::Client(c)) => assert_eq!(c.client_id, "probe"),
        other => panic!("expected the client as contributor, got {other:?}"),
    }
    let done: StateAction = serde_json::from_value(json!({
        "type": "chat/toolCallComplete", "turnId": "t1", "toolCallId": "c1",
        "result": { "success": true, "pastTenseMessage": "opened", "content": [{ "type": "text", "text": "opened /a.txt" }] }
    }))
    .unwrap();
    w.client.dispatch(w.chat.clone(), done).await.unwrap();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert!(request_text(&ep.chat_bodies()[1]).contains("opened /a.txt"));
    let engine_ready = w
        .envelopes
        .iter()
        .filter(|e| e.origin.is_none())
        .filter(|e| matches!(&e.action, StateAction::ChatToolCallComplete(_)))
        .count();
    assert!(engine_ready <= 1);
    w.assert_mirror(&th).await;
}
