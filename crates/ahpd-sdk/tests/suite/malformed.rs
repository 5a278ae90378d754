//! Host cases 11.7 (docs/acceptance.md) robustness: malformed frames get JSON-RPC errors and never take the host down.

use ahpd_sdk::host::HostBuilder;
use ahpd_sdk::testing::{ScriptedAgent, pair};
use proptest::prelude::*;
use serde_json::Value;
use std::sync::Arc;

fn frame() -> impl Strategy<Value = String> {
    let methods = prop::sample::select(vec![
        "initialize",
        "ping",
        "subscribe",
        "dispatchAction",
        "createSession",
        "listSessions",
        "fetchTurns",
        "reconnect",
        "unsubscribe",
        "x-nope",
        "",
        "resolveSessionConfig",
    ]);
    let value = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[a-z:/]{0,12}".prop_map(Value::from),
        Just(serde_json::json!({"channel": "ahp-root://"})),
        Just(serde_json::json!({"protocolVersions": ["1.0.0"], "clientId": "p"})),
        Just(serde_json::json!({"channel": "mock:/x", "action": {"type": "chat/turnStarted"}})),
        Just(serde_json::json!([1, 2])),
    ];
    prop_oneof![
        // arbitrary text
        ".{0,64}",
        // JSON-RPC-shaped objects with wrong types here and there
        (methods, value.clone(), value).prop_map(|(m, id, params)| {
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": m, "params": params})
                .to_string()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    #[test]
    fn any_frame_sequence_gets_answers_and_the_host_stays_up(frames in prop::collection::vec(frame(), 1..12)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let host = HostBuilder::new().agent(Arc::new(ScriptedAgent::new())).max_frame_bytes(256).build().unwrap();
            let (peer, mut client) = pair(4096, 256);
            let task = tokio::spawn(async move { host.accept(peer).await; host });
            for f in &frames {
                assert!(client.send_text(f).await);
            }
            // A final ping proves the connection still answers, in order.
            assert!(client.send_text(r#"{"jsonrpc":"2.0","id":"last","method":"ping"}"#).await);
            loop {
                let Some(text) = client.recv_text().await else {
                    // Only a refused version or an oversized frame closes the connection.
                    break;
                };
                let v: Value = serde_json::from_str(&text).expect("every host frame is JSON");
                assert_eq!(v["jsonrpc"], "2.0");
                if v["id"] == "last" {
                    assert_eq!(v["result"], Value::Null);
                    break;
                }
            }
            client.hang_up();
            let host = task.await.expect("the connection task did not panic");
            // The host still serves a fresh connection.
            let (peer, mut c2) = pair(16, 1024);
            let t2 = tokio::spawn(async move { host.accept(peer).await });
            assert!(c2.send_text(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).await);
            assert!(c2.recv_text().await.unwrap().contains("\"result\":null"));
            c2.hang_up();
            t2.await.unwrap();
        });
    }
}

#[tokio::test]
async fn an_oversized_websocket_frame_closes_with_1009() {
    let host = HostBuilder::new().max_frame_bytes(64).build().unwrap();
    let (peer, client) = pair(16, 64);
    let mut closed = client.close_watch();
    let task = tokio::spawn(async move { host.accept(peer).await });
    assert!(
        client
            .send_text(&format!("{{\"x\":\"{}\"}}", "y".repeat(100)))
            .await
    );
    closed.wait_for(|c| c.is_some()).await.unwrap();
    assert_eq!(closed.borrow().as_ref().map(|c| c.0), Some(1009));
    task.await.unwrap();
}
