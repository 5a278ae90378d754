//! Engine cases of "Steering, replacement, cancel" and the close of case 82 (see
//! `docs/acceptance.md`): the queue, replacement and stop through the host and the official
//! client.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::state::SessionInputRequest;
use ahpd_sdk::Agent;
use cofold_agents::event::{EventBody, OutcomeKind};
use cofold_agents::store::{RunRef, RunStatus, Store};
use serde_json::{Value, json};
use testkit::{Frame, Gate, Reply, chunk};

use super::support::*;

fn action(v: Value) -> StateAction {
    serde_json::from_value(v).expect("an action")
}

fn steering(id: &str, text: &str) -> StateAction {
    action(
        json!({ "type": "chat/pendingMessageSet", "kind": "steering", "id": id,
        "message": { "text": text, "origin": { "kind": "user" } } }),
    )
}

fn queued(id: &str, text: &str) -> StateAction {
    action(
        json!({ "type": "chat/pendingMessageSet", "kind": "queued", "id": id,
        "message": { "text": text, "origin": { "kind": "user" } } }),
    )
}

fn cancel(turn: &str) -> StateAction {
    action(json!({ "type": "chat/turnCancelled", "turnId": turn, "duration": 0 }))
}

fn confirm(turn: &str, call: &str) -> StateAction {
    action(
        json!({ "type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call,
        "approved": true, "selectedOptionId": "allow-once" }),
    )
}

/// A text stream that stops at `gate` after its first words.
fn held_stream(first: &str, gate: &Gate) -> Reply {
    Reply::stream(vec![
        Frame::Chunk(chunk::role()),
        Frame::Chunk(chunk::text(first)),
        Frame::Gate(gate.clone()),
        Frame::Chunk(chunk::text(" and more")),
        Frame::Chunk(chunk::finish("stop")),
    ])
}

async fn setup(
    place: &Place,
    options: Value,
    config: Value,
) -> (Arc<ahpd_agent_cofold::CofoldAgent>, TestHost, Watch, String) {
    let agent = Arc::new(agent(options, place.embedder()));
    let th = host(vec![agent.clone()]).await;
    let id = fresh_id("queue");
    let w = Watch::create(&th, "cofold", &id, Some(&place.work), config).await;
    (agent, th, w, id)
}

fn started_turn(a: &StateAction) -> Option<(String, String)> {
    match a {
        StateAction::ChatTurnStarted(s) => Some((s.turn_id.clone(), s.message.text.clone())),
        _ => None,
    }
}

/// A session of `agent` on a context with no host, and the probe that sees what it does.
pub(super) async fn detached_session(
    agent: &ahpd_agent_cofold::CofoldAgent,
    place: &Place,
    id: &str,
) -> (Box<dyn ahpd_sdk::Session>, ahpd_sdk::agent::ContextProbe) {
    let uri = format!("cofold:/{id}");
    let chat = ahpd_sdk::util::default_chat_uri(&uri);
    let (ctx, probe) = ahpd_sdk::SessionContext::detached(&uri, &chat);
    let session = agent
        .create(ahpd_sdk::SessionStart {
            session_uri: uri,
            chat_uri: chat,
            backend_id: id.to_owned(),
            resume: None,
            fork: None,
            working_directory: Some(place.work.clone()),
            additional_directories: Vec::new(),
            settings: Default::default(),
            ctx,
        })
        .await
        .expect("a session");
    (session, probe)
}

