//! Host cases 11.7 (docs/acceptance.md) and the client-tool and grace rules.

use std::time::Duration;

use ahp_types::actions::StateAction;
use ahp_types::state::{ResponsePart, SessionInputRequest, TurnState};
use ahpd_sdk::testing::ScriptedAgent;
use serde_json::{Value, json};

use super::support::*;

async fn joined(th: &TestHost, id: &str, versions: &[&str], uris: &[&str]) -> (ahp::Client, Watch) {
    let c = client(&th.url).await;
    let mut w = Watch::new(&c);
    c.initialize(
        id.into(),
        versions.iter().map(|v| v.to_string()).collect(),
        vec![],
    )
    .await
    .unwrap();
    for uri in uris {
        let (r, _) = c.subscribe(uri.to_string()).await.unwrap();
        w.snapshot(&r.snapshot.unwrap());
    }
    (c, w)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_panic_ends_the_turn_and_the_next_turn_works() {
    let th = start().await;
    let session = "mock:/panics".to_owned();
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    let a = client(&th.url).await;
    let mut w = open_session(&a, "a", &session, &[&session, &chat]).await;
    let _: Value = a
        .request("createSession", json!({"channel": "mock:/bystander"}))
        .await
        .unwrap();
    a.dispatch(chat.clone(), turn_started("p", "panic"))
        .await
        .unwrap();
    let err = w
        .until(|e| matches!(e.action, StateAction::ChatError(_)))
        .await;
    match &err.action {
        StateAction::ChatError(e) => assert_eq!(e.part.error.error_type, "internal"),
        _ => unreachable!(),
    }
    a.dispatch(chat.clone(), turn_started("q", "hello"))
        .await
        .unwrap();
    w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(x) if x.turn_id == "q"))
        .await;
    assert_mirror(&th, &mut w, &[&session, &chat]).await;
    assert_eq!(w.mirror.chats[&chat].turns[0].state, TurnState::Error);
    assert!(
        th.host.snapshot("mock:/bystander").await.is_some(),
        "other sessions are unaffected"
    );
    // The other session still runs turns.
    let by_chat = ahpd_sdk::util::default_chat_uri("mock:/bystander");
    let (r, _) = a.subscribe(by_chat.clone()).await.unwrap();
    w.snapshot(&r.snapshot.unwrap());
    a.dispatch(by_chat.clone(), turn_started("b", "hello"))
        .await
        .unwrap();
    w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(x) if x.turn_id == "b"))
        .await;
    assert_mirror(&th, &mut w, &[&by_chat]).await;
    assert_eq!(w.mirror.chats[&by_chat].turns[0].state, TurnState::Complete);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_zero_only_actions_are_withheld_from_a_0_9_connection() {
    let th = start().await;
    let session = "mock:/versions".to_owned();
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    let creator = client(&th.url).await;
    creator
        .initialize("creator".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let _: Value = creator
        .request("createSession", json!({"channel": session}))
        .await
        .unwrap();
    let (old, mut wo) = joined(&th, "old", &["0.9.0"], &[&chat]).await;
    let (new, mut wn) = joined(&th, "new", &["1.0.0"], &[&chat]).await;
    let read: StateAction =
        serde_json::from_value(json!({"type": "chat/isReadChanged", "isRead": true})).unwrap();
    new.dispatch(chat.clone(), read).await.unwrap();
    wn.until(|e| matches!(e.action, StateAction::ChatIsReadChanged(_)))
        .await;
    new.dispatch(chat.clone(), turn_started("t", "hello"))
        .await
        .unwrap();
    wo.until(|e| matches!(e.action, StateAction::ChatTurnComplete(_)))
        .await;
    assert!(
        !wo.envelopes
            .iter()
            .any(|e| matches!(e.action, StateAction::ChatIsReadChanged(_)))
    );
    drop(old);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_tools_run_on_their_client_and_fail_when_it_leaves() {
    let th = start_with(ScriptedAgent::new(), |b| {
        b.active_client_grace(Duration::from_millis(20))
    })
    .await;
    let session = "mock:/tools".to_owned();
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    let a = client(&th.url).await;
    let mut w = open_session(&a, "a", &session, &[&session, &chat]).await;
    let (x, _wx) = joined(&th, "x", &["1.0.0"], &[]).await;
    let set: StateAction = serde_json::from_value(json!({"type": "session/activeClientSet", "activeClient": {"clientId": "x", "tools": [{"name": "pick"}]}})).unwrap();
    x.dispatch(session.clone(), set).await.unwrap();
    w.until(|e| matches!(e.action, StateAction::SessionActiveClientSet(_)))
        .await;

    // The owning client completes the call.
    a.dispatch(chat.clone(), turn_started("t1", "client-tool"))
        .await
        .unwrap();
    let asked = w
        .until(|e| matches!(e.action, StateAction::SessionInputNeededSet(_)))
        .await;
    match &asked.action {
        StateAction::SessionInputNeededSet(s) => assert!(
            matches!(&s.request, SessionInputRequest::ToolClientExecution(r) if r.client_id == "x")
        ),
        _ => unreachable!(),
    }
    let wrong: StateAction = serde_json::from_value(json!({"type": "chat/toolCallComplete", "turnId": "t1", "toolCallId": "ct-t1", "result": {"success": true, "pastTenseMessage": "picked"}})).unwrap();
    a.dispatch(chat.clone(), wrong.clone()).await.unwrap();
    w.until(|e| e.rejection_reason.is_some()).await;
    x.dispatch(chat.clone(), wrong).await.unwrap();
    w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(c) if c.turn_id == "t1"))
        .await;
    let text = |w: &Watch| match w.mirror.chats[&chat]
        .turns
        .last()
        .unwrap()
        .response_parts
        .last()
        .unwrap()
    {
        ResponsePart::Markdown(m) => m.content.clone(),
        other => panic!("expected markdown, got {other:?}"),
    };
    assert_eq!(text(&w), "tool ok");

    // The client leaves mid-call: after the grace it is removed and the call fails.
    a.dispatch(chat.clone(), turn_started("t2", "client-tool"))
        .await
        .unwrap();
    w.until(|e| matches!(&e.action, StateAction::SessionInputNeededSet(_)))
        .await;
    x.shutdown().await;
    drop(x);
    w.until(
        |e| matches!(&e.action, StateAction::SessionActiveClientRemoved(r) if r.client_id == "x"),
    )
    .await;
    w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(c) if c.turn_id == "t2"))
        .await;
    assert_eq!(text(&w), "tool failed");
    assert_mirror(&th, &mut w, &[&session, &chat]).await;
}

