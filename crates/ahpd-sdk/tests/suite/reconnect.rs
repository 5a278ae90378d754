//! Host cases 11.4 (docs/acceptance.md): reconnect with replay, with snapshot, missing channels and unknown clients.

use ahp_types::actions::StateAction;
use ahp_types::commands::ReconnectResult;
use serde_json::{Value, json};

use super::support::*;

async fn session_with_client(
    th: &TestHost,
    client_id: &str,
) -> (ahp::Client, Watch, String, String) {
    let a = client(&th.url).await;
    let mut w = Watch::new(&a);
    let init = a
        .initialize(
            client_id.into(),
            vec!["1.0.0".into()],
            vec!["ahp-root://".into()],
        )
        .await
        .unwrap();
    w.snapshot(&init.snapshots[0]);
    let session = format!("mock:/{client_id}-s");
    let _: Value = a
        .request("createSession", json!({"channel": session}))
        .await
        .unwrap();
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    for uri in [&session, &chat] {
        let (r, _) = a.subscribe(uri.clone()).await.unwrap();
        w.snapshot(&r.snapshot.unwrap());
    }
    (a, w, session, chat)
}

async fn run_turn(a: &ahp::Client, w: &mut Watch, chat: &str, turn: &str, text: &str) {
    a.dispatch(chat.into(), turn_started(turn, text))
        .await
        .unwrap();
    w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(x) if x.turn_id == turn))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnect_replays_what_was_missed_and_the_mirror_catches_up() {
    let th = start().await;
    let (a, mut w, session, chat) = session_with_client(&th, "e2e").await;
    run_turn(&a, &mut w, &chat, "t1", "hello").await;
    assert_mirror(&th, &mut w, &[&session, &chat]).await;
    let seen = w.last_seq;
    // An observer on the same three channels records what the replay must consist of.
    let o = client(&th.url).await;
    let mut wo = Watch::new(&o);
    let init = o
        .initialize(
            "observer".into(),
            vec!["1.0.0".into()],
            vec!["ahp-root://".into()],
        )
        .await
        .unwrap();
    wo.snapshot(&init.snapshots[0]);
    for uri in [&session, &chat] {
        let (r, _) = o.subscribe(uri.clone()).await.unwrap();
        wo.snapshot(&r.snapshot.unwrap());
    }
    assert_eq!(
        th.host.handle().server_seq(),
        seen,
        "nothing else happened yet"
    );
    a.shutdown().await;
    // Meanwhile another client runs a turn.
    let (b, mut wb, _, _) = session_with_client(&th, "b").await;
    let (r, _) = b.subscribe(chat.clone()).await.unwrap();
    wb.snapshot(&r.snapshot.unwrap());
    run_turn(&b, &mut wb, &chat, "t2", "hello").await;
    wo.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(x) if x.turn_id == "t2"))
        .await;
    wo.sync().await;
    let channels = [session.as_str(), chat.as_str(), "ahp-root://"];
    let expected: Vec<_> = wo
        .envelopes
        .iter()
        .filter(|e| e.server_seq > seen && e.rejection_reason.is_none())
        .filter(|e| channels.contains(&e.channel.as_str()))
        .cloned()
        .collect();
    assert!(!expected.is_empty());

    let a2 = client(&th.url).await;
    let mut w2 = Watch::new(&a2);
    w2.mirror = w.mirror.clone();
    w2.last_seq = seen;
    let result = a2
        .reconnect(
            "e2e".into(),
            seen as i64,
            vec!["ahp-root://".into(), session.clone(), chat.clone()],
        )
        .await
        .unwrap();
    match result {
        ReconnectResult::Replay(r) => {
            assert!(r.missing.is_empty());
            assert_eq!(
                r.actions, expected,
                "exactly the envelopes after N on those channels"
            );
            let mut last = seen;
            for env in &r.actions {
                assert!(env.server_seq > last);
                last = env.server_seq;
                assert!(
                    [session.as_str(), chat.as_str(), "ahp-root://"]
                        .contains(&env.channel.as_str())
                );
                w2.mirror.apply(env);
            }
            w2.last_seq = last;
        }
        other => panic!("expected a replay, got {other:?}"),
    }
    assert_mirror(&th, &mut w2, &[&session, &chat, "ahp-root://"]).await;
    // Later envelopes continue the sequence.
    run_turn(&a2, &mut w2, &chat, "t3", "hello").await;
    assert_mirror(&th, &mut w2, &[&session, &chat]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_beyond_the_ring_or_an_unknown_client_gets_snapshots_and_disposed_sessions_are_missing()
 {
    let th = start_with(ahpd_sdk::testing::ScriptedAgent::new(), |b| {
        b.replay_capacity(8)
    })
    .await;
    let (a, mut w, session, chat) = session_with_client(&th, "e2e").await;
    let seen = w.last_seq;
    for i in 0..3 {
        run_turn(&a, &mut w, &chat, &format!("t{i}"), "hello").await;
    }
    let a2 = client(&th.url).await;
    // Watch before asking, so nothing sent right after the reply is missed.
    let mut w2 = Watch::new(&a2);
    let result = a2
        .reconnect(
            "e2e".into(),
            seen as i64,
            vec!["ahp-root://".into(), session.clone(), chat.clone()],
        )
        .await
        .unwrap();
    match result {
        ReconnectResult::Snapshot(s) => {
            assert_eq!(s.snapshots.len(), 3);
            for snap in &s.snapshots {
                w2.snapshot(snap);
            }
        }
        other => panic!("expected snapshots, got {other:?}"),
    }
    assert_mirror(&th, &mut w2, &[&session, &chat, "ahp-root://"]).await;

    let stranger = client(&th.url).await;
    let r = stranger
        .reconnect("never-seen".into(), 1, vec![session.clone()])
        .await
        .unwrap();
    assert!(matches!(r, ReconnectResult::Snapshot(s) if s.snapshots.len() == 1));

    let _: Value = a2
        .request("disposeSession", json!({"channel": session}))
        .await
        .unwrap();
    let late = client(&th.url).await;
    let seq = th.host.handle().server_seq() as i64;
    let mut wl = Watch::new(&late);
    match late
        .reconnect("e2e".into(), seq, vec![session.clone(), chat.clone()])
        .await
        .unwrap()
    {
        ReconnectResult::Replay(r) => assert_eq!(r.missing.len(), 2),
        ReconnectResult::Snapshot(s) => assert!(s.snapshots.is_empty()),
    }
    // No subscription was kept for the missing channels: a new session under the same URI
    // runs a turn and the reconnected client hears nothing of it. (`late` superseded `a2`,
    // which shared its client id, so another client drives it.)
    let d = client(&th.url).await;
    let mut wd = open_session(&d, "d", &session, &[&chat]).await;
    run_turn(&d, &mut wd, &chat, "again", "hello").await;
    wl.sync().await;
    assert!(wl.envelopes.is_empty(), "{:?}", wl.envelopes);
}
