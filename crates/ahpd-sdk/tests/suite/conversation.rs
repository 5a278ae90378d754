//! Host cases 11.2 (docs/acceptance.md): a whole conversation through the official client over a real WebSocket, with the
//! client's reducer-built mirror compared to fresh host snapshots after every turn.

use ahp::SubscriptionEvent;
use ahp_types::actions::*;
use ahp_types::commands::SubscribeResult;
use ahp_types::state::*;
use serde_json::{Value, json};

use super::support::*;

struct Conv {
    th: TestHost,
    a: ahp::Client,
    b: ahp::Client,
    wa: Watch,
    session: String,
    chat: String,
    /// The session's working folder, removed when the test ends.
    _dir: tempfile::TempDir,
}

impl Conv {
    async fn new() -> Self {
        let th = start().await;
        let a = client(&th.url).await;
        let mut wa = Watch::new(&a);
        let _root = a.attach_subscription("ahp-root://").await;
        let init = a
            .initialize(
                "e2e".into(),
                vec!["1.0.0".into(), "0.9.0".into()],
                vec!["ahp-root://".into()],
            )
            .await
            .unwrap();
        assert_eq!(init.protocol_version, "1.0.0");
        assert_eq!(init.snapshots.len(), 1);
        wa.snapshot(&init.snapshots[0]);
        let resolved: Value = a
            .request("resolveSessionConfig", json!({"channel": "ahp-root://"}))
            .await
            .unwrap();
        assert_eq!(resolved["values"]["permissionMode"], "default");
        let dir = tempfile::tempdir().unwrap();
        let session = format!("mock:/{}", uuid_like());
        let created: Value = a
            .request("createSession", json!({"channel": session, "workingDirectories": [ahpd_sdk::util::file_uri(dir.path())]}))
            .await
            .unwrap();
        assert_eq!(created, Value::Null, "createSession answers null");
        let added = wa
            .notification(|n| matches!(n, SubscriptionEvent::SessionAdded(_)))
            .await;
        match added {
            SubscriptionEvent::SessionAdded(p) => assert_eq!(p.summary.resource, session),
            _ => unreachable!(),
        }
        let chat = ahpd_sdk::util::default_chat_uri(&session);
        for uri in [&session, &chat] {
            let (res, _sub): (SubscribeResult, _) = a.subscribe(uri.clone()).await.unwrap();
            let snap = res.snapshot.expect("state-bearing channel");
            wa.snapshot(&snap);
        }
        assert_eq!(
            wa.mirror.sessions[&session].default_chat.as_deref(),
            Some(chat.as_str())
        );
        let b = client(&th.url).await;
        b.initialize("other".into(), vec!["1.0.0".into()], vec![])
            .await
            .unwrap();
        Self {
            th,
            a,
            b,
            wa,
            session,
            chat,
            _dir: dir,
        }
    }

    async fn check(&mut self) {
        let (s, c) = (self.session.clone(), self.chat.clone());
        assert_mirror(&self.th, &mut self.wa, &[&s, &c, "ahp-root://"]).await;
    }

    async fn start_turn(&mut self, turn: &str, text: &str) -> i64 {
        let h = self
            .a
            .dispatch(self.chat.clone(), turn_started(turn, text))
            .await
            .unwrap();
        let env = self
            .wa
            .until(|e| matches!(&e.action, StateAction::ChatTurnStarted(a) if a.turn_id == turn))
            .await;
        let origin = env.origin.expect("the echo carries origin");
        assert_eq!(origin.client_id, "e2e");
        assert_eq!(origin.client_seq, h.client_seq);
        h.client_seq
    }

    async fn turn_end(&mut self, turn: &str) -> ActionEnvelope {
        self.wa
            .until(|e| match &e.action {
                StateAction::ChatTurnComplete(a) => a.turn_id == turn,
                StateAction::ChatError(a) => a.turn_id == turn,
                StateAction::ChatTurnCancelled(a) => a.turn_id == turn,
                _ => false,
            })
            .await
    }

