//! Host cases 11.6 (docs/acceptance.md): the rules that fail silently, each driven into the failure.

use std::sync::Arc;

use ahp_types::actions::*;
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::*;
use ahpd_sdk::agent::*;
use ahpd_sdk::testing::ScriptedAgent;
use async_trait::async_trait;
use serde_json::{Value, json};

use super::support::*;

/// A backend that breaks every rule a backend can break, in one turn.
struct Misbehaving;

struct MisbehavingSession(SessionContext);

#[async_trait]
impl Agent for Misbehaving {
    fn descriptor(&self) -> AgentDescriptor {
        AgentDescriptor::new("bad", "Bad")
    }
    async fn create(&self, start: SessionStart) -> Result<Box<dyn Session>, AgentError> {
        Ok(Box::new(MisbehavingSession(start.ctx)))
    }
}

#[async_trait]
impl Session for MisbehavingSession {
    fn backend_id(&self) -> String {
        "bad".into()
    }
    fn begin(&mut self, turn: TurnRequest) {
        let t = turn.turn_id.clone();
        let ctx = &self.0;
        let md = |id: &str| {
            StateAction::ChatResponsePart(ChatResponsePartAction {
                turn_id: t.clone(),
                part: ResponsePart::Markdown(MarkdownResponsePart {
                    id: id.into(),
                    content: String::new(),
                }),
                meta: None,
            })
        };
        ctx.emit(md("m"));
        ctx.emit(StateAction::ChatDelta(ChatDeltaAction {
            turn_id: t.clone(),
            part_id: "m".into(),
            content: "kept".into(),
            meta: None,
        }));
        // rule 6: saying the running turn again would wipe the parts
        ctx.emit(StateAction::ChatTurnStarted(ChatTurnStartedAction {
            turn_id: t.clone(),
            started_at: ahpd_sdk::util::now_iso(),
            message: turn.message.clone(),
            queued_message_id: None,
            meta: None,
        }));
        // rule 7: deltas for parts that do not exist, three into one and one into another
        for part in ["ghost", "ghost", "ghost", "ghost2"] {
            ctx.emit(StateAction::ChatDelta(ChatDeltaAction {
                turn_id: t.clone(),
                part_id: part.into(),
                content: "lost".into(),
                meta: None,
            }));
        }
        // rule 11: a tool-call part sent as a response part
        ctx.emit(StateAction::ChatResponsePart(ChatResponsePartAction {
            turn_id: t.clone(),
            part: ResponsePart::Error(ErrorResponsePart {
                error: ErrorInfo {
                    error_type: "x".into(),
                    message: "y".into(),
                    stack: None,
                    meta: None,
                },
                resumable: None,
            }),
            meta: None,
        }));
        // rule 12: ready without confirmed
        ctx.emit(StateAction::ChatToolCallStart(ChatToolCallStartAction {
            turn_id: t.clone(),
            tool_call_id: "c1".into(),
            meta: None,
            tool_name: "ls".into(),
            display_name: "List".into(),
            intention: None,
            contributor: None,
        }));
        ctx.emit(StateAction::ChatToolCallReady(ChatToolCallReadyAction {
            turn_id: t.clone(),
            tool_call_id: "c1".into(),
            meta: None,
            contributor: None,
            intention: None,
            invocation_message: StringOrMarkdown::Plain("ls".into()),
            tool_input: None,
            confirmation_title: None,
            risk_assessment: None,
            edits: None,
            editable: None,
            confirmed: None,
            options: None,
        }));
        // host-only actions are dropped
        ctx.emit(StateAction::SessionInputNeededRemoved(
            SessionInputNeededRemovedAction { id: "x".into() },
        ));
        // rule 9: two ending actions
        ctx.emit(StateAction::ChatTurnComplete(ChatTurnCompleteAction {
            turn_id: t.clone(),
            duration: 1,
            meta: None,
        }));
        ctx.emit(StateAction::ChatTurnComplete(ChatTurnCompleteAction {
            turn_id: t,
            duration: 2,
            meta: None,
        }));
    }
    fn cancel(&mut self, _: &str) {}
    async fn close(&mut self) {}
}

