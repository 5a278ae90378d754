//! One connection that sends far more requests than it waits for stays within its bounds: at
//! most the cap is in flight, every request past it is answered at once with an error naming
//! the cap, and the host keeps serving other connections.

use std::time::Duration;

use ahpd_sdk::testing::ScriptedAgent;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::support::*;

const REQUESTS: u64 = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_pipelined_requests_stay_under_the_cap_and_the_rest_are_refused() {
    let hung = "mock:/hung";
    // The hung creation is given up after the request limit, which lets everything queued
    // behind it finish, so the test can see the slots come back.
    let th = start_with(ScriptedAgent::new().hanging_create_for(&[hung]), |b| {
        b.request_timeout(Duration::from_secs(10))
    })
    .await;
    let cap = th.host.handle().connection_stats().in_flight_cap;
    assert_eq!(cap, 256, "the documented default");

    let (ws, _) = tokio_tungstenite::connect_async(&th.url)
        .await
        .expect("connects");
    let (mut sink, mut stream) = ws.split();
    let init = json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
        "params": {"protocolVersions": ["1.0.0"], "clientId": "flood"}});
    sink.send(Message::text(init.to_string())).await.unwrap();
    let next = |v: Option<Result<Message, _>>| -> Value {
        match v {
            Some(Ok(Message::Text(t))) => serde_json::from_str(&t).expect("JSON"),
            other => panic!("the connection ended: {other:?}"),
        }
    };
    loop {
        let v = next(tokio::time::timeout(PATIENCE, stream.next()).await.unwrap());
        if v["id"] == "init" {
            assert!(v.get("result").is_some(), "{v}");
            break;
        }
    }

    // Every answer is read as it comes, while the requests are sent without waiting.
    let reader = tokio::spawn(async move {
        let mut refused = Vec::new();
        let mut answered = Vec::new();
        while (refused.len() + answered.len()) < REQUESTS as usize {
            let v = next(tokio::time::timeout(PATIENCE, stream.next()).await.unwrap());
            let Some(id) = v["id"].as_u64() else { continue };
            let message = v["error"]["message"].as_str().unwrap_or_default();
            if message.contains("requests in flight") {
                refused.push((id, message.to_owned(), v["error"]["data"].clone()));
            } else {
                answered.push(id);
            }
        }
        (refused, answered, stream)
    });
    let chat = ahpd_sdk::util::default_chat_uri(hung);
    // The creation never finishes on its own; the reads on its session wait behind it.
    let first = json!({"jsonrpc": "2.0", "id": 1, "method": "createSession",
        "params": {"channel": hung}});
    sink.feed(Message::text(first.to_string())).await.unwrap();
    for id in 2..=REQUESTS {
        let read = json!({"jsonrpc": "2.0", "id": id, "method": "fetchTurns",
            "params": {"channel": chat}});
        sink.feed(Message::text(read.to_string())).await.unwrap();
    }
    sink.flush().await.unwrap();

    // Another connection is served meanwhile.
    let other = client(&th.url).await;
    other
        .initialize("other".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let _: Value = other
        .request("createSession", json!({"channel": "mock:/other"}))
        .await
        .unwrap();
    other.ping().await.unwrap();

    let (refused, answered, stream) = reader.await.unwrap();
    assert!(!refused.is_empty(), "some requests went past the cap");
    for (id, message, data) in &refused {
        assert!(
            message.contains(&format!("{cap} requests in flight")),
            "{id}: {message}"
        );
        assert_eq!(data["inFlightCap"], cap as u64);
    }
    // Each request got exactly one answer.
    let mut ids: Vec<u64> = refused.iter().map(|r| r.0).chain(answered).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), REQUESTS as usize);

    let stats = th.host.handle().connection_stats();
    assert_eq!(
        stats.in_flight_high_water, cap,
        "never more than the cap in flight"
    );
    assert_eq!(stats.refused_over_cap, refused.len() as u64);
    assert!(stats.held_high_water <= stats.held_bytes);
    assert_eq!(stats.closed_held_full, 0);
    assert_eq!(th.host.handle().outbound_queue_stats().closed_full, 0);

    // The slots came back: the same connection is served again.
    let mut ws = sink.reunite(stream).expect("the two halves of one socket");
    let again = json!({"jsonrpc": "2.0", "id": "again", "method": "fetchTurns",
        "params": {"channel": ahpd_sdk::util::default_chat_uri("mock:/other")}});
    ws.send(Message::text(again.to_string())).await.unwrap();
    loop {
        let v = next(tokio::time::timeout(PATIENCE, ws.next()).await.unwrap());
        if v["id"] == "again" {
            assert!(v.get("result").is_some(), "{v}");
            break;
        }
    }
}

/// Notifications whose work would have to wait past the cap have no answer to carry the
/// refusal: a dispatch is refused in its envelope, an `unsubscribe` closes the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_past_the_cap_are_refused_in_the_envelope_or_by_closing() {
    let hung = "mock:/hung";
    let th = start_with(ScriptedAgent::new().hanging_create_for(&[hung]), |b| {
        b.in_flight_cap(2)
    })
    .await;
    let (mut ws, _) = tokio_tungstenite::connect_async(&th.url)
        .await
        .expect("connects");
    let next =
        |v: Option<Result<Message, tokio_tungstenite::tungstenite::Error>>| -> Option<Value> {
            match v {
                Some(Ok(Message::Text(t))) => Some(serde_json::from_str(&t).expect("JSON")),
                Some(Ok(Message::Close(frame))) => Some(json!({
                    "closed": frame.map(|f| (u16::from(f.code), f.reason.to_string()))
                })),
                _ => None,
            }
        };
    let init = json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
        "params": {"protocolVersions": ["1.0.0"], "clientId": "flood"}});
    ws.send(Message::text(init.to_string())).await.unwrap();
    loop {
        let v = next(tokio::time::timeout(PATIENCE, ws.next()).await.unwrap()).unwrap();
        if v["id"] == "init" {
            break;
        }
    }
    let chat = ahpd_sdk::util::default_chat_uri(hung);
    // Two in flight, neither able to finish: the creation hangs, the read waits behind it.
    for frame in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "createSession", "params": {"channel": hung}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "fetchTurns", "params": {"channel": chat}}),
        json!({"jsonrpc": "2.0", "method": "dispatchAction", "params": {"channel": chat,
            "clientSeq": 7, "action": {"type": "chat/titleChanged", "title": "t"}}}),
        json!({"jsonrpc": "2.0", "method": "unsubscribe", "params": {"channel": chat}}),
    ] {
        ws.send(Message::text(frame.to_string())).await.unwrap();
    }
    let mut rejected = None;
    let closed = loop {
        let v = next(tokio::time::timeout(PATIENCE, ws.next()).await.unwrap())
            .expect("a close frame before the end");
        if let Some(closed) = v.get("closed") {
            break closed.clone();
        }
        if v["method"] == "action" {
            rejected = Some(v["params"].clone());
        }
    };
    let rejected = rejected.expect("the dispatch's envelope came back");
    assert_eq!(rejected["origin"]["clientSeq"], 7);
    let reason = rejected["rejectionReason"].as_str().unwrap();
    assert!(reason.contains("2 requests in flight"), "{reason}");
    assert_eq!(closed, json!([1008, "more than 2 requests in flight"]));
}
