//! Host cases 11.1 (docs/acceptance.md): transport, token, handshake and JSON-RPC handling.

use std::sync::Arc;

use ahpd_sdk::host::HostBuilder;
use ahpd_sdk::testing::ScriptedAgent;
use ahpd_sdk::transport::ws::WsConfig;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::support::*;

async fn http_status(addr: std::net::SocketAddr, path: &str, extra: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra}\r\n"
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).await.unwrap();
    line
}

#[tokio::test]
async fn the_token_is_checked_before_the_upgrade() {
    let host = HostBuilder::new()
        .agent(Arc::new(ScriptedAgent::new()))
        .build()
        .unwrap();
    let server = host
        .serve_ws(WsConfig::loopback(0).with_token("t0k"))
        .await
        .unwrap();
    let addr = server.local_addr();
    let err = ahp_ws::WebSocketTransport::connect(&format!("ws://{addr}"))
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("401"), "{err}");
    assert!(
        ahp_ws::WebSocketTransport::connect(&format!("ws://{addr}/?tkn=t0k"))
            .await
            .is_ok()
    );
    assert!(
        http_status(addr, "/", "Authorization: Bearer t0k\r\n")
            .await
            .contains(" 101 ")
    );
    assert!(
        http_status(addr, "/", "Authorization: Bearer nope\r\n")
            .await
            .contains(" 401 ")
    );
}

#[tokio::test]
async fn non_loopback_without_a_token_refuses_to_start_and_foreign_origins_are_refused() {
    let host = HostBuilder::new().build().unwrap();
    let cfg = WsConfig {
        addr: "0.0.0.0:0".parse().unwrap(),
        ..WsConfig::default()
    };
    assert!(host.serve_ws(cfg).await.is_err());
    let server = host.serve_ws(WsConfig::loopback(0)).await.unwrap();
    let addr = server.local_addr();
    assert!(
        http_status(addr, "/", "Origin: https://example.com\r\n")
            .await
            .contains(" 403 ")
    );
    // A page served from this machine is a web page like any other.
    assert!(
        http_status(addr, "/any/path", "Origin: http://localhost:5173\r\n")
            .await
            .contains(" 403 ")
    );
    assert!(http_status(addr, "/any/path", "").await.contains(" 101 "));
    let allowing = host
        .serve_ws(WsConfig::loopback(0).with_allowed_origins(["HTTPS://VSCode.dev/".to_owned()]))
        .await
        .unwrap();
    let a = allowing.local_addr();
    assert!(
        http_status(a, "/", "Origin: https://vscode.dev\r\n")
            .await
            .contains(" 101 ")
    );
    assert!(
        http_status(a, "/", "Origin: https://vscode.dev.evil.example\r\n")
            .await
            .contains(" 403 ")
    );
    // A plain HTTP request gets 426.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    assert!(out.starts_with("HTTP/1.1 426"), "{out}");
}

