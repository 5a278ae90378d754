//! The session store keeps client-chosen titles, flags, config values and URI spellings
//! across a restart (two hosts over the same file, the same agent store behind them).

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::state::{SessionStatus, SnapshotState};
use ahpd_sdk::ports::{FileSessionStore, SessionStore};
use ahpd_sdk::testing::ScriptedAgent;
use serde_json::{Value, json};

use super::support::*;

fn file_store(path: &std::path::Path) -> Arc<FileSessionStore> {
    Arc::new(FileSessionStore::open(path).expect("a store path"))
}

fn action(v: Value) -> StateAction {
    serde_json::from_value(v).expect("an action")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn titles_flags_config_and_spelling_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.json");
    let agent = ScriptedAgent::new();
    let session = "ahp-session:/kept".to_owned();
    let chat = ahpd_sdk::util::default_chat_uri(&session);

    // First run: create, run a turn (the agent stores the conversation), then choose things.
    let first = start_with(agent.clone(), |b| b.session_store(file_store(&path))).await;
    let a = client(&first.url).await;
    let mut w = open_session(&a, "one", &session, &[&session, &chat]).await;
    a.dispatch(chat.clone(), turn_started("t1", "hello"))
        .await
        .unwrap();
    w.until(|e| matches!(e.action, StateAction::ChatTurnComplete(_)))
        .await;
    for a_ in [
        json!({"type": "session/titleChanged", "title": "Chosen title"}),
        json!({"type": "session/isReadChanged", "isRead": true}),
        json!({"type": "session/isArchivedChanged", "isArchived": true}),
        json!({"type": "session/configChanged", "config": {"permissionMode": "plan"}}),
    ] {
        let seq = a
            .dispatch(session.clone(), action(a_))
            .await
            .unwrap()
            .client_seq;
        let echo = w
            .until(|e| e.origin.as_ref().is_some_and(|o| o.client_seq == seq))
            .await;
        assert!(echo.rejection_reason.is_none(), "{echo:?}");
    }
    first.host.flush_session_store().await.unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let on_disk = file_store(&path).load().unwrap();
    assert_eq!(on_disk.len(), 1);
    assert_eq!(on_disk[0].uri, session);
    assert_eq!(on_disk[0].backend_id, "kept");
    assert_eq!(on_disk[0].title.as_deref(), Some("Chosen title"));
    drop(a);
    first.host.shutdown();
    drop(first);

    // Second run over the same file and the same conversations.
    let second = start_with(agent.clone(), |b| b.session_store(file_store(&path))).await;
    let b = client(&second.url).await;
    b.initialize("two".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let listed: Value = b.request("listSessions", json!({})).await.unwrap();
    let rows = listed["items"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(rows[0]["resource"], session, "the remembered spelling");
    assert_eq!(rows[0]["title"], "Chosen title");
    let status = rows[0]["status"].as_u64().unwrap() as u32;
    assert_eq!(
        status,
        SessionStatus::Idle.bits()
            | SessionStatus::IsRead.bits()
            | SessionStatus::IsArchived.bits()
    );
    let (r, _) = b.subscribe(session.clone()).await.unwrap();
    let SnapshotState::Session(state) = r.snapshot.unwrap().state else {
        panic!("a session snapshot");
    };
    assert_eq!(state.title, "Chosen title");
    assert_eq!(state.status, status);
    assert_eq!(
        state.config.unwrap().values["permissionMode"],
        json!("plan"),
        "config values are remembered"
    );
    assert_eq!(state.default_chat.as_deref(), Some(chat.as_str()));

    // Disposing forgets it, on disk too.
    let _: Value = b
        .request("disposeSession", json!({"channel": session}))
        .await
        .unwrap();
    second.host.flush_session_store().await.unwrap();
    assert!(file_store(&path).load().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_store_is_set_aside_and_the_host_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sessions.json");
    std::fs::write(&path, "not json at all").unwrap();
    let th = start_with(ScriptedAgent::new(), |b| b.session_store(file_store(&path))).await;
    let set_aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".corrupt-"))
        .collect();
    assert_eq!(
        set_aside.len(),
        1,
        "the unreadable file is kept, moved aside"
    );
    assert_eq!(
        std::fs::read_to_string(&set_aside[0]).unwrap(),
        "not json at all"
    );
    let a = client(&th.url).await;
    a.initialize("c".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let _: Value = a
        .request("createSession", json!({"channel": "mock:/fresh"}))
        .await
        .unwrap();
    th.host.flush_session_store().await.unwrap();
    let records = file_store(&path).load().unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].uri, "mock:/fresh");
    assert_eq!(records[0].title, None, "no client chose a title");
}
