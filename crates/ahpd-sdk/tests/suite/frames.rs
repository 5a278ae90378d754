//! The WebSocket frame handler over a real socket, fed random bytes and random JSON: every frame
//! gets exactly one error answer, nothing panics and the connection stays open; a message over
//! the size limit closes it with 1009, however far over.

use std::sync::Arc;

use ahpd_sdk::host::HostBuilder;
use ahpd_sdk::testing::ScriptedAgent;
use ahpd_sdk::transport::ws::WsConfig;
use futures::{SinkExt, StreamExt};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Map, Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::support::PATIENCE;

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Methods a client may send; `ping` is left out, since it answers whatever its params.
const METHODS: &[&str] = &[
    "initialize",
    "reconnect",
    "subscribe",
    "listSessions",
    "createSession",
    "disposeSession",
    "createChat",
    "disposeChat",
    "fetchTurns",
    "completions",
    "resolveSessionConfig",
    "sessionConfigCompletions",
    "authenticate",
    "resourceRead",
    "resourceList",
    "resourceResolve",
    "dispatchAction",
    "unsubscribe",
    "x-nope/any",
];

/// One frame a client might send by mistake or malice; each must be answered by one error.
#[derive(Debug, Clone)]
enum Junk {
    /// Bytes that are not a JSON object, as a text frame (made valid UTF-8) or a binary one.
    Bytes { bytes: Vec<u8>, binary: bool },
    /// A JSON value that is not an object.
    NotAnObject(Value),
    /// A request with an id whose params cannot fit any method (a scalar), with stray fields.
    BadParams {
        method: String,
        params: Value,
        extra: Map<String, Value>,
    },
    /// A request whose method is not a string.
    MethodNotAString(Value),
    /// An id and no method.
    NoMethod(Map<String, Value>),
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,24}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        ".{0,24}".prop_map(Value::from),
    ]
}

fn stray_fields() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map("[a-z]{1,8}", json_value(), 0..4).prop_map(|m| {
        m.into_iter()
            .filter(|(k, _)| !matches!(k.as_str(), "id" | "method" | "params" | "result" | "error"))
            .collect()
    })
}

fn junk() -> impl Strategy<Value = Junk> {
    let method = prop_oneof![
        prop::sample::select(METHODS).prop_map(str::to_owned),
        "[a-zA-Z/_-]{0,16}".prop_filter("not ping", |m| m != "ping"),
    ];
    prop_oneof![
        (prop::collection::vec(any::<u8>(), 0..512), any::<bool>())
            .prop_filter("not a JSON object", |(b, _)| {
                serde_json::from_slice::<Map<String, Value>>(
                    &String::from_utf8_lossy(b).into_owned().into_bytes(),
                )
                .is_err()
            })
            .prop_map(|(bytes, binary)| Junk::Bytes { bytes, binary }),
        json_value()
            .prop_filter("not an object", |v| !v.is_object())
            .prop_map(Junk::NotAnObject),
        (method, scalar(), stray_fields()).prop_map(|(method, params, extra)| Junk::BadParams {
            method,
            params,
            extra
        }),
        json_value()
            .prop_filter("not a string", |v| !v.is_string() && !v.is_null())
            .prop_map(Junk::MethodNotAString),
        stray_fields().prop_map(Junk::NoMethod),
    ]
}

fn message_of(junk: &Junk, id: u64) -> Message {
    let object = |mut m: Map<String, Value>| {
        m.insert("jsonrpc".into(), json!("2.0"));
        m.insert("id".into(), json!(id));
        Message::text(Value::Object(m).to_string())
    };
    match junk {
        Junk::Bytes {
            bytes,
            binary: true,
        } => Message::binary(bytes.clone()),
        Junk::Bytes { bytes, .. } => Message::text(String::from_utf8_lossy(bytes).into_owned()),
        Junk::NotAnObject(v) => Message::text(v.to_string()),
        Junk::BadParams {
            method,
            params,
            extra,
        } => {
            let mut m = extra.clone();
            m.insert("method".into(), json!(method));
            m.insert("params".into(), params.clone());
            object(m)
        }
        Junk::MethodNotAString(v) => {
            let mut m = Map::new();
            m.insert("method".into(), v.clone());
            object(m)
        }
        Junk::NoMethod(extra) => object(extra.clone()),
    }
}

