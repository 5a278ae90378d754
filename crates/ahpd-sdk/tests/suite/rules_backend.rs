//! the host rules (docs/protocol.md) a backend can break or that hold through a turn's life: 5, 8, 13, 14, 15.

use std::sync::{Arc, Mutex};

use ahp_types::actions::*;
use ahp_types::state::*;
use ahpd_sdk::agent::*;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::puppet::*;
use super::support::*;

fn action(v: Value) -> StateAction {
    serde_json::from_value(v).expect("an action")
}

fn tool_call<'a>(turn: &'a Turn, id: &str) -> Vec<&'a ToolCallState> {
    turn.response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::ToolCall(tc) if call_id(&tc.tool_call) == id => Some(&tc.tool_call),
            _ => None,
        })
        .collect()
}

fn call_id(tc: &ToolCallState) -> &str {
    match tc {
        ToolCallState::Streaming(s) => &s.tool_call_id,
        ToolCallState::PendingConfirmation(s) => &s.tool_call_id,
        ToolCallState::Running(s) => &s.tool_call_id,
        ToolCallState::AuthRequired(s) => &s.tool_call_id,
        ToolCallState::PendingResultConfirmation(s) => &s.tool_call_id,
        ToolCallState::Completed(s) => &s.tool_call_id,
        ToolCallState::Cancelled(s) => &s.tool_call_id,
        ToolCallState::Unknown(_) => "",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_05_timestamps_are_rfc3339() {
    let p = Puppet::new(|turn: TurnRequest, ctx: SessionContext| async move {
        let t = turn.turn_id;
        ctx.emit(complete(&t));
        if turn.message.text == "own" {
            // A turn the backend starts itself, with a time that is not RFC 3339.
            ctx.emit(action(json!({"type": "chat/turnStarted", "turnId": "own-1",
                "startedAt": "yesterday at noon", "message": {"text": "reopened", "origin": {"kind": "user"}}})));
            ctx.emit(complete("own-1"));
        }
    });
    let (th, a, mut w, session, chat) = pup_host(p).await;
    // A client turn with a bad startedAt: the echo carries a real time, and the turn's ending
    // reduces (it would be Invalid with the bad time).
    let bad = action(json!({"type": "chat/turnStarted", "turnId": "c1",
        "startedAt": "2026-13-45", "message": {"text": "hi", "origin": {"kind": "user"}}}));
    a.dispatch(chat.clone(), bad).await.unwrap();
    let echo = w
        .until(|e| matches!(&e.action, StateAction::ChatTurnStarted(s) if s.turn_id == "c1"))
        .await;
    let StateAction::ChatTurnStarted(s) = &echo.action else {
        unreachable!()
    };
    assert!(
        ahpd_sdk::util::is_rfc3339(&s.started_at),
        "{}",
        s.started_at
    );
    w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(c) if c.turn_id == "c1"))
        .await;
    a.dispatch(chat.clone(), turn_started("c2", "own"))
        .await
        .unwrap();
    w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(c) if c.turn_id == "own-1"))
        .await;
    assert_mirror(&th, &mut w, &[&session, &chat]).await;
    let turns = &w.mirror.chats[&chat].turns;
    assert_eq!(
        turns.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
        ["c1", "c2", "own-1"]
    );
    for t in turns {
        assert_eq!(t.state, TurnState::Complete, "turn {} ended", t.id);
        assert!(ahpd_sdk::util::is_rfc3339(t.started_at.as_deref().unwrap()));
    }
    let listed: Value = a.request("listSessions", json!({})).await.unwrap();
    for row in listed["items"].as_array().unwrap() {
        for key in ["createdAt", "modifiedAt"] {
            assert!(
                ahpd_sdk::util::is_rfc3339(row[key].as_str().unwrap()),
                "{key}: {row}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_08_the_running_turn_is_only_active_turn() {
    let th = start().await;
    let chat = ahpd_sdk::util::default_chat_uri("mock:/r8");
    let a = client(&th.url).await;
    let mut w = open_session(&a, "r8", "mock:/r8", &[&chat]).await;
    a.dispatch(chat.clone(), turn_started("done", "hello"))
        .await
        .unwrap();
    w.until(|e| matches!(e.action, StateAction::ChatTurnComplete(_)))
        .await;
    a.dispatch(chat.clone(), turn_started("h", "hang"))
        .await
        .unwrap();
    w.until(|e| matches!(e.action, StateAction::ChatTurnStarted(_)))
        .await;
    for state in [
        match th.host.snapshot(&chat).await.unwrap().state {
            SnapshotState::Chat(c) => *c,
            _ => panic!(),
        },
        w.mirror.chats[&chat].clone(),
    ] {
        assert_eq!(state.active_turn.as_ref().map(|t| t.id.as_str()), Some("h"));
        assert!(state.turns.iter().all(|t| t.id != "h"), "not in history");
        assert_eq!(state.turns.len(), 1);
    }
    let cancel = action(json!({"type": "chat/turnCancelled", "turnId": "h"}));
    a.dispatch(chat.clone(), cancel).await.unwrap();
    w.until(|e| matches!(e.action, StateAction::ChatTurnCancelled(_)))
        .await;
    assert_mirror(&th, &mut w, &[&chat]).await;
    let state = &w.mirror.chats[&chat];
    assert!(state.active_turn.is_none());
    assert_eq!(state.turns.last().unwrap().id, "h");
    assert_eq!(state.turns.last().unwrap().state, TurnState::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_13_tool_results_and_ready_before_complete() {
    let p = Puppet::new(|turn: TurnRequest, ctx: SessionContext| async move {
        let t = turn.turn_id;
        for id in ["ok", "fail", "unready"] {
            ctx.emit(tool_start(&t, id, "shell"));
        }
        ctx.emit(tool_ready(&t, "ok"));
        ctx.emit(tool_complete(&t, "ok", true));
        ctx.emit(tool_ready(&t, "fail"));
        ctx.emit(tool_complete(&t, "fail", false));
        // Completing a call that was never made ready reduces to nothing.
        ctx.emit(tool_complete(&t, "unready", true));
        ctx.emit(complete(&t));
    });
    let (th, a, mut w, session, chat) = pup_host(p).await;
    a.dispatch(chat.clone(), turn_started("t", "go"))
        .await
        .unwrap();
    w.until(|e| matches!(e.action, StateAction::ChatTurnComplete(_)))
        .await;
    assert_mirror(&th, &mut w, &[&session, &chat]).await;
    let completions: Vec<&ChatToolCallCompleteAction> = w
        .envelopes
        .iter()
        .filter_map(|e| match &e.action {
            StateAction::ChatToolCallComplete(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(
        completions
            .iter()
            .map(|c| c.tool_call_id.as_str())
            .collect::<Vec<_>>(),
        ["ok", "fail"],
        "the unready call's completion is not published"
    );
    assert!(!completions[1].result.success);
    let turn = &w.mirror.chats[&chat].turns[0];
    match tool_call(turn, "ok")[..] {
        [ToolCallState::Completed(c)] => assert!(c.success),
        ref other => panic!("ok: {other:?}"),
    }
    match tool_call(turn, "fail")[..] {
        [ToolCallState::Completed(c)] => {
            assert!(!c.success);
            assert!(c.error.is_some(), "a failed tool keeps its error");
        }
        ref other => panic!("fail: {other:?}"),
    }
    match tool_call(turn, "unready")[..] {
        [ToolCallState::Cancelled(c)] => {
            assert_eq!(c.reason, ToolCallCancellationReason::Skipped)
        }
        ref other => panic!("unready: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_14_the_backends_tool_call_id_is_the_confirmations_id() {
    let th = start().await;
    let session = "mock:/r14".to_owned();
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    let a = client(&th.url).await;
    let mut w = open_session(&a, "r14", &session, &[&session, &chat]).await;
    a.dispatch(chat.clone(), turn_started("k", "ask"))
        .await
        .unwrap();
    let set = w
        .until(|e| matches!(e.action, StateAction::SessionInputNeededSet(_)))
        .await;
    let StateAction::SessionInputNeededSet(set) = set.action else {
        unreachable!()
    };
    let SessionInputRequest::ToolConfirmation(req) = &set.request else {
        panic!("a tool confirmation: {:?}", set.request)
    };
    // The scripted backend calls its tool "call-<turn>".
    assert_eq!(req.id, "tool:call-k");
    let ToolCallConfirmationState::PendingConfirmation(pending) = &req.tool_call else {
        panic!()
    };
    assert_eq!(pending.tool_call_id, "call-k");
    let ready = w
        .envelopes
        .iter()
        .find_map(|e| match &e.action {
            StateAction::ChatToolCallReady(r) => Some(r.tool_call_id.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(ready, "call-k");
    let active = w.mirror.chats[&chat].active_turn.clone().unwrap();
    let parts = active
        .response_parts
        .iter()
        .filter(|p| matches!(p, ResponsePart::ToolCall(_)))
        .count();
    assert_eq!(parts, 1, "one row for the call");
    let ok = action(json!({"type": "chat/toolCallConfirmed", "turnId": "k",
        "toolCallId": "call-k", "approved": true, "selectedOptionId": "allow-once"}));
    a.dispatch(chat.clone(), ok).await.unwrap();
    w.until(|e| matches!(e.action, StateAction::ChatTurnComplete(_)))
        .await;
    assert_mirror(&th, &mut w, &[&session, &chat]).await;
    let turn = &w.mirror.chats[&chat].turns[0];
    assert!(matches!(
        tool_call(turn, "call-k")[..],
        [ToolCallState::Completed(_)]
    ));
    assert_eq!(turn.response_parts.len(), 1);
}

/// Outcomes the puppet's parked asks resolved with, as the test reads them.
type Outcomes = mpsc::UnboundedSender<String>;

fn asking_puppet(out: Outcomes) -> Puppet {
    let out = Arc::new(Mutex::new(out));
    let mut p = Puppet::new(move |turn: TurnRequest, ctx: SessionContext| {
        let out = out.lock().unwrap().clone();
        async move {
            let t = turn.turn_id;
            let say = |s: String| {
                let _ = out.send(s);
            };
            match turn.message.text.as_str() {
                // Two approvals at once, keyed by id; both answered.
                "two" => {
                    ctx.emit(tool_start(&t, "a", "edit"));
                    ctx.emit(tool_start(&t, "b", "edit"));
                    let (x, y) = tokio::join!(
                        ctx.ask_approval(approval(&t, "a")),
                        ctx.ask_approval(approval(&t, "b"))
                    );
                    say(format!("two {x:?} {y:?}"));
                    ctx.emit(complete(&t));
                }
                // Asks, then ends the turn without waiting: the host settles both.
                "end" => {
                    ctx.emit(tool_start(&t, "c", "edit"));
                    let mut ap = Box::pin(ctx.ask_approval(approval(&t, "c")));
                    let request: ChatInputRequest =
                        serde_json::from_value(json!({"id": "q-end", "message": "Sure?"})).unwrap();
                    let mut q = Box::pin(ctx.ask_input(&t, request));
                    // One poll each sends the asks, in order, before the ending action.
                    assert!(futures::poll!(&mut ap).is_pending());
                    assert!(futures::poll!(&mut q).is_pending());
                    ctx.emit(complete(&t));
                    say(format!("end {:?} {:?}", ap.await, q.await.response));
                }
                // Waits for an answer that never comes; settled by a cancel or a close.
                text => {
                    let id = format!("w-{t}");
                    ctx.emit(tool_start(&t, &id, "edit"));
                    let outcome = ctx.ask_approval(approval(&t, &id)).await;
                    say(format!("{text} {outcome:?}"));
                }
            }
        }
    });
    p.keep_runs = true;
    p
}

async fn next_outcome(rx: &mut mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(PATIENCE, rx.recv())
        .await
        .expect("an outcome")
        .expect("the puppet lives")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_15_input_needed_entries_are_wrapped_keyed_and_always_settled() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (th, a, mut w, session, chat) = pup_host(asking_puppet(tx)).await;
    let needed = |w: &Watch| -> Vec<String> {
        w.mirror.sessions[&session]
            .input_needed
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|r| match r {
                SessionInputRequest::ToolConfirmation(t) => t.id.clone(),
                SessionInputRequest::ChatInput(c) => c.id.clone(),
                SessionInputRequest::ToolClientExecution(c) => c.id.clone(),
                other => panic!("{other:?}"),
            })
            .collect()
    };

    // Parallel approvals: two entries (typed decoding proves the `request` wrapper).
    a.dispatch(chat.clone(), turn_started("t1", "two"))
        .await
        .unwrap();
    for _ in 0..2 {
        w.until(|e| matches!(e.action, StateAction::SessionInputNeededSet(_)))
            .await;
    }
    let mut ids = needed(&w);
    ids.sort();
    assert_eq!(ids, ["tool:a", "tool:b"]);
    assert_eq!(
        w.mirror.sessions[&session].status & SessionStatus::InputNeeded.bits(),
        SessionStatus::InputNeeded.bits()
    );
    for id in ["a", "b"] {
        let ok = action(json!({"type": "chat/toolCallConfirmed", "turnId": "t1",
            "toolCallId": id, "approved": true}));
        a.dispatch(chat.clone(), ok).await.unwrap();
    }
    assert!(next_outcome(&mut rx).await.starts_with("two Approved"));
    w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(c) if c.turn_id == "t1"))
        .await;
    assert!(needed(&w).is_empty());

    // Turn end settles what the turn left open.
    a.dispatch(chat.clone(), turn_started("t2", "end"))
        .await
        .unwrap();
    assert_eq!(next_outcome(&mut rx).await, "end Cancelled Cancel");
    // The entries leave too (waiting for the frames, whichever task ran first).
    w.until(|e| matches!(&e.action, StateAction::ChatTurnComplete(c) if c.turn_id == "t2"))
        .await;
    while !needed(&w).is_empty() {
        w.next().await;
    }

    // A cancel settles.
    a.dispatch(chat.clone(), turn_started("t3", "cancel"))
        .await
        .unwrap();
    w.until(|e| matches!(e.action, StateAction::SessionInputNeededSet(_)))
        .await;
    a.dispatch(
        chat.clone(),
        action(json!({"type": "chat/turnCancelled", "turnId": "t3"})),
    )
    .await
    .unwrap();
    assert_eq!(next_outcome(&mut rx).await, "cancel Cancelled");
    w.until(|e| matches!(e.action, StateAction::SessionInputNeededRemoved(_)))
        .await;
    assert!(needed(&w).is_empty(), "settled on cancel");

    // A replaced turn's approval stays answerable: its entry outlives the replacement and an
    // answer naming it resolves it (without an echo: it changes no chat state).
    a.dispatch(chat.clone(), turn_started("t4", "replaced"))
        .await
        .unwrap();
    w.until(|e| matches!(e.action, StateAction::SessionInputNeededSet(_)))
        .await;
    a.dispatch(chat.clone(), turn_started("t5", "newer"))
        .await
        .unwrap();
    w.until(|e| {
        matches!(&e.action, StateAction::SessionInputNeededSet(s)
        if matches!(&s.request, SessionInputRequest::ToolConfirmation(t) if t.turn_id == "t5"))
    })
    .await;
    let mut ids = needed(&w);
    ids.sort();
    assert_eq!(ids, ["tool:w-t4", "tool:w-t5"]);
    let answer = action(json!({"type": "chat/toolCallConfirmed", "turnId": "t4",
        "toolCallId": "w-t4", "approved": true}));
    a.dispatch(chat.clone(), answer).await.unwrap();
    assert!(next_outcome(&mut rx).await.starts_with("replaced Approved"));
    w.until(
        |e| matches!(&e.action, StateAction::SessionInputNeededRemoved(r) if r.id == "tool:w-t4"),
    )
    .await;
    assert_eq!(needed(&w), ["tool:w-t5"]);
    a.dispatch(
        chat.clone(),
        action(json!({"type": "chat/turnCancelled", "turnId": "t5"})),
    )
    .await
    .unwrap();
    assert_eq!(next_outcome(&mut rx).await, "newer Cancelled");
    while !needed(&w).is_empty() {
        w.next().await;
    }
    assert_mirror(&th, &mut w, &[&session, &chat]).await;

    // Closing the session settles an approval nobody answered.
    a.dispatch(chat.clone(), turn_started("t6", "closing"))
        .await
        .unwrap();
    w.until(|e| {
        matches!(&e.action, StateAction::SessionInputNeededSet(s)
        if matches!(&s.request, SessionInputRequest::ToolConfirmation(t) if t.turn_id == "t6"))
    })
    .await;
    let _: Value = a
        .request("disposeSession", json!({"channel": session}))
        .await
        .unwrap();
    assert_eq!(next_outcome(&mut rx).await, "closing Cancelled");
}