#[tokio::test]
async fn handshake_states_and_version_negotiation() {
    let th = start().await;
    let mut raw = Raw::connect(&th.url).await;
    let pong = raw
        .call(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .await;
    assert_eq!(pong, json!({"jsonrpc": "2.0", "id": 1, "result": null}));
    let early = raw
        .call(r#"{"jsonrpc":"2.0","id":2,"method":"listSessions","params":{}}"#)
        .await;
    assert_eq!(early["error"]["code"], -32600);
    for (offer, want) in [
        (json!(["1.0.0", "0.9.0"]), "1.0.0"),
        (json!(["0.9.0", "1.0.0"]), "1.0.0"),
        (json!(["0.9.3"]), "0.9.3"),
    ] {
        let mut r = Raw::connect(&th.url).await;
        let v = r.call(&json!({"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersions": offer, "clientId": "v"}}).to_string()).await;
        assert_eq!(v["result"]["protocolVersion"], want);
        let again = r.call(&json!({"jsonrpc":"2.0","id":4,"method":"initialize","params":{"protocolVersions": ["1.0.0"], "clientId": "v"}}).to_string()).await;
        assert_eq!(again["error"]["code"], -32600);
    }
    let bad = raw.call(&json!({"jsonrpc":"2.0","id":5,"method":"initialize","params":{"protocolVersions": ["1.0"], "clientId": "v"}}).to_string()).await;
    assert_eq!(bad["error"]["code"], -32602);
    let none = raw.call(&json!({"jsonrpc":"2.0","id":6,"method":"initialize","params":{"protocolVersions": ["2.0.0"], "clientId": "v"}}).to_string()).await;
    assert_eq!(none["error"]["code"], -32005);
    assert_eq!(
        none["error"]["data"]["supportedVersions"],
        json!(["1.0.0", "0.9.0"])
    );
    assert!(raw.recv().await.is_none(), "the socket closes after -32005");
}

#[tokio::test]
async fn root_snapshot_channel_rules_ids_batches_and_unknown_methods() {
    let th = start().await;
    let mut raw = Raw::connect(&th.url).await;
    let init = raw
        .call(&json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersions":["1.0.0"],"clientId":"c","initialSubscriptions":["ahp-root://"]}}).to_string())
        .await;
    let snap: ahp_types::state::Snapshot =
        serde_json::from_value(init["result"]["snapshots"][0].clone()).unwrap();
    match snap.state {
        ahp_types::state::SnapshotState::Root(r) => {
            assert_eq!(r.agents[0].provider, "mock");
            assert!(r.config.is_some());
        }
        other => panic!("expected root, got {other:?}"),
    }
    let wrong = raw.call(r#"{"jsonrpc":"2.0","id":2,"method":"resolveSessionConfig","params":{"channel":"ahp-root://x"}}"#).await;
    assert_eq!(wrong["error"]["code"], -32602);
    assert!(
        wrong["error"]["message"]
            .as_str()
            .unwrap()
            .contains("ahp-root://")
    );
    let ok = raw
        .call(r#"{"jsonrpc":"2.0","id":3,"method":"resolveSessionConfig","params":{}}"#)
        .await;
    assert!(ok["result"]["schema"].is_object());
    let s = raw
        .call(r#"{"jsonrpc":"2.0","id":"a1","method":"ping"}"#)
        .await;
    assert_eq!(s["id"], "a1");
    let batch = raw
        .call(r#"[{"jsonrpc":"2.0","id":2,"method":"ping"}]"#)
        .await;
    assert_eq!(
        batch,
        json!({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":batch["error"]["message"]}})
    );
    let parse = raw.call("{").await;
    assert_eq!(parse["error"]["code"], -32700);
    assert_eq!(parse["id"], Value::Null);
    let unknown = raw
        .call(r#"{"jsonrpc":"2.0","id":9,"method":"frobnicate","params":{}}"#)
        .await;
    assert_eq!(unknown["error"]["code"], -32601);
    for m in [
        "moveChat",
        "createTerminal",
        "resourceWrite",
        "runAutomation",
    ] {
        let v = raw
            .call(
                &json!({"jsonrpc":"2.0","id":10,"method":m,"params":{"channel":"ahp-root://"}})
                    .to_string(),
            )
            .await;
        assert_eq!(v["error"]["code"], -32601, "{m}");
    }
    // An unknown notification gets no reply: the next reply is the ping's.
    raw.send(r#"{"jsonrpc":"2.0","method":"frobnicate"}"#).await;
    let p = raw
        .call(r#"{"jsonrpc":"2.0","id":11,"method":"ping"}"#)
        .await;
    assert_eq!(p["id"], 11);
}

#[tokio::test]
async fn stdio_answers_one_line_per_message() {
    let host = HostBuilder::new().build().unwrap();
    let (client_io, host_io) = tokio::io::duplex(4096);
    let (hr, hw) = tokio::io::split(host_io);
    let peer = ahpd_sdk::transport::stdio::peer(hr, hw, 1024);
    let task = tokio::spawn(async move { host.accept(peer).await });
    let (cr, mut cw) = tokio::io::split(client_io);
    cw.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\r\n")
        .await
        .unwrap();
    let mut lines = BufReader::new(cr).lines();
    assert_eq!(
        lines.next_line().await.unwrap().unwrap(),
        r#"{"jsonrpc":"2.0","id":1,"result":null}"#
    );
    let long = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\",\"x\":\"{}\"}}\n",
        "a".repeat(2000)
    );
    cw.write_all(long.as_bytes()).await.unwrap();
    let v: Value = serde_json::from_str(&lines.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(v["error"]["code"], -32600);
    cw.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n")
        .await
        .unwrap();
    assert!(
        lines
            .next_line()
            .await
            .unwrap()
            .unwrap()
            .contains("\"id\":3")
    );
    cw.shutdown().await.unwrap();
    task.await.unwrap();
}
