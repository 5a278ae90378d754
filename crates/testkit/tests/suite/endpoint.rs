//! The scripted endpoint, driven by a real HTTP client over loopback.
#![allow(clippy::unwrap_used)]

use futures::StreamExt;
use serde_json::json;
use testkit::{Endpoint, Frame, Gate, Reply, chunk, dialect};

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

#[tokio::test]
async fn streams_sse_and_records_the_request() {
    let ep = Endpoint::builder()
        .reply(Reply::stream([chunk::text("Hel"), chunk::text("lo")]))
        .start()
        .unwrap();
    let resp = client()
        .post(ep.chat_url())
        .bearer_auth("sk-test")
        .header("x-extra", "1")
        .json(&json!({ "model": "m", "stream": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let body = resp.text().await.unwrap();
    let expected = format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        chunk::text("Hel"),
        chunk::text("lo")
    );
    assert_eq!(body, expected);

    let reqs = ep.requests();
    assert_eq!(reqs.len(), 1);
    let r = &reqs[0];
    assert_eq!(r.method, "POST");
    assert_eq!(r.path, "/v1/chat/completions");
    assert!(r.is_chat());
    assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(r.header("X-Extra"), Some("1"));
    assert_eq!(r.json["model"], "m");
}

#[tokio::test]
async fn answers_in_script_order_then_falls_back() {
    let ep = Endpoint::builder()
        .reply(Reply::status(429, "slow down"))
        .reply(Reply::api_error(401, "bad key"))
        .reply(Reply::completion_text("hi"))
        .start()
        .unwrap();
    let c = client();
    let r1 = c.post(ep.chat_url()).send().await.unwrap();
    assert_eq!(r1.status(), 429);
    assert_eq!(r1.text().await.unwrap(), "slow down");
    let r2 = c.post(ep.chat_url()).send().await.unwrap();
    assert_eq!(r2.status(), 401);
    let v: serde_json::Value = r2.json().await.unwrap();
    assert_eq!(v["error"]["message"], "bad key");
    let r3: serde_json::Value = c
        .post(ep.chat_url())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r3["choices"][0]["message"]["content"], "hi");
    let r4 = c.post(ep.chat_url()).send().await.unwrap();
    assert_eq!(r4.status(), 500);
    assert!(r4.text().await.unwrap().contains("no reply left"));
    assert_eq!(ep.chat_requests().len(), 4);
}

#[tokio::test]
async fn responder_sees_the_request() {
    let ep = Endpoint::builder()
        .respond_with(|req| Reply::completion_text(req.json["model"].as_str().unwrap_or("?")))
        .start()
        .unwrap();
    let v: serde_json::Value = client()
        .post(ep.chat_url())
        .json(&json!({ "model": "echo-me" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "echo-me");
}

#[tokio::test]
async fn serves_models_and_404_elsewhere() {
    let ep = Endpoint::builder()
        .models(["a", "b/c"])
        .models_reply(Reply::status(503, "warming up"))
        .start()
        .unwrap();
    let c = client();
    let first = c
        .get(format!("{}/models", ep.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 503);
    let list: serde_json::Value = c
        .get(format!("{}/models", ep.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["data"][1]["id"], "b/c");
    let other = c
        .get(format!("{}/nothing", ep.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    assert_eq!(ep.request_count(), 3);
    assert!(ep.requests()[0].is_models());
}

#[tokio::test]
async fn gate_holds_a_stream_until_opened() {
    let gate = Gate::new();
    let ep = Endpoint::builder()
        .reply(Reply::stream([
            Frame::from(chunk::text("before")),
            Frame::Gate(gate.clone()),
            Frame::from(chunk::text("after")),
        ]))
        .start()
        .unwrap();
    let resp = client().post(ep.chat_url()).send().await.unwrap();
    let mut body = resp.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("before"));
    gate.reached().await;
    assert!(!gate.is_open());
    gate.open();
    let mut rest = Vec::new();
    while let Some(b) = body.next().await {
        rest.extend_from_slice(&b.unwrap());
    }
    let rest = String::from_utf8(rest).unwrap();
    assert!(rest.contains("after"));
    assert!(rest.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn held_reply_sends_nothing_before_the_gate() {
    let gate = Gate::new();
    let ep = Endpoint::builder()
        .reply(Reply::completion_text("late").held(&gate))
        .start()
        .unwrap();
    let url = ep.chat_url();
    let pending = tokio::spawn(async move { client().post(url).send().await.map(|r| r.status()) });
    gate.reached().await;
    assert!(!pending.is_finished());
    gate.open();
    assert_eq!(pending.await.unwrap().unwrap(), 200);
}

#[tokio::test]
async fn cut_breaks_the_body() {
    let ep = Endpoint::with_replies([Reply::stream_exact(dialect::cut_mid_tool_call())]).unwrap();
    let resp = client().post(ep.chat_url()).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut got = Vec::new();
    let mut failed = false;
    while let Some(b) = body.next().await {
        match b {
            Ok(b) => got.extend_from_slice(&b),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    assert!(
        failed,
        "a cut stream must end in an error, got {:?}",
        String::from_utf8_lossy(&got)
    );
    assert!(String::from_utf8_lossy(&got).contains("call_cut"));
}

#[tokio::test]
async fn hang_up_fails_the_send() {
    let ep = Endpoint::with_replies([Reply::HangUp, Reply::completion_text("ok")]).unwrap();
    let c = client();
    let err = c.post(ep.chat_url()).send().await.unwrap_err();
    assert!(!err.is_status());
    let ok = c.post(ep.chat_url()).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(ep.wait_for_requests(2).await.len(), 2);
}

#[tokio::test]
async fn raw_frames_are_written_verbatim() {
    let ep = Endpoint::with_replies([Reply::stream_exact([
        Frame::raw(": comment\r\n"),
        Frame::raw("data: {\"a\""),
        Frame::raw(":1}\r\n\r\n"),
        Frame::bytes(vec![b'd', b'a', b't', b'a', b':', 0xE2, 0x82]),
        Frame::bytes(vec![0xAC, b'\n', b'\n']),
    ])])
    .unwrap();
    let body = client()
        .post(ep.chat_url())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(
        &body[..],
        b": comment\r\ndata: {\"a\":1}\r\n\r\ndata:\xE2\x82\xAC\n\n"
    );
}

#[tokio::test]
async fn replies_pushed_after_start_are_used() {
    let ep = Endpoint::builder().start().unwrap();
    ep.push_reply(Reply::text_stream("pushed"));
    assert_eq!(ep.pending_replies(), 1);
    let body = client()
        .post(ep.chat_url())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(body.contains("pushed"));
    assert_eq!(ep.pending_replies(), 0);
}

#[test]
fn starts_from_sync_code() {
    let ep = Endpoint::builder().prefix("").start().unwrap();
    assert!(ep.base_url().starts_with("http://127.0.0.1:"));
    assert_eq!(
        ep.chat_url(),
        format!("http://{}/chat/completions", ep.addr())
    );
}
