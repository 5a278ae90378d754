//! Engine cases of "Approvals and modes" and "Failures and resume" (see `docs/acceptance.md`).

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::state::{SessionInputRequest, ToolCallConfirmationReason, ToolCallState, ToolInput};
use ahpd_sdk::agent::ContextEvent;
use serde_json::{Value, json};
use testkit::{Frame, Gate, Reply, chunk};

use super::cases_queue::{detached_session, turn};
use super::support::*;

fn action(v: Value) -> StateAction {
    serde_json::from_value(v).expect("an action")
}

fn confirm(turn: &str, call: &str, option: &str) -> StateAction {
    action(
        json!({ "type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call,
        "approved": true, "selectedOptionId": option }),
    )
}

fn deny(turn: &str, call: &str) -> StateAction {
    action(
        json!({ "type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call,
        "approved": false }),
    )
}

fn write(call_id: &str, path: &str) -> Reply {
    call(
        call_id,
        "write_file",
        json!({ "path": path, "content": "v" }),
    )
}

async fn default_mode(place: &Place, ep: &testkit::Endpoint) -> (TestHost, Watch) {
    let agent = agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    );
    let th = host(vec![Arc::new(agent)]).await;
    let w = Watch::create(
        &th,
        "cofold",
        &fresh_id("approve"),
        Some(&place.work),
        json!({ "permissionMode": "default" }),
    )
    .await;
    (th, w)
}

fn asked(a: &StateAction) -> bool {
    matches!(a, StateAction::SessionInputNeededSet(_))
}

