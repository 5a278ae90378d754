//! Sessions come back after a restart: a client that reconnects to a new host over the same
//! session store and agent store gets its stored sessions' snapshots, opened from the store,
//! instead of finding them gone.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::commands::ReconnectResult;
use ahp_types::state::SnapshotState;
use ahpd_sdk::ports::FileSessionStore;
use ahpd_sdk::testing::ScriptedAgent;
use serde_json::json;

use super::support::*;

fn file_store(path: &std::path::Path) -> Arc<FileSessionStore> {
    Arc::new(FileSessionStore::open(path).expect("a store path"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_after_a_restart_gets_both_stored_sessions_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.json");
    let agent = ScriptedAgent::new();
    let sessions = ["mock:/first", "mock:/second"];
    let chats: Vec<String> = sessions
        .iter()
        .map(|s| ahpd_sdk::util::default_chat_uri(s))
        .collect();

    let first = start_with(agent.clone(), |b| b.session_store(file_store(&path))).await;
    let a = client(&first.url).await;
    let mut w = Watch::new(&a);
    a.initialize("comeback".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    for (i, (session, chat)) in sessions.iter().zip(&chats).enumerate() {
        let _: serde_json::Value = a
            .request("createSession", json!({"channel": session}))
            .await
            .unwrap();
        for uri in [session.to_string(), chat.clone()] {
            let (r, _) = a.subscribe(uri).await.unwrap();
            w.snapshot(&r.snapshot.unwrap());
        }
        let turn = format!("turn-{i}");
        a.dispatch(chat.clone(), turn_started(&turn, &format!("question {i}")))
            .await
            .unwrap();
        w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(t) if t.turn_id == turn))
            .await;
        let title = json!({"type": "session/titleChanged", "title": format!("Title {i}")});
        a.dispatch(session.to_string(), serde_json::from_value(title).unwrap())
            .await
            .unwrap();
        w.until(|e| matches!(&e.action, StateAction::SessionTitleChanged(_)))
            .await;
    }
    let last_seen = w.last_seq as i64;
    first.host.flush_session_store().await.unwrap();
    drop(a);
    first.host.shutdown();
    drop(first);

    // The host starts again on the same stores; the client comes back with what it held.
    let second = start_with(agent.clone(), |b| b.session_store(file_store(&path))).await;
    let b = client(&second.url).await;
    let mut subscriptions: Vec<String> = sessions.iter().map(|s| s.to_string()).collect();
    subscriptions.extend(chats.iter().cloned());
    let reply = b
        .reconnect("comeback".into(), last_seen, subscriptions)
        .await
        .unwrap();
    let ReconnectResult::Snapshot(r) = reply else {
        panic!("a new host cannot replay what an old one published: {reply:?}");
    };
    assert_eq!(r.snapshots.len(), 4, "every listed channel is back");
    for (i, (session, chat)) in sessions.iter().zip(&chats).enumerate() {
        let snap = r
            .snapshots
            .iter()
            .find(|s| s.resource == *session)
            .expect("the session's snapshot");
        let SnapshotState::Session(state) = &snap.state else {
            panic!("a session snapshot: {snap:?}");
        };
        assert_eq!(state.title, format!("Title {i}"));
        let snap = r
            .snapshots
            .iter()
            .find(|s| s.resource == *chat)
            .expect("the chat's snapshot");
        let SnapshotState::Chat(state) = &snap.state else {
            panic!("a chat snapshot: {snap:?}");
        };
        let turns: Vec<(&str, &str)> = state
            .turns
            .iter()
            .map(|t| (t.id.as_str(), t.message.text.as_str()))
            .collect();
        assert_eq!(
            turns,
            vec![(
                format!("turn-{i}").as_str(),
                format!("question {i}").as_str()
            )]
        );
    }
    // The subscriptions hold: a turn in the reopened session reaches the reconnected client.
    let mut wb = Watch::new(&b);
    for snap in &r.snapshots {
        wb.snapshot(snap);
    }
    b.dispatch(chats[1].clone(), turn_started("after", "hello"))
        .await
        .unwrap();
    wb.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(t) if t.turn_id == "after"))
        .await;
}