pub(super) fn turn(id: &str, text: &str) -> ahpd_sdk::TurnRequest {
    ahpd_sdk::TurnRequest {
        turn_id: id.to_owned(),
        started_at: ahpd_sdk::util::now_iso(),
        message: message(text),
        queued_message_id: None,
        settings: Default::default(),
        client_id: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_082_a_session_closed_during_a_turn_cancels_its_run() {
    let place = Place::new();
    let store = place.home.join("store");
    let gate = Gate::new();
    let ep = endpoint(vec![held_stream("partial", &gate)]);
    let agent = agent(
        json!({ "store": store.display().to_string(), "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    );
    let id = fresh_id("close");
    let (mut session, mut probe) = detached_session(&agent, &place, &id).await;
    session.begin(turn("t1", "talk"));
    gate.reached().await;
    // `close` returns only once the run has ended: its record is final when it does.
    session.close().await;
    let runs = super::reopen::runs_of(&store);
    let run = runs.list_runs(&id, None).await.unwrap().remove(0);
    assert_eq!(run.status, RunStatus::Cancelled);
    let events = runs
        .list_events(
            &RunRef {
                session_id: id.clone(),
                run_id: run.run_id,
            },
            None,
        )
        .await
        .unwrap();
    let reason = events.iter().find_map(|e| match &e.body {
        EventBody::RunFinished { outcome } => match &outcome.kind {
            OutcomeKind::Cancelled { reason } => reason.clone(),
            _ => None,
        },
        _ => None,
    });
    assert_eq!(reason.as_deref(), Some("the session closed"));
    gate.open();
    // Nothing of the closed turn's end is said.
    while let Ok(Some(event)) = tokio::time::timeout(std::time::Duration::ZERO, probe.next()).await
    {
        if let ahpd_sdk::agent::ContextEvent::Emit(a) = event {
            assert!(
                !matches!(
                    a,
                    StateAction::ChatTurnComplete(_) | StateAction::ChatError(_)
                ),
                "{a:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_110_a_steer_sent_while_a_call_waits_for_approval_follows_the_call() {
    let place = Place::new();
    let ep = endpoint(vec![
        call(
            "c1",
            "write_file",
            json!({ "path": "a.txt", "content": "once" }),
        ),
        text("done"),
    ]);
    let (_agent, th, mut w, _id) = setup(
        &place,
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        json!({ "permissionMode": "default" }),
    )
    .await;
    w.send("t1", "write it").await;
    w.until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    w.client
        .dispatch(w.chat.clone(), steering("s1", "CORRECTION"))
        .await
        .unwrap();
    w.until(|a| matches!(a, StateAction::ChatPendingMessageSet(_)))
        .await;
    w.client
        .dispatch(w.chat.clone(), confirm("t1", "c1"))
        .await
        .unwrap();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 2);
    assert!(!request_text(&bodies[0]).contains("CORRECTION"));
    assert!(request_text(&bodies[1]).contains("CORRECTION"));
    assert_eq!(
        std::fs::read_to_string(place.work.join("a.txt")).unwrap(),
        "once"
    );
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_115_a_steer_during_the_final_step_becomes_the_next_turn_ahead_of_the_queue() {
    let place = Place::new();
    let gate = Gate::new();
    let ep = endpoint(vec![
        held_stream("the answer", &gate),
        text("about the steer"),
        text("about the queued one"),
    ]);
    let (_agent, th, mut w, _id) = setup(
        &place,
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        json!({}),
    )
    .await;
    w.send("t1", "answer me").await;
    gate.reached().await;
    w.client
        .dispatch(w.chat.clone(), queued("q1", "QUEUED"))
        .await
        .unwrap();
    w.until(|a| matches!(a, StateAction::ChatPendingMessageSet(_)))
        .await;
    w.client
        .dispatch(w.chat.clone(), steering("s1", "STEER"))
        .await
        .unwrap();
    w.until(|a| matches!(a, StateAction::ChatPendingMessageSet(s) if s.id == "s1"))
        .await;
    gate.open();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let first = w.until(|a| started_turn(a).is_some()).await;
    let (turn, text_of_first) = started_turn(&first.action).unwrap();
    assert_eq!(text_of_first, "STEER");
    w.end(&turn).await;
    let second = w.until(|a| started_turn(a).is_some()).await;
    let (turn, text_of_second) = started_turn(&second.action).unwrap();
    assert_eq!(text_of_second, "QUEUED");
    w.end(&turn).await;
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 3);
    assert!(!request_text(&bodies[0]).contains("STEER"));
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_116_a_steer_then_a_stop_never_reaches_the_model() {
    let place = Place::new();
    std::fs::write(place.work.join("a.txt"), "hello\n").unwrap();
    let gate = Gate::new();
    let ep = endpoint(vec![
        call("c1", "read_file", json!({ "path": "a.txt" })).held(&gate),
        text("unused"),
        text("later"),
    ]);
    let (agent, th, mut w, _id) = setup(
        &place,
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        json!({}),
    )
    .await;
    w.send("t1", "read it").await;
    gate.reached().await;
    w.client
        .dispatch(w.chat.clone(), steering("s1", "NEVER-SENT"))
        .await
        .unwrap();
    w.until(|a| matches!(a, StateAction::ChatPendingMessageSet(_)))
        .await;
    w.client
        .dispatch(w.chat.clone(), cancel("t1"))
        .await
        .unwrap();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnCancelled(_)
    ));
    gate.open();
    // The next turn runs only after the stopped run has ended.
    w.send("t2", "and now").await;
    w.end("t2").await;
    for body in ep.chat_bodies() {
        assert!(!request_text(&body).contains("NEVER-SENT"), "{body}");
    }
    w.assert_mirror(&th).await;

    // With no turn running, the engine takes no steer.
    let (mut session, _probe) = detached_session(&agent, &place, &fresh_id("idle")).await;
    let message: ahp_types::state::PendingMessage = serde_json::from_value(json!({
        "id": "s2", "message": { "text": "hello", "origin": { "kind": "user" } }
    }))
    .unwrap();
    assert!(!session.steer(message));
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_118_turns_sent_while_one_runs_show_the_newest_and_run_in_order() {
    let place = Place::new();
    let gate = Gate::new();
    let ep = endpoint(vec![held_stream("one", &gate), text("two"), text("three")]);
    let (_agent, th, mut w, _id) = setup(
        &place,
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        json!({}),
    )
    .await;
    w.send("t1", "FIRST").await;
    w.until(|a| matches!(a, StateAction::ChatDelta(_))).await;
    w.send("t2", "SECOND").await;
    w.send("t3", "THIRD").await;
    assert_eq!(ep.chat_requests().len(), 1);
    gate.open();
    assert!(matches!(
        w.end("t3").await,
        StateAction::ChatTurnComplete(_)
    ));
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 3);
    let last_user = |b: &Value| {
        b["messages"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .map(|m| m["content"].to_string())
            .unwrap()
    };
    assert!(last_user(&bodies[0]).contains("FIRST"));
    assert!(last_user(&bodies[1]).contains("SECOND"));
    assert!(last_user(&bodies[2]).contains("THIRD"));
    w.assert_mirror(&th).await;
    let ids: Vec<&str> = w.chat_state().turns.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["t3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_119_stopping_a_waiting_turn_cancels_the_running_one() {
    let place = Place::new();
    let gate = Gate::new();
    let ep = endpoint(vec![held_stream("one", &gate), text("three")]);
    let (agent, th, mut w, id) = setup(
        &place,
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        json!({}),
    )
    .await;
    w.send("t1", "FIRST").await;
    w.until(|a| matches!(a, StateAction::ChatDelta(_))).await;
    w.send("t2", "SECOND").await;
    w.client
        .dispatch(w.chat.clone(), cancel("t2"))
        .await
        .unwrap();
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnCancelled(_)
    ));
    ep.wait_for_closed_connections(1).await;
    gate.open();
    w.send("t3", "THIRD").await;
    assert!(matches!(
        w.end("t3").await,
        StateAction::ChatTurnComplete(_)
    ));
    let cancels = w
        .chat_actions()
        .iter()
        .filter(|a| matches!(a, StateAction::ChatTurnCancelled(_)))
        .count();
    assert_eq!(cancels, 1);
    let prompts: Vec<String> = agent
        .transcript(&id)
        .await
        .unwrap()
        .iter()
        .map(|t| t.message.text.clone())
        .collect();
    assert_eq!(
        prompts,
        ["FIRST", "THIRD"],
        "the stopped waiting prompt is never stored"
    );
    let stored = agent.transcript(&id).await.unwrap();
    assert_eq!(stored[0].state, ahp_types::state::TurnState::Cancelled);
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_120_a_turn_sent_while_an_approval_is_open_runs_after_it() {
    let place = Place::new();
    let ep = endpoint(vec![
        call(
            "c1",
            "write_file",
            json!({ "path": "a.txt", "content": "once" }),
        ),
        text("written"),
        text("second answer"),
    ]);
    let (_agent, th, mut w, _id) = setup(
        &place,
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        json!({ "permissionMode": "default" }),
    )
    .await;
    w.send("t1", "write it").await;
    w.until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    w.send("t2", "SECOND").await;
    w.sync().await;
    let open = w.mirror.sessions[&w.session]
        .input_needed
        .clone()
        .unwrap_or_default();
    assert!(
        open.iter()
            .any(|r| matches!(r, SessionInputRequest::ToolConfirmation(c) if c.turn_id == "t1")),
        "the approval stays open: {open:?}"
    );
    assert_eq!(ep.chat_requests().len(), 1, "t2 waits for t1's run");
    w.client
        .dispatch(w.chat.clone(), confirm("t1", "c1"))
        .await
        .unwrap();
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 3);
    assert!(request_text(&bodies[2]).contains("SECOND"));
    assert_eq!(
        std::fs::read_to_string(place.work.join("a.txt")).unwrap(),
        "once"
    );
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_121_a_message_after_a_stop_begins_at_once_and_is_sent_after_the_run() {
    let place = Place::new();
    let store = place.home.join("store");
    let gate = Gate::new();
    let ep = endpoint(vec![held_stream("one", &gate), text("two")]);
    let (_agent, th, mut w, id) = setup(
        &place,
        json!({ "store": store.display().to_string(), "baseUrl": ep.base_url(), "model": "m" }),
        json!({}),
    )
    .await;
    w.send("t1", "FIRST").await;
    w.until(|a| matches!(a, StateAction::ChatDelta(_))).await;
    w.client
        .dispatch(w.chat.clone(), cancel("t1"))
        .await
        .unwrap();
    // Sent straight after the stop: the host begins it at once.
    w.send("t2", "SECOND").await;
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    gate.open();
    let runs = super::reopen::runs_of(&store)
        .list_runs(&id, None)
        .await
        .unwrap();
    let first = runs
        .iter()
        .find(|r| r.status == RunStatus::Cancelled)
        .expect("t1's run");
    let second = runs
        .iter()
        .find(|r| r.status == RunStatus::Completed)
        .expect("t2's run");
    // t2's run was made only once t1's had ended.
    assert!(
        first.updated_at <= second.created_at,
        "{first:?} {second:?}"
    );
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 2);
    assert!(request_text(&bodies[1]).contains("SECOND"));
    w.assert_mirror(&th).await;
}
