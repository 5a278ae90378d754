//! Host cases 11.5 (docs/acceptance.md): several clients, a stalled client, coalescing, independent unsubscribes.

use std::sync::Arc;
use std::time::Duration;

use ahp::{Client, ClientConfig};
use ahp_types::actions::StateAction;
use ahp_types::state::ResponsePart;
use ahpd_sdk::agent::{SessionContext, TurnRequest};
use ahpd_sdk::host::HostBuilder;
use ahpd_sdk::testing::{ScriptedAgent, pair};
use serde_json::{Value, json};

use super::puppet::{Puppet, complete};
use super::support::*;

async fn joined(th: &TestHost, id: &str, session: &str, chat: &str) -> (Client, Watch) {
    let c = client(&th.url).await;
    let mut w = Watch::new(&c);
    c.initialize(id.into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    for uri in [session, chat] {
        let (r, _) = c.subscribe(uri.to_owned()).await.unwrap();
        w.snapshot(&r.snapshot.unwrap());
    }
    (c, w)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_receive_identical_envelopes_and_one_unsubscribing_leaves_the_other() {
    let th = start().await;
    let session = "mock:/shared".to_owned();
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
    let (a, mut wa) = joined(&th, "a", &session, &chat).await;
    let (b, mut wb) = joined(&th, "b", &session, &chat).await;
    for (i, text) in ["hello", "reason", "tool"].iter().enumerate() {
        let turn = format!("t{i}");
        a.dispatch(chat.clone(), turn_started(&turn, text))
            .await
            .unwrap();
        for w in [&mut wa, &mut wb] {
            w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(x) if x.turn_id == turn))
                .await;
        }
        assert_mirror(&th, &mut wa, &[&session, &chat]).await;
        assert_mirror(&th, &mut wb, &[&session, &chat]).await;
        assert_eq!(wa.mirror, wb.mirror);
    }
    // The same envelopes, whole (numbers, actions, origins), in the same order.
    let accepted = |w: &Watch| {
        w.envelopes
            .iter()
            .filter(|e| e.rejection_reason.is_none())
            .cloned()
            .collect::<Vec<_>>()
    };
    assert!(!accepted(&wa).is_empty());
    assert_eq!(accepted(&wa), accepted(&wb));
    a.unsubscribe(chat.clone()).await.unwrap();
    b.dispatch(chat.clone(), turn_started("t9", "hello"))
        .await
        .unwrap();
    wb.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(x) if x.turn_id == "t9"))
        .await;
    assert_mirror(&th, &mut wb, &[&chat]).await;
}

