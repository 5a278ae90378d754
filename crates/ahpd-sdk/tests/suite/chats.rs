//! Further chats of a session, and forks that copy their source's turns through the
//! named turn.

use ahp::ClientError;
use ahp_types::actions::StateAction;
use ahp_types::state::{ChatOrigin, SnapshotState};
use ahpd_sdk::testing::ScriptedAgent;
use serde_json::{Value, json};

use super::support::*;

fn turn_ids(state: &ahp_types::state::ChatState) -> Vec<String> {
    state.turns.iter().map(|t| t.id.clone()).collect()
}

async fn refused(a: &ahp::Client, params: Value) -> String {
    match a.request::<_, Value>("createChat", params).await {
        Err(ClientError::Rpc(e)) => {
            assert_eq!(e.code, -32602, "{}", e.message);
            e.message
        }
        other => panic!("expected -32602, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_copies_the_turns_through_its_source_turn_and_runs_on_its_own() {
    let agent = ScriptedAgent::new();
    let th = start_with(agent.clone(), |b| b).await;
    let session = "mock:/forks".to_owned();
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    let a = client(&th.url).await;
    let mut w = open_session(&a, "f", &session, &[&session, &chat]).await;
    for t in ["t1", "t2", "t3"] {
        a.dispatch(chat.clone(), turn_started(t, &format!("say {t}")))
            .await
            .unwrap();
        w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(c) if c.turn_id == t))
            .await;
    }

    let fork = "ahp-chat:/fork-1".to_owned();
    let r: Value = a
        .request(
            "createChat",
            json!({"channel": session, "chat": fork,
                   "source": {"kind": "fork", "chat": chat, "turnId": "t2"}}),
        )
        .await
        .unwrap();
    assert!(r.is_null(), "createChat answers null");
    let added = w
        .until(|e| matches!(e.action, StateAction::SessionChatAdded(_)))
        .await;
    let StateAction::SessionChatAdded(added) = added.action else {
        unreachable!()
    };
    assert_eq!(added.summary.resource, fork);
    assert!(matches!(
        &added.summary.origin,
        Some(ChatOrigin::Fork { chat: c, turn_id }) if *c == chat && turn_id == "t2"
    ));
    let (r, _) = a.subscribe(fork.clone()).await.unwrap();
    let snap = r.snapshot.unwrap();
    w.snapshot(&snap);
    let SnapshotState::Chat(state) = &snap.state else {
        panic!("a chat snapshot")
    };
    assert_eq!(turn_ids(state), ["t1", "t2"], "turns through t2, not t3");
    let source = th.host.snapshot(&chat).await.unwrap();
    let SnapshotState::Chat(source) = source.state else {
        panic!()
    };
    assert_eq!(state.turns[..], source.turns[..2], "copied whole");
    assert_eq!(
        turn_ids(&source),
        ["t1", "t2", "t3"],
        "the source keeps its turns"
    );

    // The fork is a conversation of its own: a turn there leaves the source alone, and its
    // backend was opened as a fork of the source's conversation through t2.
    a.dispatch(fork.clone(), turn_started("f1", "in the fork"))
        .await
        .unwrap();
    w.until(|e| e.channel == fork && matches!(e.action, StateAction::ChatTurnComplete(_)))
        .await;
    assert_mirror(&th, &mut w, &[&session, &chat, &fork]).await;
    assert_eq!(turn_ids(&w.mirror.chats[&fork]), ["t1", "t2", "f1"]);
    assert_eq!(turn_ids(&w.mirror.chats[&chat]), ["t1", "t2", "t3"]);
    let forks = agent.forks();
    assert_eq!(forks.len(), 1);
    assert_eq!(forks[0].0, fork);
    assert_eq!(forks[0].1.backend_id, "forks");
    assert_eq!(forks[0].1.point.turn_id, "t2");
    assert_eq!(forks[0].1.point.data, json!({"conversation": "forks"}));

    // Refusals: an unknown turn, a chat of another session, a running turn, a side chat the
    // agent does not offer, a used chat URI.
    let m = refused(
        &a,
        json!({"channel": session, "chat": "ahp-chat:/x1",
               "source": {"kind": "fork", "chat": chat, "turnId": "nope"}}),
    )
    .await;
    assert!(m.contains("nope"), "{m}");
    let _: Value = a
        .request("createSession", json!({"channel": "mock:/other"}))
        .await
        .unwrap();
    let other_chat = ahpd_sdk::util::default_chat_uri("mock:/other");
    refused(
        &a,
        json!({"channel": session, "chat": "ahp-chat:/x2",
               "source": {"kind": "fork", "chat": other_chat, "turnId": "t1"}}),
    )
    .await;
    a.dispatch(chat.clone(), turn_started("run", "hang"))
        .await
        .unwrap();
    w.until(|e| matches!(&e.action, StateAction::ChatTurnStarted(s) if s.turn_id == "run"))
        .await;
    let m = refused(
        &a,
        json!({"channel": session, "chat": "ahp-chat:/x3",
               "source": {"kind": "fork", "chat": chat, "turnId": "run"}}),
    )
    .await;
    assert!(m.contains("running"), "{m}");
    refused(
        &a,
        json!({"channel": session, "chat": "ahp-chat:/x4",
               "source": {"kind": "sideChat", "chat": chat, "turnId": "t1"}}),
    )
    .await;
    refused(&a, json!({"channel": session, "chat": fork})).await;
    let m = refused(
        &a,
        json!({"channel": session, "chat": "ahp-chat:/x5",
               "workingDirectories": ["file:///not/the/session/folder"]}),
    )
    .await;
    assert!(m.contains("workingDirectories"), "{m}");
    // A chat may take a subset of its session's folders.
    let dir = tempfile::tempdir().unwrap();
    let folder = ahpd_sdk::util::file_uri(dir.path());
    let _: Value = a
        .request(
            "createSession",
            json!({"channel": "mock:/dirs", "workingDirectories": [folder]}),
        )
        .await
        .unwrap();
    let _: Value = a
        .request(
            "createChat",
            json!({"channel": "mock:/dirs", "chat": "ahp-chat:/in-dir",
                   "workingDirectories": [folder]}),
        )
        .await
        .unwrap();
    let (r, _) = a.subscribe("ahp-chat:/in-dir".into()).await.unwrap();
    let SnapshotState::Chat(in_dir) = r.snapshot.unwrap().state else {
        panic!()
    };
    assert_eq!(in_dir.working_directories, Some(vec![folder]));
    assert_mirror(&th, &mut w, &[&session, &chat, &fork]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_of_a_long_past_chat_loads_the_source_turn_and_pages_its_copy() {
    let agent = ScriptedAgent::new().with_history("long", 120);
    let th = start_with(agent.clone(), |b| b.turns_page(50)).await;
    let a = client(&th.url).await;
    let mut w = Watch::new(&a);
    a.initialize("p".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let session = "mock:/long".to_owned();
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    for uri in [&session, &chat] {
        let (r, _) = a.subscribe(uri.clone()).await.unwrap();
        w.snapshot(&r.snapshot.unwrap());
    }
    assert_eq!(w.mirror.chats[&chat].turns.len(), 50);

    // old-10 is two pages back: the source's window grows until it holds it, for every client.
    let near = "ahp-chat:/near".to_owned();
    let _: Value = a
        .request(
            "createChat",
            json!({"channel": session, "chat": near,
                   "source": {"kind": "fork", "chat": chat, "turnId": "old-10"}}),
        )
        .await
        .unwrap();
    w.sync().await;
    assert_eq!(
        w.envelopes
            .iter()
            .filter(|e| matches!(e.action, StateAction::ChatTurnsLoaded(_)))
            .count(),
        2
    );
    assert_eq!(w.mirror.chats[&chat].turns.len(), 120);
    let (r, _) = a.subscribe(near.clone()).await.unwrap();
    let SnapshotState::Chat(state) = r.snapshot.unwrap().state else {
        panic!()
    };
    let want: Vec<String> = (0..=10).map(|i| format!("old-{i}")).collect();
    assert_eq!(turn_ids(&state), want);
    assert!(state.turns_next_cursor.is_none());

    // A fork through old-100 copies 101 turns: the newest 50 in its window, the rest paged.
    let far = "ahp-chat:/far".to_owned();
    let _: Value = a
        .request(
            "createChat",
            json!({"channel": session, "chat": far,
                   "source": {"kind": "fork", "chat": chat, "turnId": "old-100"}}),
        )
        .await
        .unwrap();
    let (r, _) = a.subscribe(far.clone()).await.unwrap();
    let snap = r.snapshot.unwrap();
    w.snapshot(&snap);
    let SnapshotState::Chat(state) = snap.state else {
        panic!()
    };
    assert_eq!(state.turns.len(), 50);
    assert_eq!(state.turns.last().unwrap().id, "old-100");
    assert!(state.turns_next_cursor.is_some());
    let _: Value = a
        .request("fetchTurns", json!({"channel": far}))
        .await
        .unwrap();
    let _: Value = a
        .request("fetchTurns", json!({"channel": far}))
        .await
        .unwrap();
    w.sync().await;
    let want: Vec<String> = (0..=100).map(|i| format!("old-{i}")).collect();
    assert_eq!(turn_ids(&w.mirror.chats[&far]), want);
    assert_mirror(&th, &mut w, &[&session, &chat, &far]).await;
    // The source's backend was not open, so the agent got the turn and no position data.
    a.dispatch(far.clone(), turn_started("go", "continue"))
        .await
        .unwrap();
    w.until(|e| e.channel == far && matches!(e.action, StateAction::ChatTurnComplete(_)))
        .await;
    let forks = agent.forks();
    let (_, from) = forks
        .iter()
        .find(|(c, _)| *c == far)
        .expect("opened as a fork");
    assert_eq!(from.backend_id, "long");
    assert_eq!(from.point.turn_id, "old-100");
    assert_eq!(from.point.data, Value::Null);
}