async fn next_json(ws: &mut Ws) -> Value {
    let msg = tokio::time::timeout(PATIENCE, ws.next())
        .await
        .expect("an answer arrives")
        .expect("the connection stays open")
        .expect("the connection stays healthy");
    match msg {
        Message::Text(t) => serde_json::from_str(t.as_str()).expect("host frames are JSON"),
        other => panic!("expected a text frame, got {other:?}"),
    }
}

/// Sends `frames` on a fresh, initialized connection, each followed by a ping: exactly one
/// error answer comes for each before its ping's answer, and the last ping proves the
/// connection is still served.
async fn feed(url: &str, frames: &[Junk]) {
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("connects");
    let init = json!({"jsonrpc": "2.0", "id": "init", "method": "initialize",
        "params": {"protocolVersions": ["1.0.0"], "clientId": "fuzz"}});
    ws.send(Message::text(init.to_string()))
        .await
        .expect("sends");
    loop {
        if next_json(&mut ws).await["id"] == "init" {
            break;
        }
    }
    for (i, junk) in frames.iter().enumerate() {
        let id = i as u64 + 1;
        ws.send(message_of(junk, id)).await.expect("sends");
        let ping = format!("ping-{i}");
        ws.send(Message::text(
            json!({"jsonrpc": "2.0", "id": ping, "method": "ping"}).to_string(),
        ))
        .await
        .expect("sends");
        let mut errors = 0;
        let mut pinged = false;
        while !(pinged && errors >= 1) {
            let v = next_json(&mut ws).await;
            if v["id"] == ping.as_str() {
                assert_eq!(v["result"], Value::Null, "{v}");
                pinged = true;
            } else if v.get("error").is_some() {
                let code = v["error"]["code"].as_i64().expect("a numeric code");
                assert!(
                    v["error"]["message"]
                        .as_str()
                        .is_some_and(|m| !m.is_empty()),
                    "{v}"
                );
                assert!((-32768..=-32000).contains(&code), "{v}");
                assert!(
                    v["id"].is_null() || v["id"] == json!(id),
                    "{junk:?} got {v}"
                );
                errors += 1;
            } else {
                assert!(
                    v.get("id").is_none(),
                    "{junk:?} answered without an error: {v}"
                );
            }
        }
        assert_eq!(errors, 1, "{junk:?}");
    }
    ws.close(None).await.ok();
}

#[test]
fn any_junk_frame_gets_one_error_and_the_connection_stays() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (url, _server, _host) = rt.block_on(async {
        let host = HostBuilder::new()
            .agent(Arc::new(ScriptedAgent::new()))
            .build()
            .expect("host builds");
        let server = host.serve_ws(WsConfig::loopback(0)).await.expect("listens");
        (format!("ws://{}", server.local_addr()), server, host)
    });
    let mut runner = TestRunner::new(Config {
        cases: 48,
        ..Config::default()
    });
    runner
        .run(&prop::collection::vec(junk(), 1..12), |frames| {
            rt.block_on(feed(&url, &frames));
            Ok(())
        })
        .expect("every sequence is answered");
}

async fn close_code_after(url: &str, size: usize) -> Option<CloseCode> {
    let (mut ws, _) = tokio_tungstenite::connect_async(url)
        .await
        .expect("connects");
    ws.send(Message::text(format!("{{\"x\":\"{}\"}}", "y".repeat(size))))
        .await
        .expect("sends");
    loop {
        match tokio::time::timeout(PATIENCE, ws.next())
            .await
            .expect("the host answers")
        {
            Some(Ok(Message::Close(frame))) => return frame.map(|f| f.code),
            Some(Ok(_)) => continue,
            Some(Err(e)) => panic!("the connection failed before its close frame: {e}"),
            None => return None,
        }
    }
}

#[tokio::test]
async fn a_message_over_the_limit_closes_with_1009_however_large() {
    let host = HostBuilder::new()
        .max_frame_bytes(1024)
        .build()
        .expect("host builds");
    let server = host.serve_ws(WsConfig::loopback(0)).await.expect("listens");
    let url = format!("ws://{}", server.local_addr());
    // Just over the limit, and over twice it (which the socket itself refuses).
    for size in [1100, 5000] {
        assert_eq!(
            close_code_after(&url, size).await,
            Some(CloseCode::Size),
            "{size} bytes"
        );
    }
}
