//! The `Extension` port: an `x-` channel and command served beside the protocol, sharing the
//! host's `serverSeq`, fan-out and replay.

use std::sync::{Arc, Mutex};

use ahpd_sdk::error::RpcError;
use ahpd_sdk::host::HostHandle;
use ahpd_sdk::ports::{ConnInfo, Extension};
use ahpd_sdk::testing::ScriptedAgent;
use async_trait::async_trait;
use serde_json::{Value, json};

use super::support::*;

#[derive(Default)]
struct Notes {
    host: Mutex<Option<HostHandle>>,
    notes: Mutex<Vec<String>>,
}

#[async_trait]
impl Extension for Notes {
    fn schemes(&self) -> Vec<String> {
        vec!["x-notes".into()]
    }
    fn methods(&self) -> Vec<String> {
        vec!["x-notes/add".into()]
    }
    fn attach(&self, host: HostHandle) {
        *self.host.lock().unwrap() = Some(host);
    }
    async fn call(&self, method: &str, params: Value, conn: &ConnInfo) -> Result<Value, RpcError> {
        assert_eq!(method, "x-notes/add");
        let text = params["text"]
            .as_str()
            .ok_or_else(|| RpcError::invalid_params("text: must be a string"))?
            .to_owned();
        self.notes.lock().unwrap().push(text.clone());
        let host = self.host.lock().unwrap().clone().expect("attached");
        host.publish_extension(
            "x-notes://",
            &json!({"type": "x-notes/added", "text": text, "by": conn.client_id}),
        );
        Ok(json!({}))
    }
    fn snapshot(&self, channel: &str) -> Option<Value> {
        (channel == "x-notes://").then(|| json!({"notes": *self.notes.lock().unwrap()}))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_channel_shares_the_sequence_and_the_replay_ring() {
    let th = start_with(ScriptedAgent::new(), |b| {
        b.extension(Arc::new(Notes::default()))
    })
    .await;
    let mut raw = Raw::connect(&th.url).await;
    raw.init("ext").await;
    let sub = raw
        .call(r#"{"jsonrpc":"2.0","id":2,"method":"subscribe","params":{"channel":"x-notes://"}}"#)
        .await;
    assert_eq!(sub["result"]["snapshot"]["resource"], "x-notes://");
    assert_eq!(sub["result"]["snapshot"]["state"], json!({"notes": []}));
    let from = sub["result"]["snapshot"]["fromSeq"].as_u64().unwrap();
    raw.send(r#"{"jsonrpc":"2.0","id":3,"method":"x-notes/add","params":{"channel":"x-notes://","text":"hi"}}"#).await;
    // The action is published before the command answers, so it arrives first.
    let first = raw.recv().await.unwrap();
    assert_eq!(first["method"], "action");
    let reply = raw.recv().await.unwrap();
    assert_eq!(reply["id"], 3);
    assert_eq!(reply["result"], json!({}));
    let env = first["params"].clone();
    assert_eq!(env["channel"], "x-notes://");
    assert_eq!(env["action"]["type"], "x-notes/added");
    assert_eq!(env["action"]["by"], "ext");
    assert!(env["serverSeq"].as_u64().unwrap() > from);
    assert!(env.get("origin").is_none());
    let bad = raw
        .call(r#"{"jsonrpc":"2.0","id":4,"method":"x-notes/add","params":{"text":5}}"#)
        .await;
    assert_eq!(bad["error"]["code"], -32602);
    let unknown = raw
        .call(r#"{"jsonrpc":"2.0","id":5,"method":"x-other/thing","params":{}}"#)
        .await;
    assert_eq!(unknown["error"]["code"], -32601);
    let missing = raw.call(r#"{"jsonrpc":"2.0","id":6,"method":"subscribe","params":{"channel":"x-notes://elsewhere"}}"#).await;
    assert_eq!(missing["error"]["code"], -32001);

    // A reconnecting client gets the extension action in its replay.
    let c = client(&th.url).await;
    let r: Value = c
        .request("reconnect", json!({"channel": "ahp-root://", "clientId": "ext", "lastSeenServerSeq": from, "subscriptions": ["x-notes://"]}))
        .await
        .unwrap();
    assert_eq!(r["type"], "replay");
    assert_eq!(r["actions"][0]["action"]["type"], "x-notes/added");
    assert_eq!(r["missing"], json!([]));
}
