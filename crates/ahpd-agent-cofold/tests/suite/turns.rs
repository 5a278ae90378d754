//! Approvals, a stop, steering and a failed turn, through the host and the official client.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::state::{
    SessionInputRequest, SessionStatus, ToolCallCancellationReason, ToolCallConfirmationReason,
    ToolCallState,
};
use serde_json::json;
use testkit::chunk;
use testkit::{Frame, Gate, Reply};

use super::support::*;

fn confirm(turn: &str, call: &str, approved: bool) -> StateAction {
    let mut v = json!({ "type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call, "approved": approved });
    if approved {
        v["selectedOptionId"] = json!("allow-once");
    }
    serde_json::from_value(v).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_095_096_097_099_a_write_under_default_waits_for_a_person_and_a_refusal_reaches_the_model()
 {
    let place = Place::new();
    let ep = endpoint(vec![
        call(
            "c1",
            "write_file",
            json!({ "path": "a.txt", "content": "new" }),
        ),
        text("written"),
        call(
            "c2",
            "write_file",
            json!({ "path": "b.txt", "content": "no" }),
        ),
        text("fine"),
    ]);
    let agent = agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    );
    let th = host(vec![Arc::new(agent)]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("approve"),
        Some(&place.work),
        json!({ "permissionMode": "default" }),
    )
    .await;
    let other = client(&th.url, "second").await;
    w.send("t1", "write it").await;
    let set = w
        .until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    match &set.action {
        StateAction::SessionInputNeededSet(a) => match &a.request {
            SessionInputRequest::ToolConfirmation(r) => assert!(r.id.contains("c1"), "{r:?}"),
            other => panic!("expected a tool confirmation, got {other:?}"),
        },
        _ => unreachable!(),
    }
    w.assert_mirror(&th).await;
    assert!(
        !place.work.join("a.txt").exists(),
        "nothing written before the answer"
    );
    match w.last_calls().first() {
        Some(ToolCallState::PendingConfirmation(p)) => {
            assert_eq!(
                p.invocation_message,
                ahp_types::common::StringOrMarkdown::Plain("a.txt".into())
            );
            assert_eq!(
                p.confirmation_title,
                Some(ahp_types::common::StringOrMarkdown::Plain(
                    "Write a.txt?".into()
                ))
            );
        }
        other => panic!("expected a pending confirmation, got {other:?}"),
    }
    other
        .dispatch(w.chat.clone(), confirm("t1", "c1", true))
        .await
        .unwrap();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(
        std::fs::read_to_string(place.work.join("a.txt")).unwrap(),
        "new"
    );
    w.assert_mirror(&th).await;
    match w.last_calls().first() {
        Some(ToolCallState::Completed(c)) => {
            assert_eq!(c.confirmed, ToolCallConfirmationReason::UserAction);
            let meta = c.meta.clone().unwrap_or_default();
            assert!(meta.contains_key("ahpd.endedAt") && meta.contains_key("ahpd.durationMs"));
        }
        other => panic!("expected a completed call, got {other:?}"),
    }
    let readies = w
        .chat_actions()
        .iter()
        .filter(|a| matches!(a, StateAction::ChatToolCallReady(r) if r.tool_call_id == "c1"))
        .count();
    assert_eq!(readies, 1, "the host's ready only");

    // A refusal: nothing written, the model reads the decline.
    w.send("t2", "another").await;
    w.until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    w.client
        .dispatch(w.chat.clone(), confirm("t2", "c2", false))
        .await
        .unwrap();
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert!(!place.work.join("b.txt").exists());
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 4);
    assert!(request_text(&bodies[3]).contains("The person declined this action"));
    assert!(!request_text(&bodies[2]).contains("The person declined this action"));
    w.assert_mirror(&th).await;
    match w.last_calls().first() {
        Some(ToolCallState::Cancelled(c)) => {
            assert_eq!(c.reason, ToolCallCancellationReason::Denied)
        }
        other => panic!("expected a cancelled call, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_080_a_stop_while_text_streams_ends_the_turn_once() {
    let place = Place::new();
    let gate = Gate::new();
    let ep = endpoint(vec![Reply::stream(vec![
        Frame::Chunk(chunk::role()),
        Frame::Chunk(chunk::text("partial")),
        Frame::Gate(gate.clone()),
        Frame::Chunk(chunk::text(" never")),
        Frame::Chunk(chunk::finish("stop")),
    ])]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent.clone()]).await;
    let id = fresh_id("stop");
    let mut w = Watch::create(&th, "cofold", &id, Some(&place.work), json!({})).await;
    w.send("t1", "talk").await;
    w.until(|a| matches!(a, StateAction::ChatDelta(_))).await;
    let cancel: StateAction = serde_json::from_value(
        json!({ "type": "chat/turnCancelled", "turnId": "t1", "duration": 0 }),
    )
    .unwrap();
    w.client.dispatch(w.chat.clone(), cancel).await.unwrap();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnCancelled(_)
    ));
    // The run lets go of its request once it is cancelled.
    ep.wait_for_closed_connections(1).await;
    gate.open();
    w.assert_mirror(&th).await;
    let actions = w.chat_actions();
    let last = actions
        .iter()
        .rposition(|a| matches!(a, StateAction::ChatTurnCancelled(_)))
        .unwrap();
    let after: Vec<_> = actions[last + 1..]
        .iter()
        .filter(|a| !matches!(a, StateAction::ChatActivityChanged(_)))
        .collect();
    assert!(after.is_empty(), "nothing after the stop: {after:?}");
    let cancels = actions
        .iter()
        .filter(|a| matches!(a, StateAction::ChatTurnCancelled(_)))
        .count();
    assert_eq!(cancels, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_114_a_steering_message_reaches_the_next_step_of_the_running_turn() {
    let place = Place::new();
    std::fs::write(place.work.join("a.txt"), "hello\n").unwrap();
    let gate = Gate::new();
    let ep = endpoint(vec![
        call("c1", "read_file", json!({ "path": "a.txt" })).held(&gate),
        text("corrected"),
    ]);
    let agent = agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    );
    let th = host(vec![Arc::new(agent)]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("steer"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "read a.txt").await;
    gate.reached().await;
    let steer: StateAction = serde_json::from_value(json!({
        "type": "chat/pendingMessageSet", "kind": "steering", "id": "s1",
        "message": { "text": "use the second line instead", "origin": { "kind": "user" } }
    }))
    .unwrap();
    w.client.dispatch(w.chat.clone(), steer).await.unwrap();
    w.until(|a| matches!(a, StateAction::ChatPendingMessageSet(_)))
        .await;
    gate.open();
    w.until(|a| matches!(a, StateAction::ChatPendingMessageRemoved(r) if r.id == "s1"))
        .await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 2, "one turn, two steps");
    assert!(!request_text(&bodies[0]).contains("second line"));
    assert!(request_text(&bodies[1]).contains("use the second line instead"));
    w.assert_mirror(&th).await;
    assert_eq!(w.chat_state().turns.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_081_122_123_a_failing_endpoint_fails_the_turn_with_a_resumable_error() {
    let place = Place::new();
    // No reply scripted: every chat request gets the endpoint's 500.
    let ep = endpoint(vec![]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent.clone()]).await;
    let id = fresh_id("fail");
    let mut w = Watch::create(&th, "cofold", &id, Some(&place.work), json!({})).await;
    w.send("t1", "hello").await;
    match w.end("t1").await {
        StateAction::ChatError(e) => {
            assert_eq!(e.part.error.error_type, "turnFailed");
            assert!(!e.part.error.message.is_empty());
            assert_eq!(e.part.resumable, Some(true));
        }
        other => panic!("expected chat/error, got {other:?}"),
    }
    w.assert_mirror(&th).await;
    assert_eq!(
        w.chat_state().status & SessionStatus::Error.0,
        SessionStatus::Error.0
    );

    // Resumed: the same turn id runs again with its prompt once.
    ep.push_reply(text("recovered"));
    let resume: StateAction =
        serde_json::from_value(json!({ "type": "chat/turnResume", "turnId": "t1" })).unwrap();
    w.client.dispatch(w.chat.clone(), resume).await.unwrap();
    w.until(|a| matches!(a, StateAction::ChatTurnResume(_)))
        .await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let last = ep.chat_bodies().last().cloned().unwrap();
    assert_eq!(request_text(&last).matches("hello").count(), 1);
    w.assert_mirror(&th).await;
    assert_eq!(w.chat_state().turns.len(), 1);
    // Case 81: a later good turn brings the status back to idle.
    assert_eq!(w.chat_state().status & SessionStatus::Error.0, 0);
    // Case 123: the conversation was made again in the same folder, with one turn.
    use ahpd_sdk::Agent;
    assert_eq!(agent.transcript(&id).await.unwrap().len(), 1);
    let row = agent.find(&id).await.expect("listed again");
    assert_eq!(
        row.working_directories,
        [ahpd_sdk::util::file_uri(&place.work)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_031_032_a_turn_with_no_model_fails_with_the_sentence() {
    let place = Place::new();
    place.copapo(json!({}));
    let agent = agent(json!({ "memory": true }), place.embedder());
    let th = host(vec![Arc::new(agent)]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("nomodel"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "hello").await;
    match w.end("t1").await {
        StateAction::ChatError(e) => {
            assert_eq!(
                e.part.error.message,
                format!(
                    "cofold: no model is configured; add \"model\" (as \"<provider>/<model>\") to {}",
                    place.xdg.join("copapo").join("config.json").display()
                )
            );
            assert_eq!(e.part.resumable, None);
        }
        other => panic!("expected chat/error, got {other:?}"),
    }
    w.assert_mirror(&th).await;
}

fn turn_of(action: &StateAction) -> Option<&str> {
    let v = match action {
        StateAction::ChatDelta(a) => &a.turn_id,
        StateAction::ChatResponsePart(a) => &a.turn_id,
        StateAction::ChatUsage(a) => &a.turn_id,
        StateAction::ChatTurnComplete(a) => &a.turn_id,
        StateAction::ChatError(a) => &a.turn_id,
        StateAction::ChatToolCallStart(a) => &a.turn_id,
        _ => return None,
    };
    Some(v.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_117_a_turn_sent_while_one_streams_takes_its_place_and_runs_after_it() {
    let place = Place::new();
    let gate = Gate::new();
    let ep = endpoint(vec![
        Reply::stream(vec![
            Frame::Chunk(chunk::role()),
            Frame::Chunk(chunk::text("one")),
            Frame::Gate(gate.clone()),
            Frame::Chunk(chunk::text(" more")),
            Frame::Chunk(chunk::finish("stop")),
        ]),
        text("second answer"),
    ]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent.clone()]).await;
    let id = fresh_id("replace");
    let mut w = Watch::create(&th, "cofold", &id, Some(&place.work), json!({})).await;
    w.send("t1", "first prompt").await;
    w.until(|a| matches!(a, StateAction::ChatDelta(_))).await;
    w.send("t2", "second prompt").await;
    let replaced_at = w.envelopes.len();
    assert_eq!(ep.chat_requests().len(), 1, "t2 waits behind t1's run");
    gate.open();
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 2);
    assert!(request_text(&bodies[1]).contains("first prompt"));
    assert!(request_text(&bodies[1]).contains("second prompt"));
    let late: Vec<_> = w.envelopes[replaced_at..]
        .iter()
        .filter(|e| turn_of(&e.action) == Some("t1"))
        .collect();
    assert!(late.is_empty(), "nothing for the replaced turn: {late:?}");
    w.assert_mirror(&th).await;
    let ids: Vec<&str> = w.chat_state().turns.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["t2"]);
    use ahpd_sdk::Agent;
    let stored: Vec<String> = agent
        .transcript(&id)
        .await
        .unwrap()
        .iter()
        .map(|t| t.message.text.clone())
        .collect();
    assert_eq!(stored, ["first prompt", "second prompt"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_125_a_resumed_attempt_shows_a_repeated_call_id_with_its_attempt() {
    let place = Place::new();
    let ep = endpoint(vec![call("c1", "list_files", json!({ "pattern": "*" }))]);
    let agent = agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    );
    let th = host(vec![Arc::new(agent)]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("retry"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "list").await;
    match w.end("t1").await {
        StateAction::ChatError(e) => assert_eq!(e.part.resumable, Some(true)),
        other => panic!("expected a failure, got {other:?}"),
    }
    ep.push_reply(call("c1", "list_files", json!({ "pattern": "*" })));
    ep.push_reply(text("listed"));
    let before = w.envelopes.len();
    let resume: StateAction =
        serde_json::from_value(json!({ "type": "chat/turnResume", "turnId": "t1" })).unwrap();
    w.client.dispatch(w.chat.clone(), resume).await.unwrap();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let ids: Vec<String> = w.envelopes[before..]
        .iter()
        .filter_map(|e| match &e.action {
            StateAction::ChatToolCallStart(a) => Some(a.tool_call_id.clone()),
            StateAction::ChatToolCallReady(a) => Some(a.tool_call_id.clone()),
            StateAction::ChatToolCallComplete(a) => Some(a.tool_call_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["c1:2", "c1:2", "c1:2"]);
    w.assert_mirror(&th).await;
    let turn = w.chat_state().turns.last().unwrap().clone();
    let mut part_ids: Vec<String> = turn
        .response_parts
        .iter()
        .filter_map(|p| match p {
            ahp_types::state::ResponsePart::Markdown(m) => Some(m.id.clone()),
            ahp_types::state::ResponsePart::Reasoning(r) => Some(r.id.clone()),
            ahp_types::state::ResponsePart::ToolCall(t) => serde_json::to_value(&t.tool_call)
                .ok()?["toolCallId"]
                .as_str()
                .map(str::to_owned),
            _ => None,
        })
        .collect();
    let all = part_ids.len();
    part_ids.sort();
    part_ids.dedup();
    assert_eq!(part_ids.len(), all, "no part id twice: {part_ids:?}");
}
