//! §11.3: transcript paging, the catalogue and past sessions.

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
    let first: Value = a.request("listSessions", json!({})).await.unwrap();
    assert_eq!(first["items"].as_array().unwrap().len(), 1000);
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
        }
        cursor = page["nextCursor"].as_str().map(str::to_owned);
    }
    assert_eq!(seen.len(), 1500);
    let zero = a
        .request::<_, Value>("listSessions", json!({"limit": 0}))
        .await
        .unwrap_err();
    assert!(matches!(zero, ahp::ClientError::Rpc(e) if e.code == -32602));
}
