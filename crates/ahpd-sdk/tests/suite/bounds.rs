//! What a long-running host keeps stays bounded: clients gone longer than the remembered time
//! are forgotten.

use std::time::Duration;

use ahp_types::actions::StateAction;
use ahpd_sdk::testing::ScriptedAgent;
use serde_json::json;

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_gone_past_the_remembered_time_are_forgotten() {
    let ttl = Duration::from_millis(300);
    let th = start_with(ScriptedAgent::new(), |b| {
        b.known_client_ttl(ttl).active_client_grace(Duration::ZERO)
    })
    .await;
    let session = "mock:/bounds";
    let watcher = client(&th.url).await;
    let mut w = open_session(&watcher, "watcher", session, &[session]).await;

    let leaving = client(&th.url).await;
    leaving
        .initialize("leaving".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let set: StateAction = serde_json::from_value(
        json!({"type": "session/activeClientSet", "activeClient": {"clientId": "leaving", "tools": []}}),
    )
    .unwrap();
    leaving.dispatch(session.into(), set).await.unwrap();
    w.until(|e| matches!(e.action, StateAction::SessionActiveClientSet(_)))
        .await;
    assert_eq!(th.host.handle().client_table_sizes().0, 2);
    leaving.shutdown().await;
    // Its removal from the session's active clients shows the host saw it go.
    w.until(|e| matches!(e.action, StateAction::SessionActiveClientRemoved(_)))
        .await;
    // The remembered time is what is tested: let it pass.
    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
    let newcomer = client(&th.url).await;
    newcomer
        .initialize("newcomer".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    assert_eq!(
        th.host.handle().client_table_sizes().0,
        2,
        "the watcher and the newcomer are remembered, the client gone too long is not"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_sessions_nobody_watches_are_unloaded_past_the_cap_and_come_back() {
    let agent = ScriptedAgent::new()
        .with_history("a", 2)
        .with_history("b", 2);
    let th = start_with(agent, |b| b.loaded_cap(1)).await;
    let c = client(&th.url).await;
    let mut w = Watch::new(&c);
    let init = c
        .initialize(
            "browser".into(),
            vec!["1.0.0".into()],
            vec!["ahp-root://".into()],
        )
        .await
        .unwrap();
    w.snapshot(&init.snapshots[0]);
    let chat_a = ahpd_sdk::util::default_chat_uri("mock:/a");
    let chat_b = ahpd_sdk::util::default_chat_uri("mock:/b");

    let (r, _) = c.subscribe(chat_a.clone()).await.unwrap();
    w.snapshot(&r.snapshot.unwrap());
    c.unsubscribe(chat_a.clone()).await.unwrap();
    // A request on the same session runs after the unsubscribe: once it is answered, nobody
    // watches `mock:/a` any more.
    let _: serde_json::Value = c
        .request("fetchTurns", json!({"channel": chat_a}))
        .await
        .unwrap();
    assert_eq!(th.host.handle().open_sessions(), vec!["mock:/a"]);

    // Opening a second one goes past the cap of one: the unwatched one is unloaded.
    let (r, _) = c.subscribe(chat_b.clone()).await.unwrap();
    w.snapshot(&r.snapshot.unwrap());
    w.until(|e| matches!(&e.action, StateAction::RootActiveSessionsChanged(a) if a.active_sessions == 1))
        .await;
    assert_eq!(th.host.handle().open_sessions(), vec!["mock:/b"]);

    // It comes back whole when asked for again; a watched session is never unloaded.
    let (r, _) = c.subscribe(chat_a.clone()).await.unwrap();
    let snap = r.snapshot.unwrap();
    let ahp_types::state::SnapshotState::Chat(state) = &snap.state else {
        panic!("a chat snapshot: {snap:?}");
    };
    assert_eq!(state.turns.len(), 2);
    c.ping().await.unwrap();
    let mut open = th.host.handle().open_sessions();
    open.sort();
    assert_eq!(open, vec!["mock:/a", "mock:/b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_created_session_left_alone_is_unloaded_once_stored_and_comes_back() {
    let th = start_with(ScriptedAgent::new(), |b| b.loaded_cap(1)).await;
    let c = client(&th.url).await;
    let mut w = Watch::new(&c);
    let init = c
        .initialize(
            "maker".into(),
            vec!["1.0.0".into()],
            vec!["ahp-root://".into()],
        )
        .await
        .unwrap();
    w.snapshot(&init.snapshots[0]);
    let x = "mock:/left";
    let chat_x = ahpd_sdk::util::default_chat_uri(x);
    let _: serde_json::Value = c
        .request("createSession", json!({"channel": x}))
        .await
        .unwrap();
    let (r, _) = c.subscribe(chat_x.clone()).await.unwrap();
    w.snapshot(&r.snapshot.unwrap());
    c.dispatch(chat_x.clone(), turn_started("t", "hello"))
        .await
        .unwrap();
    w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(_)))
        .await;
    c.unsubscribe(chat_x.clone()).await.unwrap();
    let _: serde_json::Value = c
        .request("fetchTurns", json!({"channel": chat_x}))
        .await
        .unwrap();

    // A second session takes the one place: the first, stored and unwatched, is unloaded.
    // (The second has no conversation in the store yet, so it stays.)
    let _: serde_json::Value = c
        .request("createSession", json!({"channel": "mock:/new"}))
        .await
        .unwrap();
    w.until(|e| matches!(&e.action, StateAction::RootActiveSessionsChanged(a) if a.active_sessions == 2))
        .await;
    w.until(|e| matches!(&e.action, StateAction::RootActiveSessionsChanged(a) if a.active_sessions == 1))
        .await;
    assert_eq!(th.host.handle().open_sessions(), vec!["mock:/new"]);

    let (r, _) = c.subscribe(chat_x.clone()).await.unwrap();
    let snap = r.snapshot.unwrap();
    let ahp_types::state::SnapshotState::Chat(state) = &snap.state else {
        panic!("a chat snapshot: {snap:?}");
    };
    let turns: Vec<&str> = state
        .turns
        .iter()
        .map(|t| t.message.text.as_str())
        .collect();
    assert_eq!(turns, vec!["hello"]);
}

/// The count of ended turns moves once for every turn that ends, whatever its outcome: the
/// daemon waits on it to hand freed memory back after work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ended_turn_moves_the_turn_end_count() {
    let th = start_with(ScriptedAgent::new(), |b| b).await;
    let mut ends = th.host.handle().turn_ends();
    assert_eq!(*ends.borrow_and_update(), 0);
    let session = "mock:/ends";
    let chat = ahpd_sdk::util::default_chat_uri(session);
    let c = client(&th.url).await;
    let mut w = open_session(&c, "ender", session, &[session, chat.as_str()]).await;
    for (turn, text) in [("t1", "hello"), ("t2", "error")] {
        c.dispatch(chat.clone(), turn_started(turn, text))
            .await
            .unwrap();
        w.until(|e| match &e.action {
            StateAction::ChatTurnComplete(a) => a.turn_id == turn,
            StateAction::ChatError(a) => a.turn_id == turn,
            _ => false,
        })
        .await;
    }
    // The count moves just after the ending action is published: wait for it, then check
    // that each turn counted once.
    let counted = *ends.wait_for(|n| *n >= 2).await.unwrap();
    assert_eq!(counted, 2);
}

/// A session whose turn waits on a question is never unloaded, whoever watches it: the sweep
/// that unloads another idle session past the cap passes it over (it is the least recently
/// used, so it is asked first), and the question is still open, and answered, afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_waiting_on_a_question_is_not_unloaded_and_keeps_its_question() {
    let agent = ScriptedAgent::new()
        .with_history("a", 1)
        .with_history("b", 1)
        .with_history("c", 1);
    let th = start_with(agent, |b| b.loaded_cap(1)).await;
    let c = client(&th.url).await;
    let mut w = Watch::new(&c);
    let init = c
        .initialize(
            "asker".into(),
            vec!["1.0.0".into()],
            vec!["ahp-root://".into()],
        )
        .await
        .unwrap();
    w.snapshot(&init.snapshots[0]);
    let chat = ahpd_sdk::util::default_chat_uri;

    // `a` asks a question, then nobody watches it; `b` is opened and left alone.
    let (r, _) = c.subscribe(chat("mock:/a")).await.unwrap();
    w.snapshot(&r.snapshot.unwrap());
    c.dispatch(chat("mock:/a"), turn_started("t", "question"))
        .await
        .unwrap();
    w.until(|e| matches!(e.action, StateAction::ChatInputRequested(_)))
        .await;
    let (r, _) = c.subscribe(chat("mock:/b")).await.unwrap();
    w.snapshot(&r.snapshot.unwrap());
    for s in ["mock:/a", "mock:/b"] {
        c.unsubscribe(chat(s)).await.unwrap();
        // A request on the same session runs after the unsubscribe.
        let _: serde_json::Value = c
            .request("fetchTurns", json!({"channel": chat(s)}))
            .await
            .unwrap();
    }

    // Opening `c` sweeps: `b` goes, `a` stays.
    let (r, _) = c.subscribe(chat("mock:/c")).await.unwrap();
    w.snapshot(&r.snapshot.unwrap());
    loop {
        let mut open = th.host.handle().open_sessions();
        open.sort();
        if open == ["mock:/a", "mock:/c"] {
            break;
        }
        w.until(|e| matches!(e.action, StateAction::RootActiveSessionsChanged(_)))
            .await;
    }

    // The question is still there, and its answer ends the turn.
    let (r, _) = c.subscribe("mock:/a".into()).await.unwrap();
    let snap = r.snapshot.unwrap();
    let ahp_types::state::SnapshotState::Session(state) = &snap.state else {
        panic!("a session snapshot: {snap:?}");
    };
    assert_eq!(
        state.input_needed.as_ref().map(Vec::len),
        Some(1),
        "{state:?}"
    );
    let (r, _) = c.subscribe(chat("mock:/a")).await.unwrap();
    w.snapshot(&r.snapshot.unwrap());
    let answer: StateAction = serde_json::from_value(json!({
        "type": "chat/inputCompleted", "requestId": "q-t", "response": "accept",
        "answers": {"name": {"state": "submitted", "value": {"kind": "text", "value": "Ada"}}},
    }))
    .unwrap();
    c.dispatch(chat("mock:/a"), answer).await.unwrap();
    w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(t) if t.turn_id == "t"))
        .await;
}
