//! Host cases 11.3 (docs/acceptance.md): transcript paging, the catalogue and past sessions.

use ahp_types::actions::StateAction;
use ahp_types::state::SnapshotState;
use ahpd_sdk::testing::ScriptedAgent;
use serde_json::{Value, json};

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_past_conversation_opens_with_one_page_and_loads_older_pages() {
    let th = start_with(ScriptedAgent::new().with_history("old", 120), |b| {
        b.turns_page(50)
    })
    .await;
    let a = client(&th.url).await;
    a.initialize("p".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let mut w = Watch::new(&a);
    let chat = ahpd_sdk::util::default_chat_uri("mock:/old");
    let (r, _) = a.subscribe(chat.clone()).await.unwrap();
    let snap = r.snapshot.unwrap();
    // A second client watching the same chat while the first one pages.
    let b = client(&th.url).await;
    b.initialize("p2".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let mut wb = Watch::new(&b);
    let (rb, _) = b.subscribe(chat.clone()).await.unwrap();
    wb.snapshot(&rb.snapshot.unwrap());
    let cursor = match &snap.state {
        SnapshotState::Chat(c) => {
            assert_eq!(c.turns.len(), 50);
            c.turns_next_cursor.clone().expect("more turns remain")
        }
        other => panic!("expected a chat, got {other:?}"),
    };
    w.snapshot(&snap);
    let bogus = a
        .request::<_, Value>("fetchTurns", json!({"channel": chat, "cursor": "bogus"}))
        .await
        .unwrap_err();
    assert!(matches!(bogus, ahp::ClientError::Rpc(e) if e.code == -32602));
    let reply: Value = a
        .request("fetchTurns", json!({"channel": chat, "cursor": cursor}))
        .await
        .unwrap();
    assert_eq!(reply, json!({}));
    // turnsLoaded arrived before the reply, so it is already queued for the watcher.
    let loaded = w
        .until(|e| matches!(e.action, StateAction::ChatTurnsLoaded(_)))
        .await;
    match &loaded.action {
        StateAction::ChatTurnsLoaded(l) => assert_eq!(l.turns.len(), 50),
        _ => unreachable!(),
    }
    let _: Value = a
        .request("fetchTurns", json!({"channel": chat}))
        .await
        .unwrap();
    w.until(|e| matches!(&e.action, StateAction::ChatTurnsLoaded(l) if l.turns.len() == 20 && l.turns_next_cursor.is_none())).await;
    assert_eq!(w.mirror.chats[&chat].turns.len(), 120);
    assert_mirror(&th, &mut w, &[&chat]).await;
    // The other subscriber's mirror holds the same window.
    assert_mirror(&th, &mut wb, &[&chat]).await;
    assert_eq!(wb.mirror.chats[&chat], w.mirror.chats[&chat]);
    // Another spelling of the live session is refused, naming the live URI.
    let other = a
        .subscribe("ahp-session:/old".into())
        .await
        .err()
        .expect("refused");
    assert!(
        matches!(other, ahp::ClientError::Rpc(e) if e.code == -32001 && e.message.contains("mock:/old"))
    );
}

#[tokio::test]
async fn list_sessions_pages_newest_first_without_duplicates() {
    let mut agent = ScriptedAgent::new();
    for i in 0..1500 {
        agent = agent.with_history(&format!("s{i:04}"), 0);
    }
    let th = start_with(agent, |b| b).await;
    let a = client(&th.url).await;
    a.initialize("l".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    // A live session, newer than every stored one, must lead the list.
    let _: Value = a
        .request("createSession", json!({"channel": "mock:/fresh"}))
        .await
        .unwrap();
    let first: Value = a.request("listSessions", json!({})).await.unwrap();
    assert_eq!(first["items"].as_array().unwrap().len(), 1000);
    assert_eq!(first["items"][0]["resource"], "mock:/fresh");
    let mut modified: Vec<String> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["modifiedAt"].as_str().unwrap().to_owned())
        .collect();
    let mut seen: std::collections::HashSet<String> = first["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["resource"].as_str().unwrap().to_owned())
        .collect();
    let mut cursor = first["nextCursor"].as_str().map(str::to_owned);
    while let Some(c) = cursor {
        let page: Value = a
            .request("listSessions", json!({"cursor": c, "limit": 300}))
            .await
            .unwrap();
        for r in page["items"].as_array().unwrap() {
            assert!(
                seen.insert(r["resource"].as_str().unwrap().to_owned()),
                "duplicate row"
            );
            modified.push(r["modifiedAt"].as_str().unwrap().to_owned());
        }
        cursor = page["nextCursor"].as_str().map(str::to_owned);
    }
    assert_eq!(seen.len(), 1501);
    // Newest first across every page (RFC 3339 UTC strings of one format sort as times).
    assert!(
        modified.windows(2).all(|w| w[0] >= w[1]),
        "rows are not newest first"
    );
    let zero = a
        .request::<_, Value>("listSessions", json!({"limit": 0}))
        .await
        .unwrap_err();
    assert!(matches!(zero, ahp::ClientError::Rpc(e) if e.code == -32602));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_past_session_opens_under_the_spelling_it_was_asked_for() {
    let th = start_with(ScriptedAgent::new().with_history("past", 3), |b| b).await;
    let a = client(&th.url).await;
    a.initialize("sp".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let (r, _) = a.subscribe("ahp-session:/past".into()).await.unwrap();
    let snap = r.snapshot.expect("a session snapshot");
    assert_eq!(snap.resource, "ahp-session:/past");
    match &snap.state {
        SnapshotState::Session(s) => {
            assert_eq!(
                s.default_chat.as_deref(),
                Some(ahpd_sdk::util::default_chat_uri("ahp-session:/past").as_str())
            );
        }
        other => panic!("expected a session, got {other:?}"),
    }
    // The provider's spelling of the same conversation is refused while it is live.
    let other = a
        .subscribe("mock:/past".into())
        .await
        .err()
        .expect("refused");
    assert!(
        matches!(&other, ahp::ClientError::Rpc(e) if e.code == -32001 && e.message.contains("ahp-session:/past")),
        "{other:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_to_a_turn_on_an_older_page_loads_the_pages_it_needs() {
    let agent = ScriptedAgent::new().with_history("deep", 120).rewinding();
    let th = start_with(agent.clone(), |b| b.turns_page(50)).await;
    let a = client(&th.url).await;
    a.initialize("rw".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let mut w = Watch::new(&a);
    let chat = ahpd_sdk::util::default_chat_uri("mock:/deep");
    let (r, _) = a.subscribe(chat.clone()).await.unwrap();
    w.snapshot(&r.snapshot.unwrap());

    // `old-5` is on the oldest of three pages: the window holds old-70..old-119.
    let rewind: StateAction =
        serde_json::from_value(json!({"type": "chat/truncated", "turnId": "old-5"})).unwrap();
    a.dispatch(chat.clone(), rewind).await.unwrap();
    let env = w
        .until(|e| matches!(e.action, StateAction::ChatTruncated(_)))
        .await;
    assert!(env.rejection_reason.is_none(), "{env:?}");
    let loaded = w
        .envelopes
        .iter()
        .filter(|e| matches!(e.action, StateAction::ChatTurnsLoaded(_)))
        .count();
    assert_eq!(loaded, 2, "the two older pages came first");
    let ids: Vec<String> = w.mirror.chats[&chat]
        .turns
        .iter()
        .map(|t| t.id.clone())
        .collect();
    let expected: Vec<String> = (0..=5).map(|i| format!("old-{i}")).collect();
    assert_eq!(ids, expected);
    assert_mirror(&th, &mut w, &[chat.as_str()]).await;
}