// One thread on purpose: the scripted backend yields after every delta, so the healthy client's
// writer runs between two deltas whatever else the machine is doing. On a worker pool a busy
// machine may leave that writer unscheduled for a whole burst and fill its small queue too.
#[tokio::test(flavor = "current_thread")]
async fn a_stalled_client_is_closed_and_never_slows_the_others() {
    let host = HostBuilder::new()
        .agent(Arc::new(ScriptedAgent::new()))
        .delta_window(Duration::ZERO)
        .outbound_queue(16)
        .build()
        .unwrap();
    let host = Arc::new(host);
    // Client A: a healthy memory client with the official client on top.
    let (peer_a, mem_a) = pair(8192, 1 << 20);
    let h = host.clone();
    tokio::spawn(async move { h.accept(peer_a).await });
    let a = Client::connect(
        mem_a,
        ClientConfig {
            default_request_timeout: Some(PATIENCE),
            subscription_buffer: 8192,
        },
    )
    .await
    .unwrap();
    let chat = ahpd_sdk::util::default_chat_uri("mock:/stall");
    let mut wa = open_session(&a, "a", "mock:/stall", &[&chat]).await;

    // Client B: subscribes, then never reads again; its buffer holds one frame.
    let (peer_b, mut mem_b) = pair(1, 1 << 20);
    let mut closed_b = mem_b.close_watch();
    let h = host.clone();
    tokio::spawn(async move { h.accept(peer_b).await });
    mem_b.send_text(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersions":["1.0.0"],"clientId":"b"}}"#).await;
    assert!(mem_b.recv_text().await.unwrap().contains("protocolVersion"));
    mem_b
        .send_text(
            &json!({"jsonrpc":"2.0","id":2,"method":"subscribe","params":{"channel": chat}})
                .to_string(),
        )
        .await;
    let sub_b: Value = serde_json::from_str(&mem_b.recv_text().await.unwrap()).unwrap();
    let snap_b: ahp_types::state::Snapshot =
        serde_json::from_value(sub_b["result"]["snapshot"].clone()).unwrap();

    a.dispatch(chat.clone(), turn_started("big", "deltas:1000"))
        .await
        .unwrap();
    let end = wa
        .until(|e| matches!(&e.action, StateAction::ChatTurnComplete(x) if x.turn_id == "big"))
        .await;
    assert!(end.server_seq > 1000);
    closed_b.wait_for(|c| c.is_some()).await.unwrap();
    assert_eq!(closed_b.borrow().as_ref().map(|c| c.0), Some(1013));
    let text = match &wa.mirror.chats[&chat].turns[0].response_parts[0] {
        ResponsePart::Markdown(m) => m.content.clone(),
        other => panic!("expected markdown, got {other:?}"),
    };
    assert_eq!(text.len(), 1000, "client A received every delta");
    let snap = host.snapshot(&chat).await.unwrap();
    wa.sync().await;
    let host_chat = match snap.state {
        ahp_types::state::SnapshotState::Chat(c) => *c,
        _ => panic!("chat snapshot expected"),
    };
    assert_eq!(wa.mirror.chats[&chat], host_chat);

    // B comes back, replays what it missed, and agrees with the host.
    let (peer_b2, mem_b2) = pair(8192, 1 << 20);
    let h = host.clone();
    tokio::spawn(async move { h.accept(peer_b2).await });
    let b2 = Client::connect(
        mem_b2,
        ClientConfig {
            default_request_timeout: Some(PATIENCE),
            subscription_buffer: 8192,
        },
    )
    .await
    .unwrap();
    let mut mirror_b = ahpd_sdk::testing::Mirror::default();
    mirror_b.apply_snapshot(&snap_b);
    match b2
        .reconnect("b".into(), snap_b.from_seq, vec![chat.clone()])
        .await
        .unwrap()
    {
        ahp_types::commands::ReconnectResult::Replay(r) => {
            for env in &r.actions {
                mirror_b.apply(env);
            }
        }
        ahp_types::commands::ReconnectResult::Snapshot(s) => {
            for snap in &s.snapshots {
                mirror_b.apply_snapshot(snap);
            }
        }
    }
    assert_eq!(mirror_b.chats[&chat], host_chat);
}

/// A backend that streams 200 one-character deltas 5 ms apart, then completes.
fn paced() -> Puppet {
    Puppet::new(|turn: TurnRequest, ctx: SessionContext| async move {
        let t = turn.turn_id;
        let part: StateAction = serde_json::from_value(json!({"type": "chat/responsePart",
            "turnId": t, "part": {"kind": "markdown", "id": "m", "content": ""}}))
        .unwrap();
        ctx.emit(part);
        for _ in 0..200 {
            let d: StateAction = serde_json::from_value(json!({"type": "chat/delta",
                "turnId": t, "partId": "m", "content": "x"}))
            .unwrap();
            ctx.emit(d);
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        ctx.emit(complete(&t));
    })
}

/// Run the paced script through a host with this window, over an in-memory connection (so a
/// paused clock drives every timer and nothing waits on real I/O). Returns the number of
/// delta frames the client got and its final chat state, checked against the host's.
async fn delta_frames_and_state(window: Duration) -> (usize, ahp_types::state::ChatState) {
    let host = Arc::new(
        HostBuilder::new()
            .agent(Arc::new(paced()))
            .delta_window(window)
            .build()
            .unwrap(),
    );
    let (peer, mem) = pair(8192, 1 << 20);
    let h = host.clone();
    tokio::spawn(async move { h.accept(peer).await });
    let a = Client::connect(
        mem,
        ClientConfig {
            default_request_timeout: Some(PATIENCE),
            subscription_buffer: 8192,
        },
    )
    .await
    .unwrap();
    let chat = ahpd_sdk::util::default_chat_uri("pup:/coalesce");
    let mut w = open_session(&a, "c", "pup:/coalesce", &[&chat]).await;
    a.dispatch(chat.clone(), turn_started("t", "go"))
        .await
        .unwrap();
    w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(_)))
        .await;
    let snap = host.snapshot(&chat).await.unwrap();
    w.sync().await;
    let ahp_types::state::SnapshotState::Chat(host_chat) = snap.state else {
        panic!("chat snapshot expected")
    };
    assert_eq!(
        w.mirror.chats[&chat], *host_chat,
        "the mirror equals the host"
    );
    let deltas = w
        .envelopes
        .iter()
        .filter(|e| matches!(e.action, StateAction::ChatDelta(_)))
        .count();
    let mut state = w.mirror.chats[&chat].clone();
    // Timestamps differ between runs; compare content.
    state.modified_at.clear();
    for t in state.turns.iter_mut() {
        t.started_at = None;
    }
    (deltas, state)
}

// A paused clock on one thread: the 5 ms pacing and the 75 ms window are virtual time, so the
// frame count does not depend on how fast the machine runs the script.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn coalescing_reduces_to_the_same_state_with_fewer_frames() {
    let (plain_frames, plain) = delta_frames_and_state(Duration::ZERO).await;
    let (merged_frames, merged) = delta_frames_and_state(Duration::from_millis(75)).await;
    assert_eq!(plain_frames, 200);
    assert!(
        merged_frames <= 20,
        "{merged_frames} delta frames with coalescing"
    );
    assert!(merged_frames >= 2, "the stream still arrives in pieces");
    assert_eq!(plain.turns, merged.turns);
}