    fn chat_state(&self) -> &ChatState {
        &self.wa.mirror.chats[&self.chat]
    }
}

fn uuid_like() -> String {
    format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(7)
    )
}

fn last_tool_call(chat: &ChatState) -> ToolCallState {
    chat.turns
        .last()
        .and_then(|t| {
            t.response_parts.iter().find_map(|p| match p {
                ResponsePart::ToolCall(tc) => Some(tc.tool_call.clone()),
                _ => None,
            })
        })
        .expect("the turn has a tool call")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_conversation_keeps_every_mirror_equal_to_the_host() {
    let mut c = Conv::new().await;

    // (a) plain reply in five chunks
    c.start_turn("t-a", "hello").await;
    c.turn_end("t-a").await;
    c.check().await;
    assert_eq!(c.chat_state().turns.len(), 1, "one turn after (a)");
    let turn = &c.chat_state().turns[0];
    assert_eq!(turn.state, TurnState::Complete);
    assert!(c.chat_state().active_turn.is_none());
    match &turn.response_parts[0] {
        ResponsePart::Markdown(m) => assert_eq!(m.content, "one two three four five"),
        other => panic!("expected markdown, got {other:?}"),
    }

    // (b) reasoning then reply; (c) a tool that runs without asking
    c.start_turn("t-b", "reason").await;
    c.turn_end("t-b").await;
    c.check().await;
    c.start_turn("t-c", "tool").await;
    c.turn_end("t-c").await;
    c.check().await;
    match last_tool_call(c.chat_state()) {
        ToolCallState::Completed(tc) => {
            assert_eq!(tc.confirmed, ToolCallConfirmationReason::NotNeeded)
        }
        other => panic!("expected a completed call, got {other:?}"),
    }

    // (d) a tool that asks, approved by a second client
    c.start_turn("t-d", "ask").await;
    let set =
        c.wa.until(|e| matches!(e.action, StateAction::SessionInputNeededSet(_)))
            .await;
    match &set.action {
        StateAction::SessionInputNeededSet(a) => match &a.request {
            SessionInputRequest::ToolConfirmation(r) => assert_eq!(r.id, "tool:call-t-d"),
            other => panic!("expected a tool confirmation, got {other:?}"),
        },
        _ => unreachable!(),
    }
    c.check().await;
    assert_eq!(
        c.chat_state().status & 24,
        24,
        "the chat shows input needed"
    );
    let confirm: StateAction = serde_json::from_value(json!({"type": "chat/toolCallConfirmed", "turnId": "t-d", "toolCallId": "call-t-d", "approved": true, "selectedOptionId": "allow-once"})).unwrap();
    c.b.dispatch(c.chat.clone(), confirm).await.unwrap();
    c.wa.until(|e| matches!(&e.action, StateAction::SessionInputNeededRemoved(a) if a.id == "tool:call-t-d")).await;
    c.turn_end("t-d").await;
    c.check().await;
    match last_tool_call(c.chat_state()) {
        ToolCallState::Completed(tc) => {
            assert_eq!(tc.confirmed, ToolCallConfirmationReason::UserAction)
        }
        other => panic!("expected a completed call, got {other:?}"),
    }

    // (e) a tool that asks, denied
    c.start_turn("t-e", "ask").await;
    c.wa.until(|e| matches!(e.action, StateAction::SessionInputNeededSet(_)))
        .await;
    let deny: StateAction = serde_json::from_value(json!({"type": "chat/toolCallConfirmed", "turnId": "t-e", "toolCallId": "call-t-e", "approved": false})).unwrap();
    c.a.dispatch(c.chat.clone(), deny).await.unwrap();
    c.turn_end("t-e").await;
    c.check().await;
    match last_tool_call(c.chat_state()) {
        ToolCallState::Cancelled(tc) => assert_eq!(tc.reason, ToolCallCancellationReason::Denied),
        other => panic!("expected a cancelled call, got {other:?}"),
    }

    // (f) a question answered with accept; (g) declined
    for (turn, response) in [("t-f", "accept"), ("t-g", "decline")] {
        c.start_turn(turn, "question").await;
        c.wa.until(|e| matches!(e.action, StateAction::ChatInputRequested(_)))
            .await;
        let mut done = json!({"type": "chat/inputCompleted", "requestId": format!("q-{turn}"), "response": response});
        if response == "accept" {
            done["answers"] =
                json!({"name": {"state": "submitted", "value": {"kind": "text", "value": "Ada"}}});
        }
        let done: StateAction = serde_json::from_value(done).unwrap();
        c.a.dispatch(c.chat.clone(), done).await.unwrap();
        c.turn_end(turn).await;
        c.check().await;
    }

    // (h) a resumable error, then resume, then success
    c.start_turn("t-h", "error").await;
    c.turn_end("t-h").await;
    c.check().await;
    let resume = StateAction::ChatTurnResume(ChatTurnResumeAction {
        turn_id: "t-h".into(),
    });
    c.a.dispatch(c.chat.clone(), resume).await.unwrap();
    c.wa.until(|e| matches!(e.action, StateAction::ChatTurnResume(_)))
        .await;
    c.turn_end("t-h").await;
    c.check().await;
    assert_eq!(
        c.chat_state().turns.last().map(|t| t.state),
        Some(TurnState::Complete)
    );

    // (i) a hang, cancelled with duration 0; a second cancel is refused
    c.start_turn("t-i", "hang").await;
    let cancel = StateAction::ChatTurnCancelled(ChatTurnCancelledAction {
        turn_id: "t-i".into(),
        duration: 0,
        meta: None,
    });
    c.a.dispatch(c.chat.clone(), cancel.clone()).await.unwrap();
    let echo = c.turn_end("t-i").await;
    match &echo.action {
        StateAction::ChatTurnCancelled(a) => {
            assert!(a.duration > 0, "the host computed a real duration")
        }
        _ => unreachable!(),
    }
    c.a.dispatch(c.chat.clone(), cancel).await.unwrap();
    let rejected = c.wa.until(|e| e.rejection_reason.is_some()).await;
    assert!(matches!(rejected.action, StateAction::ChatTurnCancelled(_)));
    c.check().await;

    // (j) a queued message dispatched while a turn runs starts only after it completes
    c.start_turn("t-j", "ask").await;
    c.wa.until(|e| matches!(e.action, StateAction::SessionInputNeededSet(_)))
        .await;
    let queued: StateAction = serde_json::from_value(json!({"type": "chat/pendingMessageSet", "kind": "queued", "id": "q1", "message": {"text": "later", "origin": {"kind": "user"}}})).unwrap();
    c.a.dispatch(c.chat.clone(), queued).await.unwrap();
    c.wa.until(|e| matches!(e.action, StateAction::ChatPendingMessageSet(_)))
        .await;
    assert!(
        c.chat_state()
            .active_turn
            .as_ref()
            .is_some_and(|t| t.id == "t-j")
    );
    let ok: StateAction = serde_json::from_value(json!({"type": "chat/toolCallConfirmed", "turnId": "t-j", "toolCallId": "call-t-j", "approved": true})).unwrap();
    c.a.dispatch(c.chat.clone(), ok).await.unwrap();
    c.turn_end("t-j").await;
    let next =
        c.wa.until(|e| matches!(e.action, StateAction::ChatTurnStarted(_)))
            .await;
    let next_id = match &next.action {
        StateAction::ChatTurnStarted(a) => {
            assert_eq!(a.queued_message_id.as_deref(), Some("q1"));
            a.turn_id.clone()
        }
        _ => unreachable!(),
    };
    c.turn_end(&next_id).await;
    c.check().await;
    assert!(c.chat_state().queued_messages.is_none());

    // host cases 11.2 (docs/acceptance.md) 14: duplicate URI and unknown provider
    let dup =
        c.a.request::<_, Value>("createSession", json!({"channel": c.session}))
            .await
            .unwrap_err();
    assert!(matches!(dup, ahp::ClientError::Rpc(e) if e.code == -32003));
    let nope =
        c.a.request::<_, Value>(
            "createSession",
            json!({"channel": "mock:/x2", "provider": "nope"}),
        )
        .await
        .unwrap_err();
    assert!(matches!(nope, ahp::ClientError::Rpc(e) if e.code == -32002));

    // host cases 11.3 (docs/acceptance.md) 21: dispose
    let disposed: Value =
        c.a.request("disposeSession", json!({"channel": c.session}))
            .await
            .unwrap();
    assert_eq!(disposed, Value::Null);
    c.wa.notification(|n| matches!(n, SubscriptionEvent::SessionRemoved(_)))
        .await;
    let listed: Value = c.a.request("listSessions", json!({})).await.unwrap();
    assert!(
        !listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|row| row["resource"] == c.session.as_str()),
        "the disposed session's row is gone: {listed}"
    );
    let gone =
        c.b.subscribe(c.session.clone())
            .await
            .err()
            .expect("refused");
    assert!(matches!(gone, ahp::ClientError::Rpc(e) if e.code == -32001));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_changes_are_checked_and_vs_code_keys_are_mapped() {
    let mut c = Conv::new().await;
    let mut wb = Watch::new(&c.b);
    let (r, _) = c.b.subscribe(c.session.clone()).await.unwrap();
    wb.snapshot(&r.snapshot.unwrap());
    let change = |v: Value| -> StateAction {
        serde_json::from_value(json!({"type": "session/configChanged", "config": v})).unwrap()
    };
    c.a.dispatch(c.session.clone(), change(json!({"permissionMode": "plan"})))
        .await
        .unwrap();
    c.wa.until(|e| matches!(e.action, StateAction::SessionConfigChanged(_)))
        .await;
    assert_eq!(
        c.wa.mirror.sessions[&c.session]
            .config
            .as_ref()
            .unwrap()
            .values["permissionMode"],
        "plan"
    );
    // not session-mutable, and a value the agent refuses
    for bad in [
        json!({"model": "x"}),
        json!({"permissionMode": "chaos"}),
        json!({"mode": "worktree"}),
    ] {
        c.a.dispatch(c.session.clone(), change(bad)).await.unwrap();
        c.wa.until(|e| e.rejection_reason.is_some()).await;
    }
    // The other subscriber saw the accepted change and none of the refusals.
    wb.sync().await;
    assert_eq!(wb.envelopes.len(), 1, "{:?}", wb.envelopes);
    assert!(wb.envelopes[0].rejection_reason.is_none());
    let (s, b_session) = (c.session.clone(), wb.mirror.sessions[&c.session].clone());
    assert_eq!(
        Some(&b_session),
        c.wa.mirror.sessions.get(&s),
        "state unchanged"
    );
    assert_eq!(
        c.wa.mirror.sessions[&c.session]
            .config
            .as_ref()
            .unwrap()
            .values["permissionMode"],
        "plan"
    );
    c.a.dispatch(
        c.session.clone(),
        change(json!({"autoApprove": "autoApprove"})),
    )
    .await
    .unwrap();
    c.wa.until(|e| matches!(&e.action, StateAction::SessionConfigChanged(a) if a.config.get("permissionMode") == Some(&json!("bypassPermissions")) && e.origin.is_none())).await;
    c.a.dispatch(c.session.clone(), change(json!({"autoApprove": "default"})))
        .await
        .unwrap();
    c.wa.until(|e| matches!(&e.action, StateAction::SessionConfigChanged(a) if a.config.get("permissionMode") == Some(&json!("plan")) && e.origin.is_none())).await;
    c.check().await;
}
