//! A past session's backend is opened by the first action that needs it, not only by a turn
//!: a config change opens it on the stored conversation and reaches
//! `Session::configure`; a failure to open refuses the change. Also: a turn id used on a
//! transcript page not loaded yet counts as used.

use ahp_types::actions::StateAction;
use ahp_types::state::SnapshotState;
use ahpd_sdk::testing::ScriptedAgent;
use serde_json::{Value, json};

use super::support::*;

fn change(v: Value) -> StateAction {
    serde_json::from_value(json!({"type": "session/configChanged", "config": v}))
        .expect("a config change")
}

fn permission_mode(w: &Watch, session: &str) -> Value {
    w.mirror.sessions[session]
        .config
        .as_ref()
        .expect("config is always present")
        .values["permissionMode"]
        .clone()
}

/// A client of `th`, initialized, following `channel` from its snapshot (returned too).
async fn following(
    th: &TestHost,
    channel: &str,
) -> (ahp::Client, Watch, ahp_types::state::Snapshot) {
    let a = client(&th.url).await;
    a.initialize("past".into(), vec!["1.0.0".into()], vec![])
        .await
        .expect("initialize");
    let mut w = Watch::new(&a);
    let (r, _) = a.subscribe(channel.to_owned()).await.expect("subscribe");
    let snap = r.snapshot.expect("a snapshot");
    w.snapshot(&snap);
    (a, w, snap)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_change_opens_a_past_sessions_backend_and_configures_it() {
    let agent = ScriptedAgent::new().with_history("past", 2);
    let th = start_with(agent.clone(), |b| b).await;
    let session = "mock:/past".to_owned();
    let (a, mut w, snap) = following(&th, &session).await;
    assert!(matches!(snap.state, SnapshotState::Session(_)));
    assert!(agent.opens().is_empty(), "subscribing opens no backend");

    a.dispatch(session.clone(), change(json!({"permissionMode": "plan"})))
        .await
        .expect("dispatch");
    let env = w
        .until(|e| matches!(e.action, StateAction::SessionConfigChanged(_)))
        .await;
    assert!(env.rejection_reason.is_none(), "{env:?}");
    assert_eq!(permission_mode(&w, &session), "plan");

    // The backend was opened on the stored conversation, then given the change, before the
    // echo went out.
    let opens = agent.opens();
    assert_eq!(opens.len(), 1, "{opens:?}");
    assert_eq!(opens[0].1.as_deref(), Some("past"));
    let configured = agent.configured();
    assert_eq!(configured.len(), 1, "{configured:?}");
    assert_eq!(configured[0].0, "past");
    assert_eq!(configured[0].1.get("permissionMode"), Some(&json!("plan")));

    // A second change goes straight to the open backend.
    a.dispatch(
        session.clone(),
        change(json!({"permissionMode": "acceptEdits"})),
    )
    .await
    .expect("dispatch");
    w.until(|e| matches!(e.action, StateAction::SessionConfigChanged(_)))
        .await;
    assert_eq!(agent.opens().len(), 1, "the backend is opened once");
    assert_eq!(agent.configured().len(), 2);
    assert_mirror(&th, &mut w, &[session.as_str()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_change_is_refused_when_the_past_backend_cannot_open() {
    let agent = ScriptedAgent::new()
        .with_history("past", 1)
        .failing_resume();
    let th = start_with(agent.clone(), |b| b).await;
    let session = "mock:/past".to_owned();
    let (a, mut w, _) = following(&th, &session).await;

    a.dispatch(session.clone(), change(json!({"permissionMode": "plan"})))
        .await
        .expect("dispatch");
    let env = w
        .until(|e| matches!(e.action, StateAction::SessionConfigChanged(_)))
        .await;
    let reason = env.rejection_reason.expect("refused");
    assert!(
        reason.contains("could not be read"),
        "the failure is named: {reason}"
    );
    assert_eq!(permission_mode(&w, &session), "default", "state unchanged");
    assert_eq!(agent.opens().len(), 1);
    assert!(agent.configured().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_opens_a_past_chats_backend_and_asks_it() {
    let agent = ScriptedAgent::new().with_history("past", 2);
    let th = start_with(agent.clone(), |b| b).await;
    let chat = ahpd_sdk::util::default_chat_uri("mock:/past");
    let (a, mut w, _) = following(&th, &chat).await;

    let rewind: StateAction =
        serde_json::from_value(json!({"type": "chat/truncated", "turnId": "old-0"}))
            .expect("a rewind");
    a.dispatch(chat.clone(), rewind).await.expect("dispatch");
    let env = w
        .until(|e| matches!(e.action, StateAction::ChatTruncated(_)))
        .await;
    // The scripted backend cannot rewind; its own refusal (not "not available") shows the
    // host opened it on the stored conversation and asked it.
    let reason = env.rejection_reason.expect("refused by the backend");
    assert!(reason.contains("cannot rewind"), "{reason}");
    let opens = agent.opens();
    assert_eq!(opens.len(), 1, "{opens:?}");
    assert_eq!(opens[0], (chat.clone(), Some("past".to_owned())));
    assert_mirror(&th, &mut w, &[chat.as_str()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_id_from_an_unloaded_page_is_refused() {
    let th = start_with(ScriptedAgent::new().with_history("old", 60), |b| {
        b.turns_page(20)
    })
    .await;
    let chat = ahpd_sdk::util::default_chat_uri("mock:/old");
    let (a, mut w, _) = following(&th, &chat).await;
    // `old-0` is on the oldest page, which the window does not hold.
    a.dispatch(chat.clone(), turn_started("old-0", "again"))
        .await
        .expect("dispatch");
    let env = w
        .until(|e| matches!(e.action, StateAction::ChatTurnStarted(_)))
        .await;
    let reason = env.rejection_reason.expect("refused");
    assert!(reason.contains("already used"), "{reason}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscribing_opens_the_backend_of_a_conversation_with_unfinished_work_beside_the_answer() {
    // The agent hangs opening it: the subscribe is answered anyway, and the open was asked for
    // without any turn or command.
    let agent = ScriptedAgent::new()
        .with_history("slow", 1)
        .unfinished(&["slow"])
        .hanging_create_for(&["mock:/slow"]);
    let th = start_with(agent.clone(), |b| b).await;
    let (_a, _w, snap) = following(&th, "mock:/slow").await;
    assert!(matches!(snap.state, SnapshotState::Session(_)));
    let opens = agent.until_opens(1).await;
    assert_eq!(opens[0].1.as_deref(), Some("slow"));
    assert!(agent.watched().is_empty(), "nothing opened yet to watch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opened_backend_with_no_turn_waiting_is_told_it_is_watched() {
    let agent = ScriptedAgent::new()
        .with_history("paused", 1)
        .with_history("done", 1)
        .unfinished(&["paused"]);
    let th = start_with(agent.clone(), |b| b).await;
    // A finished conversation is browsed without a backend.
    let _done = following(&th, "mock:/done").await;
    let _paused = following(&th, "mock:/paused").await;
    assert_eq!(agent.until_watched(1).await, vec!["paused".to_owned()]);
    let opens = agent.opens();
    assert_eq!(opens.len(), 1, "only the unfinished one opens: {opens:?}");
    assert_eq!(opens[0].1.as_deref(), Some("paused"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_leaves_unfinished_work_opens_the_backend_only_for_a_turn() {
    // An inner host started to read a conversation: subscribing opens nothing, so nothing is
    // reattached that the host's end would stop; a turn still opens the backend as usual.
    let agent = ScriptedAgent::new()
        .with_history("paused", 1)
        .unfinished(&["paused"]);
    let th = start_with(agent.clone(), |b| b.take_up_unfinished(false)).await;
    let chat = ahpd_sdk::util::default_chat_uri("mock:/paused");
    let (_s, _sw, _) = following(&th, "mock:/paused").await;
    let (a, mut w, _) = following(&th, &chat).await;
    a.dispatch(chat.clone(), turn_started("t2", "go on"))
        .await
        .expect("dispatch");
    w.until(|e| matches!(e.action, StateAction::ChatTurnComplete(_)))
        .await;
    assert!(
        agent.watched().is_empty(),
        "the backend was opened for the subscription"
    );
    let opens = agent.opens();
    assert_eq!(opens.len(), 1, "{opens:?}");
    assert_eq!(opens[0], (chat.clone(), Some("paused".to_owned())));
}