fn ended(a: &StateAction) -> bool {
    matches!(
        a,
        StateAction::ChatTurnComplete(_)
            | StateAction::ChatError(_)
            | StateAction::ChatTurnCancelled(_)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_098_allow_session_lets_the_next_write_run_without_a_question() {
    let place = Place::new();
    let ep = endpoint(vec![
        write("c1", "a.txt"),
        text("one"),
        write("c2", "b.txt"),
        text("two"),
        write("c3", "c.txt"),
        text("three"),
    ]);
    let (th, mut w) = default_mode(&place, &ep).await;
    w.send("t1", "write a").await;
    w.until(asked).await;
    w.client
        .dispatch(w.chat.clone(), confirm("t1", "c1", "allow-once"))
        .await
        .unwrap();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    // Allowed once: the next write is asked again.
    w.send("t2", "write b").await;
    w.until(asked).await;
    w.client
        .dispatch(w.chat.clone(), confirm("t2", "c2", "allow-session"))
        .await
        .unwrap();
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    let before = w.envelopes.len();
    w.send("t3", "write c").await;
    assert!(matches!(
        w.end("t3").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert!(
        !w.envelopes[before..].iter().any(|e| asked(&e.action)),
        "no question for a tool allowed for the session"
    );
    match w.last_calls().first() {
        Some(ToolCallState::Completed(c)) => {
            assert_eq!(c.confirmed, ToolCallConfirmationReason::Setting)
        }
        other => panic!("expected a completed call, got {other:?}"),
    }
    assert!(place.work.join("c.txt").exists());
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_100_an_answer_finishes_only_its_own_sessions_turn() {
    let place = Place::new();
    let ep = endpoint(vec![
        write("c1", "same.txt"),
        write("c1", "same.txt"),
        text("done"),
        text("done"),
    ]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent]).await;
    let config = json!({ "permissionMode": "default" });
    let mut a = Watch::create(
        &th,
        "cofold",
        &fresh_id("two-a"),
        Some(&place.work),
        config.clone(),
    )
    .await;
    let mut b = Watch::create(&th, "cofold", &fresh_id("two-b"), Some(&place.work), config).await;
    a.send("t1", "write").await;
    a.until(asked).await;
    b.send("t1", "write").await;
    b.until(asked).await;
    a.client
        .dispatch(a.chat.clone(), confirm("t1", "c1", "allow-once"))
        .await
        .unwrap();
    assert!(matches!(
        a.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    b.sync().await;
    assert!(
        b.chat_state().active_turn.is_some(),
        "the other session still waits"
    );
    assert!(!b.chat_actions().iter().any(|x| ended(x)));
    b.client
        .dispatch(b.chat.clone(), confirm("t1", "c1", "allow-once"))
        .await
        .unwrap();
    assert!(matches!(
        b.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    a.assert_mirror(&th).await;
    b.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_101_two_writes_in_one_run_are_asked_in_turn() {
    let place = Place::new();
    let ep = endpoint(vec![
        Reply::stream(vec![
            Frame::Chunk(chunk::role()),
            Frame::Chunk(chunk::tool_call(
                0,
                Some("c1"),
                Some("write_file"),
                r#"{"path":"a.txt","content":"1"}"#,
            )),
            Frame::Chunk(chunk::tool_call(
                1,
                Some("c2"),
                Some("write_file"),
                r#"{"path":"b.txt","content":"2"}"#,
            )),
            Frame::Chunk(chunk::finish("tool_calls")),
        ]),
        text("both written"),
    ]);
    let (th, mut w) = default_mode(&place, &ep).await;
    w.send("t1", "write both").await;
    w.until(asked).await;
    w.client
        .dispatch(w.chat.clone(), confirm("t1", "c1", "allow-once"))
        .await
        .unwrap();
    let next = w.until(|a| asked(a) || ended(a)).await;
    assert!(
        asked(&next.action),
        "the second ask comes before any ending: {next:?}"
    );
    w.client
        .dispatch(w.chat.clone(), confirm("t1", "c2", "allow-once"))
        .await
        .unwrap();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    w.sync().await;
    let endings = w.chat_actions().iter().filter(|a| ended(a)).count();
    assert_eq!(endings, 1);
    assert!(place.work.join("a.txt").exists() && place.work.join("b.txt").exists());
    w.assert_mirror(&th).await;
}

/// One session answering its write as soon as the host shows the question, before the
/// session's entry for it arrives.
async fn answered_on_delivery(answer: &str) -> (Place, StateAction, Notices) {
    let place = Place::new();
    let ep = endpoint(vec![write("c1", "a.txt"), text("after")]);
    let mut embedder = place.embedder();
    let notices = notices_into(&mut embedder);
    let agent = agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        embedder,
    );
    let th = host(vec![Arc::new(agent)]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("race"),
        Some(&place.work),
        json!({ "permissionMode": "default" }),
    )
    .await;
    w.send("t1", "write").await;
    w.until(|a| matches!(a, StateAction::ChatToolCallReady(r) if r.options.is_some()))
        .await;
    let reply = match answer {
        "approve" => confirm("t1", "c1", "allow-once"),
        "deny" => deny("t1", "c1"),
        _ => action(json!({ "type": "chat/turnCancelled", "turnId": "t1", "duration": 0 })),
    };
    w.client.dispatch(w.chat.clone(), reply).await.unwrap();
    let end = w.end("t1").await;
    // The next turn runs once the first run has ended, so the file is final.
    ep.push_reply(text("later"));
    w.send("t2", "and now").await;
    w.end("t2").await;
    w.assert_mirror(&th).await;
    let endings = w
        .chat_actions()
        .iter()
        .filter(|a| {
            matches!(a, StateAction::ChatTurnComplete(c) if c.turn_id == "t1")
                || matches!(a, StateAction::ChatTurnCancelled(c) if c.turn_id == "t1")
        })
        .count();
    assert_eq!(endings, 1, "{answer}: one ending");
    (place, end, notices)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_102_answers_racing_the_delivery_of_a_question_end_the_turn_once() {
    let (place, end, _) = answered_on_delivery("approve").await;
    assert!(matches!(end, StateAction::ChatTurnComplete(_)));
    assert!(place.work.join("a.txt").exists());

    let (place, end, notices) = answered_on_delivery("deny").await;
    assert!(matches!(end, StateAction::ChatTurnComplete(_)));
    assert!(!place.work.join("a.txt").exists());
    let phases: Vec<String> = notices
        .lock()
        .unwrap()
        .iter()
        .map(|n| format!("{:?}", n.2))
        .collect();
    assert_eq!(phases.len(), 2, "before and after: {phases:?}");

    let (place, end, notices) = answered_on_delivery("stop").await;
    assert!(matches!(end, StateAction::ChatTurnCancelled(_)));
    assert!(!place.work.join("a.txt").exists());
    let phases: Vec<String> = notices
        .lock()
        .unwrap()
        .iter()
        .map(|n| format!("{:?}", n.2))
        .collect();
    assert_eq!(phases.len(), 2, "before and after: {phases:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_103_a_waiting_command_shows_its_text_as_the_input() {
    let place = Place::new();
    let ep = endpoint(vec![
        call("c1", "shell_exec", json!({ "command": "echo hi" })),
        text("ran"),
    ]);
    let (th, mut w) = default_mode(&place, &ep).await;
    w.send("t1", "run it").await;
    let set = w.until(asked).await;
    let StateAction::SessionInputNeededSet(set) = set.action else {
        unreachable!()
    };
    let SessionInputRequest::ToolConfirmation(entry) = &set.request else {
        panic!("expected a confirmation: {:?}", set.request);
    };
    let entry = serde_json::to_value(&entry.tool_call).unwrap();
    assert_eq!(entry["toolInput"], "echo hi");
    match w.last_calls().first() {
        Some(ToolCallState::PendingConfirmation(p)) => {
            assert_eq!(p.tool_input, Some(ToolInput::Inline("echo hi".into())))
        }
        other => panic!("expected a pending call, got {other:?}"),
    }
    w.client
        .dispatch(w.chat.clone(), confirm("t1", "c1", "allow-once"))
        .await
        .unwrap();
    w.end("t1").await;
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_124_a_write_before_a_failed_model_call_is_made_again_on_resume() {
    let place = Place::new();
    // After the call nothing is scripted: the next model call meets the endpoint's 500.
    let ep = endpoint(vec![write("c1", "a.txt")]);
    let agent = agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    );
    let th = host(vec![Arc::new(agent)]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("rewrite"),
        Some(&place.work),
        json!({ "permissionMode": "bypassPermissions" }),
    )
    .await;
    w.send("t1", "write").await;
    match w.end("t1").await {
        StateAction::ChatError(e) => assert_eq!(e.part.resumable, Some(true)),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(
        place.work.join("a.txt").exists(),
        "the write ran before the failure"
    );
    std::fs::remove_file(place.work.join("a.txt")).unwrap();
    ep.push_reply(write("c1", "a.txt"));
    ep.push_reply(text("written again"));
    w.client
        .dispatch(
            w.chat.clone(),
            action(json!({ "type": "chat/turnResume", "turnId": "t1" })),
        )
        .await
        .unwrap();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert!(
        place.work.join("a.txt").exists(),
        "written again by the resumed attempt"
    );
    w.assert_mirror(&th).await;
}

/// The next ending the engine says through a detached context, answering nothing.
async fn ending(probe: &mut ahpd_sdk::agent::ContextProbe) -> StateAction {
    loop {
        let event = tokio::time::timeout(PATIENCE, probe.next())
            .await
            .expect("the engine acts")
            .expect("alive");
        if let ContextEvent::Emit(a) = event
            && ended(&a)
        {
            return a;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_126_turns_that_cannot_be_resumed_are_refused() {
    // A no-model failure.
    let place = Place::new();
    place.copapo(json!({}));
    let agent_ = agent(json!({ "memory": true }), place.embedder());
    let (mut session, mut probe) = detached_session(&agent_, &place, &fresh_id("nomodel")).await;
    session.begin(turn("t1", "hi"));
    match ending(&mut probe).await {
        StateAction::ChatError(e) => assert_eq!(e.part.resumable, None),
        other => panic!("expected a failure, got {other:?}"),
    }
    let refusal = session.resume_turn("t1").expect_err("refused");
    assert_eq!(refusal.0, "cofold: turn t1 cannot be resumed");

    // An older turn, once a later one failed.
    let ep = endpoint(vec![text("fine")]);
    let store = place.home.join("store");
    let options =
        json!({ "store": store.display().to_string(), "baseUrl": ep.base_url(), "model": "m" });
    let agent_ = agent(options.clone(), place.embedder());
    let id = fresh_id("older");
    let (mut session, mut probe) = detached_session(&agent_, &place, &id).await;
    session.begin(turn("t1", "first"));
    assert!(matches!(
        ending(&mut probe).await,
        StateAction::ChatTurnComplete(_)
    ));
    session.begin(turn("t2", "second"));
    match ending(&mut probe).await {
        StateAction::ChatError(e) => assert_eq!(e.part.resumable, Some(true)),
        other => panic!("expected a failure, got {other:?}"),
    }
    let refusal = session.resume_turn("t1").expect_err("refused");
    assert_eq!(refusal.0, "cofold: turn t1 cannot be resumed");
    session.close().await;

    // The failed turn read back after a restart: no resumable flag, and no resume.
    let again = agent(options, place.embedder());
    use ahpd_sdk::Agent;
    let turns = again.transcript(&id).await.unwrap();
    let last = serde_json::to_value(turns.last().unwrap()).unwrap();
    let error = last["responseParts"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(error["kind"], "error");
    assert!(error.get("resumable").is_none(), "{error}");
    let (mut session, _probe) = {
        let uri = format!("cofold:/{id}");
        let chat = ahpd_sdk::util::default_chat_uri(&uri);
        let (ctx, probe) = ahpd_sdk::SessionContext::detached(&uri, &chat);
        let s = again
            .create(ahpd_sdk::SessionStart {
                session_uri: uri,
                chat_uri: chat,
                backend_id: id.clone(),
                resume: Some(id.clone()),
                fork: None,
                working_directory: Some(place.work.clone()),
                additional_directories: Vec::new(),
                settings: Default::default(),
                ctx,
            })
            .await
            .unwrap();
        (s, probe)
    };
    let refusal = session.resume_turn("t2").expect_err("refused");
    assert_eq!(refusal.0, "cofold: turn t2 cannot be resumed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_127_a_store_that_refuses_the_cut_fails_the_resume() {
    let place = Place::new();
    let store = place.home.join("store");
    let gate = Gate::new();
    let ep = endpoint(vec![text("fine")]);
    let options =
        json!({ "store": store.display().to_string(), "baseUrl": ep.base_url(), "model": "m" });
    let first = agent(options.clone(), place.embedder());
    let id = fresh_id("refused-cut");
    let (mut session, mut probe) = detached_session(&first, &place, &id).await;
    session.begin(turn("t1", "first"));
    assert!(matches!(
        ending(&mut probe).await,
        StateAction::ChatTurnComplete(_)
    ));
    session.begin(turn("t2", "second"));
    assert!(matches!(
        ending(&mut probe).await,
        StateAction::ChatError(_)
    ));
    // Another session of the same conversation runs a turn: its run holds the writer, so the
    // store refuses to cut the conversation under it.
    ep.push_reply(Reply::stream(vec![
        Frame::Chunk(chunk::role()),
        Frame::Chunk(chunk::text("busy")),
        Frame::Gate(gate.clone()),
        Frame::Chunk(chunk::finish("stop")),
    ]));
    let second = agent(options, place.embedder());
    let (mut other, _other_probe) = {
        let uri = format!("cofold:/{id}");
        let chat = ahpd_sdk::util::default_chat_uri(&uri);
        let (ctx, probe) = ahpd_sdk::SessionContext::detached(&uri, &chat);
        use ahpd_sdk::Agent;
        let s = second
            .create(ahpd_sdk::SessionStart {
                session_uri: uri,
                chat_uri: chat,
                backend_id: id.clone(),
                resume: Some(id.clone()),
                fork: None,
                working_directory: Some(place.work.clone()),
                additional_directories: Vec::new(),
                settings: Default::default(),
                ctx,
            })
            .await
            .unwrap();
        (s, probe)
    };
    other.begin(turn("t9", "hold the writer"));
    gate.reached().await;
    session.resume_turn("t2").expect("the resume is taken");
    match ending(&mut probe).await {
        StateAction::ChatError(e) => {
            assert_eq!(e.turn_id, "t2");
            assert_eq!(e.part.resumable, None, "not resumable");
            assert!(!e.part.error.message.is_empty());
        }
        other => panic!("expected the resume to fail, got {other:?}"),
    }
    gate.open();
    other.close().await;
    session.close().await;
}
