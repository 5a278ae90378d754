//! §11.6: the rules that fail silently, each driven into the failure.

use std::path::Path;
use std::sync::Arc;

use ahp_types::actions::*;
use ahp_types::common::{JsonObject, StringOrMarkdown};
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
    fn config_schema(&self, _: Option<&Path>) -> SessionConfigSchema {
        SessionConfigSchema {
            r#type: "object".into(),
            properties: Default::default(),
            required: None,
        }
    }
    fn config_defaults(&self, _: Option<&Path>) -> JsonObject {
        JsonObject::new()
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
        // rule 7: a delta for a part that does not exist
        ctx.emit(StateAction::ChatDelta(ChatDeltaAction {
            turn_id: t.clone(),
            part_id: "ghost".into(),
            content: "lost".into(),
            meta: None,
        }));
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
    let th = start_with(ScriptedAgent::new(), |b| b.agent(Arc::new(Misbehaving))).await;
    let a = client(&th.url).await;
    let mut w = Watch::new(&a);
    a.initialize("r".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let session = "bad:/one".to_owned();
    let _: Value = a
        .request(
            "createSession",
            json!({"channel": session, "provider": "bad"}),
        )
        .await
        .unwrap();
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    for uri in [&session, &chat] {
        let (r, _) = a.subscribe(uri.clone()).await.unwrap();
        w.snapshot(&r.snapshot.unwrap());
    }
    (th, a, w, session, chat)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_06_07_09_11_12_backend_mistakes_are_dropped_or_fixed() {
    let (th, a, mut w, session, chat) = bad_host().await;
    a.dispatch(chat.clone(), turn_started("t", "go"))
        .await
        .unwrap();
    w.until(|e| matches!(e.action, StateAction::ChatTurnComplete(_)))
        .await;
    assert_mirror(&th, &mut w, &[&session, &chat]).await;
    let on_chat: Vec<&ActionEnvelope> = w.envelopes.iter().filter(|e| e.channel == chat).collect();
    assert_eq!(
        on_chat
            .iter()
            .filter(|e| matches!(e.action, StateAction::ChatTurnStarted(_)))
            .count(),
        1,
        "rule 6"
    );
    assert!(
        !on_chat
            .iter()
            .any(|e| matches!(&e.action, StateAction::ChatDelta(d) if d.part_id == "ghost")),
        "rule 7"
    );
    assert_eq!(
        on_chat
            .iter()
            .filter(|e| matches!(e.action, StateAction::ChatTurnComplete(_)))
            .count(),
        1,
        "rule 9"
    );
    assert!(
        !on_chat.iter().any(|e| matches!(
            e.action,
            StateAction::ChatResponsePart(ChatResponsePartAction {
                part: ResponsePart::Error(_),
                ..
            })
        )),
        "rule 11"
    );
    let ready = on_chat.iter().find_map(|e| match &e.action {
        StateAction::ChatToolCallReady(r) => Some(r.confirmed.clone()),
        _ => None,
    });
    assert_eq!(
        ready,
        Some(Some(ToolCallConfirmationReason::NotNeeded)),
        "rule 12"
    );
    let turn = &w.mirror.chats[&chat].turns[0];
    assert!(matches!(&turn.response_parts[0], ResponsePart::Markdown(m) if m.content == "kept"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_01_03_19_result_shapes_origin_and_default_chat() {
    let th = start().await;
    let mut raw = Raw::connect(&th.url).await;
    raw.init("raw").await;
    let created = raw.call(r#"{"jsonrpc":"2.0","id":2,"method":"createSession","params":{"channel":"mock:/Shapes"}}"#).await;
    assert!(
        created.as_object().unwrap().contains_key("result") && created["result"].is_null(),
        "rule 1: {created}"
    );
    let chat = ahpd_sdk::util::default_chat_uri("mock:/Shapes");
    let sub = raw.call(&json!({"jsonrpc":"2.0","id":3,"method":"subscribe","params":{"channel":"mock:/Shapes"}}).to_string()).await;
    assert_eq!(
        sub["result"]["snapshot"]["state"]["defaultChat"], chat,
        "rule 19"
    );
    assert_eq!(sub["result"]["snapshot"]["resource"], "mock:/Shapes");
    let fetched = raw
        .call(
            &json!({"jsonrpc":"2.0","id":4,"method":"fetchTurns","params":{"channel": chat}})
                .to_string(),
        )
        .await;
    assert_eq!(fetched["result"], json!({}), "rule 1");
    raw.send(&json!({"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"mock:/Shapes","clientSeq":1,"action":{"type":"session/titleChanged","title":"Mine"}}}).to_string()).await;
    let echo = raw.recv().await.unwrap();
    assert_eq!(echo["params"]["origin"]["clientSeq"], 1);
    // A host action carries no origin key at all (rule 3): closing the session publishes one.
    let text = echo.to_string();
    assert!(text.contains("\"origin\""));
    let disposed = raw.call(r#"{"jsonrpc":"2.0","id":5,"method":"disposeSession","params":{"channel":"mock:/Shapes"}}"#).await;
    assert!(disposed["result"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_20_21_26_unknown_channels_rejections_and_no_change_dispatches() {
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
    let session = "mock:/rules".to_owned();
    let _: Value = a
        .request("createSession", json!({"channel": session}))
        .await
        .unwrap();
    for (c, w) in [(&a, &mut wa), (&b, &mut wb)] {
        let (r, _) = c.subscribe(session.clone()).await.unwrap();
        w.snapshot(&r.snapshot.unwrap());
    }
    // rule 20: silence for an unknown channel
    a.dispatch("ahp-chat:/unknown".into(), turn_started("x", "hi"))
        .await
        .unwrap();
    // rule 26: an identical activeClientSet is echoed once
    let set: StateAction = serde_json::from_value(
        json!({"type": "session/activeClientSet", "activeClient": {"clientId": "a", "tools": []}}),
    )
    .unwrap();
    a.dispatch(session.clone(), set.clone()).await.unwrap();
    a.dispatch(session.clone(), set).await.unwrap();
    wa.until(|e| matches!(e.action, StateAction::SessionActiveClientSet(_)))
        .await;
    // rule 21: a rejection goes to the dispatcher only and leaves serverSeq alone
    let before = th.host.handle().server_seq();
    let other: StateAction = serde_json::from_value(
        json!({"type": "session/activeClientSet", "activeClient": {"clientId": "b", "tools": []}}),
    )
    .unwrap();
    a.dispatch(session.clone(), other).await.unwrap();
    let rej = wa.until(|e| e.rejection_reason.is_some()).await;
    assert_eq!(rej.server_seq, before);
    assert_eq!(th.host.handle().server_seq(), before);
    let echoes = wa
        .envelopes
        .iter()
        .filter(|e| {
            matches!(e.action, StateAction::SessionActiveClientSet(_))
                && e.rejection_reason.is_none()
        })
        .count();
    assert_eq!(echoes, 1, "rule 26");
    // b saw the one echo and no rejection.
    let seen = wb
        .until(|e| matches!(e.action, StateAction::SessionActiveClientSet(_)))
        .await;
    assert!(seen.rejection_reason.is_none());
    b.dispatch(session.clone(), turn_started("nope", "x"))
        .await
        .unwrap();
    let own = wb.until(|e| e.rejection_reason.is_some()).await;
    assert!(
        matches!(own.action, StateAction::ChatTurnStarted(_)),
        "a chat action on a session channel is refused"
    );
    assert!(
        wb.envelopes
            .iter()
            .filter(|e| e.rejection_reason.is_some())
            .count()
            == 1
    );
    assert_mirror(&th, &mut wa, &[&session]).await;
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