/// The official client over an in-memory connection to `host`.
async fn memory_client(host: &std::sync::Arc<ahpd_sdk::host::Host>, id: &str) -> ahp::Client {
    let (peer, mem) = ahpd_sdk::testing::pair(8192, 1 << 20);
    let h = host.clone();
    tokio::spawn(async move { h.accept(peer).await });
    let c = ahp::Client::connect(
        mem,
        ahp::ClientConfig {
            default_request_timeout: Some(PATIENCE),
            subscription_buffer: 8192,
        },
    )
    .await
    .unwrap();
    c.initialize(id.into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    c
}

// A paused clock on one thread over in-memory connections: the default 30-second grace runs
// in virtual time, which only moves when every task waits, so the test neither sleeps nor
// depends on the machine's speed. (Over real sockets the clock could jump while a frame is in
// flight.)
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_client_that_does_not_return_is_removed_after_the_default_grace() {
    let host = std::sync::Arc::new(
        ahpd_sdk::host::HostBuilder::new()
            .agent(std::sync::Arc::new(ScriptedAgent::new()))
            .delta_window(Duration::ZERO)
            .build()
            .unwrap(),
    );
    let session = "mock:/grace".to_owned();
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    let a = memory_client(&host, "a").await;
    let mut w = Watch::new(&a);
    let _: Value = a
        .request("createSession", json!({"channel": session}))
        .await
        .unwrap();
    for uri in [&session, &chat] {
        let (r, _) = a.subscribe(uri.clone()).await.unwrap();
        w.snapshot(&r.snapshot.unwrap());
    }
    let x = memory_client(&host, "x").await;
    let set: StateAction = serde_json::from_value(json!({"type": "session/activeClientSet", "activeClient": {"clientId": "x", "tools": [{"name": "pick"}]}})).unwrap();
    x.dispatch(session.clone(), set).await.unwrap();
    w.until(|e| matches!(e.action, StateAction::SessionActiveClientSet(_)))
        .await;
    a.dispatch(chat.clone(), turn_started("t", "client-tool"))
        .await
        .unwrap();
    w.until(|e| matches!(e.action, StateAction::SessionInputNeededSet(_)))
        .await;

    // x leaves in the middle of its tool call and never comes back.
    let left = tokio::time::Instant::now();
    x.shutdown().await;
    drop(x);
    // Read a's events without the watcher's timeout: the clock must be free to jump to the
    // host's grace timer.
    let mut events = a.events();
    let removed_after = loop {
        let ev = events.recv().await.expect("client alive");
        if let ahp::SubscriptionEvent::Action(env) = &ev.event {
            w.mirror.apply(env);
            if matches!(&env.action, StateAction::SessionActiveClientRemoved(r) if r.client_id == "x")
            {
                break left.elapsed();
            }
        }
    };
    assert!(
        removed_after >= Duration::from_secs(30),
        "removed after {removed_after:?} of virtual time, before the 30 s grace"
    );
    assert!(
        removed_after < Duration::from_secs(31),
        "removed after {removed_after:?}: not at the end of the grace"
    );
    let end = loop {
        let ev = events.recv().await.expect("client alive");
        if let ahp::SubscriptionEvent::Action(env) = ev.event {
            w.mirror.apply(&env);
            if matches!(&env.action, StateAction::ChatTurnComplete(c) if c.turn_id == "t") {
                break env;
            }
        }
    };
    assert!(end.rejection_reason.is_none());
    let snap = host.snapshot(&chat).await.unwrap();
    let ahp_types::state::SnapshotState::Chat(state) = snap.state else {
        panic!("chat snapshot expected")
    };
    let call = state.turns[0]
        .response_parts
        .iter()
        .find_map(|p| match p {
            ResponsePart::ToolCall(tc) => Some(tc.tool_call.clone()),
            _ => None,
        })
        .expect("the turn kept its client tool call");
    match call {
        ahp_types::state::ToolCallState::Completed(c) => {
            assert_eq!(c.tool_call_id, "ct-t");
            assert!(!c.success, "the abandoned call failed");
        }
        other => panic!("expected a completed call, got {other:?}"),
    }
}