async fn bad_host() -> (TestHost, ahp::Client, Watch, String, String) {
    capture_warnings();
    let th = start_with(ScriptedAgent::new(), |b| b.agent(Arc::new(Misbehaving))).await;
    // A session of its own per test, so the warnings recorded for its chat are this test's.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let session = format!("bad:/one-{n}");
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    let create = json!({"channel": session, "provider": "bad"});
    let a = client(&th.url).await;
    let w = open_session_with(&a, "r", create, &[&session, &chat]).await;
    (th, a, w, session, chat)
}

/// One turn of the misbehaving backend, finished, with the mirror checked against the host.
async fn misbehaving_turn() -> (Watch, String) {
    let (th, a, mut w, session, chat) = bad_host().await;
    a.dispatch(chat.clone(), turn_started("t", "go"))
        .await
        .unwrap();
    w.until(|e| matches!(e.action, StateAction::ChatTurnComplete(_)))
        .await;
    assert_mirror(&th, &mut w, &[&session, &chat]).await;
    (w, chat)
}

fn on(w: &Watch, chat: &str) -> Vec<ActionEnvelope> {
    w.envelopes
        .iter()
        .filter(|e| e.channel == chat)
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_06_the_turn_is_said_back_once() {
    let (w, chat) = misbehaving_turn().await;
    let started = on(&w, &chat)
        .into_iter()
        .filter(|e| matches!(e.action, StateAction::ChatTurnStarted(_)))
        .count();
    assert_eq!(started, 1, "the backend's repeat is dropped");
    assert!(
        warned(&chat, "said the running turn again"),
        "the drop is logged as a warning"
    );
    let turn = &w.mirror.chats[&chat].turns[0];
    assert!(
        matches!(&turn.response_parts[0], ResponsePart::Markdown(m) if m.content == "kept"),
        "the streamed part survived"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_07_a_delta_needs_its_part() {
    let (w, chat) = misbehaving_turn().await;
    let deltas: Vec<String> = on(&w, &chat)
        .into_iter()
        .filter_map(|e| match e.action {
            StateAction::ChatDelta(d) => Some(d.part_id),
            _ => None,
        })
        .collect();
    assert_eq!(
        deltas,
        ["m"],
        "the delta for a missing part is not published"
    );
    assert_eq!(
        warnings(&chat, "matched no part"),
        2,
        "a dropped delta is logged as a warning once per missing part, not once per delta"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_09_one_ending_action_per_turn() {
    let (w, chat) = misbehaving_turn().await;
    let endings = on(&w, &chat)
        .into_iter()
        .filter(|e| {
            matches!(
                e.action,
                StateAction::ChatTurnComplete(_)
                    | StateAction::ChatError(_)
                    | StateAction::ChatTurnCancelled(_)
            )
        })
        .count();
    assert_eq!(endings, 1);
    assert_eq!(
        w.mirror.chats[&chat].turns[0].duration,
        Some(1),
        "the first one won"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_11_tool_input_and_error_parts_come_only_from_their_actions() {
    let (w, chat) = misbehaving_turn().await;
    assert!(!on(&w, &chat).iter().any(|e| matches!(
        &e.action,
        StateAction::ChatResponsePart(ChatResponsePartAction {
            part: ResponsePart::Error(_)
                | ResponsePart::ToolCall(_)
                | ResponsePart::InputRequest(_),
            ..
        })
    )));
    let parts = &w.mirror.chats[&chat].turns[0].response_parts;
    assert!(!parts.iter().any(|p| matches!(p, ResponsePart::Error(_))));
    assert_eq!(
        parts
            .iter()
            .filter(|p| matches!(p, ResponsePart::ToolCall(_)))
            .count(),
        1,
        "the tool call's part came from chat/toolCallStart"
    );
    assert!(
        warned(&chat, "only the host may publish"),
        "the dropped part is logged as a warning"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_12_a_call_that_does_not_ask_says_not_needed() {
    let (w, chat) = misbehaving_turn().await;
    let ready = on(&w, &chat).into_iter().find_map(|e| match e.action {
        StateAction::ChatToolCallReady(r) => Some(r.confirmed),
        _ => None,
    });
    assert_eq!(ready, Some(Some(ToolCallConfirmationReason::NotNeeded)));
    assert!(
        warned(&chat, "without saying whether it was confirmed"),
        "the fix is logged as a warning"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_01_results_have_the_right_shape() {
    let th = start().await;
    let mut raw = Raw::connect(&th.url).await;
    let pong = raw
        .call(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .await;
    assert!(pong.as_object().unwrap().contains_key("result") && pong["result"].is_null());
    raw.init("raw").await;
    let null_results = [
        json!({"method": "createSession", "params": {"channel": "mock:/Shapes"}}),
        json!({"method": "createChat", "params": {"channel": "mock:/Shapes", "chat": "ahp-chat:/c2"}}),
        json!({"method": "disposeChat", "params": {"channel": "ahp-chat:/c2"}}),
    ];
    for (i, mut req) in null_results.into_iter().enumerate() {
        req["jsonrpc"] = json!("2.0");
        req["id"] = json!(10 + i);
        let r = raw.call(&req.to_string()).await;
        assert!(
            r.as_object().unwrap().contains_key("result") && r["result"].is_null(),
            "{req}: {r}"
        );
    }
    let chat = ahpd_sdk::util::default_chat_uri("mock:/Shapes");
    let fetched = raw
        .call(
            &json!({"jsonrpc":"2.0","id":4,"method":"fetchTurns","params":{"channel": chat}})
                .to_string(),
        )
        .await;
    assert_eq!(fetched["result"], json!({}), "an empty struct is {{}}");
    let disposed = raw.call(r#"{"jsonrpc":"2.0","id":5,"method":"disposeSession","params":{"channel":"mock:/Shapes"}}"#).await;
    assert!(disposed.as_object().unwrap().contains_key("result") && disposed["result"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_03_host_actions_omit_origin() {
    let th = start().await;
    let mut raw = Raw::connect(&th.url).await;
    raw.init("raw").await;
    raw.call(r#"{"jsonrpc":"2.0","id":2,"method":"createSession","params":{"channel":"mock:/o"}}"#)
        .await;
    let chat = ahpd_sdk::util::default_chat_uri("mock:/o");
    raw.call(
        &json!({"jsonrpc":"2.0","id":3,"method":"subscribe","params":{"channel": chat}})
            .to_string(),
    )
    .await;
    raw.send(
        &json!({"jsonrpc":"2.0","method":"dispatchAction","params":{"channel": chat,"clientSeq":7,
        "action":{"type":"chat/turnStarted","turnId":"t","message":{"text":"tool"}}}})
        .to_string(),
    )
    .await;
    let mut host_actions = 0;
    loop {
        let f = raw.recv().await.unwrap();
        if f["method"] != "action" {
            continue;
        }
        let params = f["params"].as_object().unwrap();
        if f["params"]["action"]["type"] == "chat/turnStarted" {
            assert_eq!(
                f["params"]["origin"],
                json!({"clientId": "raw", "clientSeq": 7})
            );
        } else {
            assert!(
                !params.contains_key("origin"),
                "origin on a host action: {f}"
            );
            host_actions += 1;
        }
        if f["params"]["action"]["type"] == "chat/turnComplete" {
            break;
        }
    }
    assert!(host_actions >= 4, "{host_actions}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_19_the_default_chat_uri_is_computed_from_the_spelling() {
    let th = start().await;
    let mut raw = Raw::connect(&th.url).await;
    raw.init("raw").await;
    // A spelling with characters base64url must not pad or alter.
    let session = "mock:/Mixed-Case_ünï?x=1";
    let expected = format!(
        "ahp-chat://default/{}",
        base64_url_no_pad(session.as_bytes())
    );
    assert_eq!(ahpd_sdk::util::default_chat_uri(session), expected);
    let created = raw
        .call(
            &json!({"jsonrpc":"2.0","id":2,"method":"createSession","params":{"channel": session}})
                .to_string(),
        )
        .await;
    assert!(created["result"].is_null(), "{created}");
    let sub = raw
        .call(
            &json!({"jsonrpc":"2.0","id":3,"method":"subscribe","params":{"channel": session}})
                .to_string(),
        )
        .await;
    let state = &sub["result"]["snapshot"]["state"];
    assert_eq!(state["defaultChat"], expected);
    assert_eq!(state["chats"][0]["resource"], expected);
    let chat = raw
        .call(
            &json!({"jsonrpc":"2.0","id":4,"method":"subscribe","params":{"channel": expected}})
                .to_string(),
        )
        .await;
    assert_eq!(chat["result"]["snapshot"]["state"]["resource"], expected);
    let listed = raw
        .call(r#"{"jsonrpc":"2.0","id":5,"method":"listSessions","params":{}}"#)
        .await;
    assert_eq!(listed["result"]["items"][0]["resource"], session);
    assert_eq!(listed["result"]["items"][0]["defaultChat"], expected);
}

/// Unpadded base64url, written out here so the test does not share the host's encoder.
fn base64_url_no_pad(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

async fn two_clients_on(session: &str) -> (TestHost, ahp::Client, Watch, ahp::Client, Watch) {
    let th = start().await;
    let a = client(&th.url).await;
    let b = client(&th.url).await;
    let mut wa = Watch::new(&a);
    let mut wb = Watch::new(&b);
    a.initialize("a".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    b.initialize("b".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let _: Value = a
        .request("createSession", json!({"channel": session}))
        .await
        .unwrap();
    for (c, w) in [(&a, &mut wa), (&b, &mut wb)] {
        let (r, _) = c.subscribe(session.to_owned()).await.unwrap();
        w.snapshot(&r.snapshot.unwrap());
    }
    (th, a, wa, b, wb)
}

fn active_client(id: &str) -> StateAction {
    serde_json::from_value(
        json!({"type": "session/activeClientSet", "activeClient": {"clientId": id, "tools": []}}),
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_20_an_unknown_channel_in_dispatch_is_silence() {
    let (th, a, mut wa, _b, _wb) = two_clients_on("mock:/r20").await;
    let seq = th.host.handle().server_seq();
    a.dispatch("ahp-chat:/unknown".into(), turn_started("x", "hi"))
        .await
        .unwrap();
    a.dispatch("mock:/nowhere".into(), active_client("a"))
        .await
        .unwrap();
    wa.sync().await;
    assert!(wa.envelopes.is_empty(), "{:?}", wa.envelopes);
    assert!(wa.notifications.is_empty());
    assert_eq!(th.host.handle().server_seq(), seq);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_21_rejections_go_only_to_the_dispatcher() {
    let session = "mock:/r21";
    let (th, a, mut wa, _b, mut wb) = two_clients_on(session).await;
    let before = th.host.handle().server_seq();
    a.dispatch(session.into(), active_client("b"))
        .await
        .unwrap();
    let rej = wa.until(|e| e.rejection_reason.is_some()).await;
    assert_eq!(rej.server_seq, before, "the counter is not advanced");
    assert_eq!(th.host.handle().server_seq(), before);
    // b sees the next real change and nothing before it.
    a.dispatch(session.into(), active_client("a"))
        .await
        .unwrap();
    let first = wb.next().await;
    assert!(first.rejection_reason.is_none());
    assert!(matches!(
        first.action,
        StateAction::SessionActiveClientSet(_)
    ));
    // The real change took the next number: the rejection used none.
    assert_eq!(th.host.handle().server_seq(), before + 1);
    assert_mirror(&th, &mut wa, &[session]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_26_a_no_change_dispatch_is_not_echoed() {
    let session = "mock:/r26";
    let (th, a, mut wa, _b, mut wb) = two_clients_on(session).await;
    a.dispatch(session.into(), active_client("a"))
        .await
        .unwrap();
    a.dispatch(session.into(), active_client("a"))
        .await
        .unwrap();
    // The session handles dispatches in order: once this third one is echoed, the repeat
    // before it has been handled too.
    let title: StateAction =
        serde_json::from_value(json!({"type": "session/titleChanged", "title": "Barrier"}))
            .unwrap();
    a.dispatch(session.into(), title).await.unwrap();
    for w in [&mut wa, &mut wb] {
        w.until(|e| matches!(e.action, StateAction::SessionTitleChanged(_)))
            .await;
    }
    for w in [&wa, &wb] {
        let echoes = w
            .envelopes
            .iter()
            .filter(|e| matches!(e.action, StateAction::SessionActiveClientSet(_)))
            .count();
        assert_eq!(echoes, 1, "one echo, silence for the repeat");
        let seqs: Vec<u64> = w.envelopes.iter().map(|e| e.server_seq).collect();
        assert_eq!(seqs.len(), 2, "{:?}", w.envelopes);
        assert_eq!(seqs[1], seqs[0] + 1, "no number for the repeat");
    }
    assert_mirror(&th, &mut wa, &[session]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_10_a_client_cancel_without_duration_gets_one() {
    let th = start().await;
    let mut raw = Raw::connect(&th.url).await;
    raw.init("raw").await;
    raw.call(r#"{"jsonrpc":"2.0","id":2,"method":"createSession","params":{"channel":"mock:/c"}}"#)
        .await;
    let chat = ahpd_sdk::util::default_chat_uri("mock:/c");
    raw.call(
        &json!({"jsonrpc":"2.0","id":3,"method":"subscribe","params":{"channel": chat}})
            .to_string(),
    )
    .await;
    // rule 4/5: an incomplete turnStarted (no startedAt, no origin) is completed by the host
    raw.send(&json!({"jsonrpc":"2.0","method":"dispatchAction","params":{"channel": chat,"clientSeq":1,"action":{"type":"chat/turnStarted","turnId":"h","message":{"text":"hang"}}}}).to_string()).await;
    let started = raw.recv().await.unwrap();
    assert!(ahpd_sdk::util::is_rfc3339(
        started["params"]["action"]["startedAt"].as_str().unwrap()
    ));
    raw.send(&json!({"jsonrpc":"2.0","method":"dispatchAction","params":{"channel": chat,"clientSeq":2,"action":{"type":"chat/turnCancelled","turnId":"h"}}}).to_string()).await;
    let cancelled = raw.recv().await.unwrap();
    assert_eq!(cancelled["params"]["action"]["type"], "chat/turnCancelled");
    assert!(cancelled["params"]["action"]["duration"].as_i64().unwrap() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_session_reports_progress_to_its_creator_before_the_reply() {
    let th = start().await;
    let mut raw = Raw::connect(&th.url).await;
    raw.init("raw").await;
    raw.send(r#"{"jsonrpc":"2.0","id":2,"method":"createSession","params":{"channel":"mock:/prog","progressToken":"p1"}}"#).await;
    let mut progress = Vec::new();
    loop {
        let v = raw.recv().await.unwrap();
        if v["method"] == "root/progress" {
            assert_eq!(v["params"]["channel"], "ahp-root://");
            assert_eq!(v["params"]["progressToken"], "p1");
            progress.push(v["params"]["progress"].as_i64().unwrap());
        } else if v["id"] == 2 {
            assert!(v["result"].is_null());
            break;
        }
    }
    assert_eq!(progress, vec![0, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disposing_a_past_session_deletes_it_from_the_catalogue() {
    let th = start_with(ScriptedAgent::new().with_history("gone", 2), |b| b).await;
    let a = client(&th.url).await;
    a.initialize("d".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let before: Value = a.request("listSessions", json!({})).await.unwrap();
    assert_eq!(before["items"][0]["resource"], "mock:/gone");
    let r: Value = a
        .request("disposeSession", json!({"channel": "mock:/gone"}))
        .await
        .unwrap();
    assert!(r.is_null());
    let after: Value = a.request("listSessions", json!({})).await.unwrap();
    assert!(after["items"].as_array().unwrap().is_empty());
    let missing = a
        .request::<_, Value>("disposeSession", json!({"channel": "mock:/gone"}))
        .await
        .unwrap_err();
    assert!(matches!(missing, ahp::ClientError::Rpc(e) if e.code == -32001));
}
