//! Answers at a pause (runtime cases, section H of docs/acceptance.md): edited approvals, remembered approvals, denials, the rest
//! of a batch, questions, and cancels while a request is open.

use std::sync::Arc;

use serde_json::{Value, json};

use super::pause_support::*;
use super::run_support::*;
use cofold_agents::ask::ask_user_tool;
use cofold_agents::error::ErrorCode;
use cofold_agents::event::{
    ApprovalDecision, Command, EventBody, OutcomeKind, RequestKind, RunStatus,
};
use cofold_agents::policy::DenialBy;
use cofold_agents::run::{RunHandle, RunOptions, TURN_STOPPED, run};
use cofold_agents::store::{KvScope, MemoryStore, RunRef, StepRecord, StepStatus, Store};
use cofold_agents::testing::{FakeCall, FakeModel, FakeStep};

#[tokio::test]
async fn an_edited_input_must_validate_and_runs_exactly_as_given() {
    // Item 134.
    let p = paused_rm().await;
    for bad in [json!({ "path": 3 }), json!({ "path": "q", "extra": 1 })] {
        let refused = p
            .handle
            .submit(Command::Approve {
                request_id: p.request_id.clone(),
                input: Some(bad),
                always_approve: None,
            })
            .await
            .expect_err("invalid");
        assert_eq!(refused.code, ErrorCode::InvalidOptions);
        assert!(refused.message.starts_with("Invalid arguments: "));
    }
    assert_eq!(p.handle.status(), RunStatus::Awaiting);
    let edited = json!({ "path": "/elsewhere" });
    p.handle
        .submit(Command::Approve {
            request_id: p.request_id.clone(),
            input: Some(edited.clone()),
            always_approve: None,
        })
        .await
        .expect("approve");
    p.handle.outcome().await;
    assert_eq!(*p.runs.lock().expect("runs"), vec![edited.clone()]);
    let steps = p
        .store
        .list_steps(&RunRef::new("s", p.handle.run_id()))
        .await
        .expect("steps");
    assert!(matches!(&steps[1], StepRecord::Tool(t) if t.input == edited));
}

#[tokio::test]
async fn always_approve_is_remembered_per_session() {
    // Item 135.
    let p = paused_rm().await;
    p.handle
        .submit(Command::Approve {
            request_id: p.request_id.clone(),
            input: None,
            always_approve: Some(true),
        })
        .await
        .expect("approve");
    p.handle.outcome().await;
    let kv = p
        .store
        .kv_get(
            &KvScope::Agent {
                agent_id: "a".into(),
            },
            "approvals/s/rm",
        )
        .await
        .expect("kv");
    assert_eq!(kv, Some(json!(true)));
    p.model.push([
        FakeStep::tool_call("rm", json!({ "path": "q" })),
        FakeStep::text("ok"),
    ]);
    let next = run(&p.agent, RunOptions::new("s", "again"));
    assert!(!types(&all_events(&next).await).contains(&"approval.requested"));
    p.model
        .push([FakeStep::tool_call("rm", json!({ "path": "q" }))]);
    let elsewhere = run(&p.agent, RunOptions::new("s2", "there"));
    pause(&elsewhere, 0).await;
    elsewhere.cancel(None);
}

#[tokio::test]
async fn a_deny_answers_the_call_with_the_reason_and_runs_nothing() {
    // Item 136.
    let p = paused_rm().await;
    p.handle
        .submit(Command::Deny {
            request_id: p.request_id.clone(),
            reason: Some("no way".into()),
        })
        .await
        .expect("deny");
    let outcome = p.handle.outcome().await;
    let events = all_events(&p.handle).await;
    assert!(events.iter().any(|e| matches!(&e.body, EventBody::ApprovalResolved { decision: ApprovalDecision::Deny, reason: Some(r), .. } if r == "no way")));
    assert!(!types(&events).contains(&"tool.denied"));
    assert!(p.runs.lock().expect("runs").is_empty());
    assert_eq!(
        result_of(p.model.requests()[1].messages.last().expect("r")),
        ("no way".to_owned(), true)
    );
    let steps = p
        .store
        .list_steps(&RunRef::new("s", p.handle.run_id()))
        .await
        .expect("steps");
    assert!(steps.iter().all(|s| matches!(s, StepRecord::Model(_))));
    assert_eq!(outcome.denials[0].by, DenialBy::User);
}

#[tokio::test]
async fn the_rest_of_a_batch_runs_after_the_approve() {
    // Item 137.
    let calls = vec![
        FakeCall::new("echo", json!({ "text": "a" })),
        FakeCall::new("rm", json!({ "path": "b" })),
        FakeCall::new("echo", json!({ "text": "c" })),
    ];
    let model = FakeModel::new(vec![FakeStep::tool_calls(calls), FakeStep::text("ok")]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tools([echo_tool(), rm_tool(Arc::default())])
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let (request_id, _) = pause(&handle, 0).await;
    handle.submit(approve(&request_id)).await.expect("approve");
    handle.outcome().await;
    let steps = store
        .list_steps(&RunRef::new("s", handle.run_id()))
        .await
        .expect("steps");
    let indexes: Vec<u32> = steps
        .iter()
        .map(|s| match s {
            StepRecord::Model(m) => m.index,
            StepRecord::Tool(t) => t.index,
        })
        .collect();
    assert_eq!(indexes, [0, 1, 2, 3, 4]);
    let messages = store.list_messages("s", None).await.expect("m");
    let results: Vec<String> = messages[2..5].iter().map(|m| result_of(m).0).collect();
    assert_eq!(results, ["echo:a", "removed b", "echo:c"]);
}

async fn asked(question: Value) -> (FakeModel, Arc<MemoryStore>, RunHandle, String) {
    let model = FakeModel::new(vec![
        FakeStep::tool_call("ask_user", json!({ "questions": [question] })),
        FakeStep::text("thanks"),
    ]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(ask_user_tool(None, None).expect("ask_user"))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let (request_id, kind) = pause(&handle, 0).await;
    assert_eq!(kind, RequestKind::Input);
    (model, store, handle, request_id)
}

#[tokio::test]
async fn questions_take_valid_answers_only() {
    // Item 138.
    let question = json!({ "id": "color", "question": "Which color?", "options": [{ "label": "red" }, { "label": "blue" }], "allowOther": false });
    let (model, store, handle, request_id) = asked(question).await;
    let wrong_kind = handle
        .submit(approve(&request_id))
        .await
        .expect_err("approve refused");
    assert_eq!(wrong_kind.code, ErrorCode::InvalidOptions);
    for bad in [json!({ "color": "green" }), json!({}), json!("red")] {
        let refused = handle
            .submit(Command::Answer {
                request_id: request_id.clone(),
                answers: bad,
            })
            .await;
        assert_eq!(
            refused.expect_err("bad answer").code,
            ErrorCode::InvalidOptions
        );
    }
    handle
        .submit(Command::Answer {
            request_id: request_id.clone(),
            answers: json!({ "color": "red" }),
        })
        .await
        .expect("answer");
    handle.outcome().await;
    let events = types(&all_events(&handle).await);
    let at = events
        .iter()
        .position(|t| *t == "input.resolved")
        .expect("resolved");
    assert_eq!(
        &events[at..at + 3],
        ["input.resolved", "run.resumed", "tool.completed"]
    );
    let steps = store
        .list_steps(&RunRef::new("s", handle.run_id()))
        .await
        .expect("steps");
    let tool_steps: Vec<_> = steps
        .iter()
        .filter_map(|s| {
            if let StepRecord::Tool(t) = s {
                Some(t)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(tool_steps.len(), 1);
    assert_eq!(tool_steps[0].status, StepStatus::Completed);
    let original = tool_steps[0].original.as_ref().expect("original");
    assert_eq!(original.content, "Q (color): Which color?\nA: red");
    assert_eq!(
        original.detail,
        Some(json!({ "answers": { "color": "red" } }))
    );
    assert_eq!(
        result_of(model.requests()[1].messages.last().expect("r")),
        ("Q (color): Which color?\nA: red".to_owned(), false)
    );
}

#[tokio::test]
async fn a_declined_question_is_an_error_result_and_a_user_denial() {
    // Items 139 and 122.
    let (model, store, handle, request_id) = asked(json!({ "id": "q", "question": "Why?" })).await;
    handle
        .submit(Command::Deny {
            request_id,
            reason: None,
        })
        .await
        .expect("deny");
    let outcome = handle.outcome().await;
    let events = all_events(&handle).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.body, EventBody::InputDeclined { .. }))
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.body, EventBody::ToolCompleted { is_error: true, .. }))
    );
    let steps = store
        .list_steps(&RunRef::new("s", handle.run_id()))
        .await
        .expect("steps");
    assert!(
        steps
            .iter()
            .any(|s| matches!(s, StepRecord::Tool(t) if t.status == StepStatus::Failed))
    );
    assert_eq!(
        result_of(model.requests()[1].messages.last().expect("r")),
        ("The user declined to answer".to_owned(), true)
    );
    assert_eq!(
        (outcome.denials[0].reason.as_str(), outcome.denials[0].by),
        ("The user declined to answer", DenialBy::User)
    );
}

#[tokio::test]
async fn a_cancel_while_a_resumed_run_waits_denies_the_request() {
    // Item 145.
    let p = paused_rm().await;
    assert!(p.handle.detach());
    let handle = reopen(&p.agent, p.handle.run_id(), None);
    next_of(&handle, "run.paused", 0).await;
    handle.cancel(Some("bye".into()));
    let outcome = handle.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Cancelled { reason } if reason.as_deref() == Some("bye"))
    );
    let events = types(&all_events(&handle).await);
    assert_eq!(
        &events[events.len() - 3..],
        ["approval.resolved", "run.resumed", "run.finished"]
    );
    assert!(p.runs.lock().expect("runs").is_empty());
    let run_ref = RunRef::new("s", p.handle.run_id());
    let request = p
        .store
        .get_request(&run_ref, &p.request_id)
        .await
        .expect("g")
        .expect("r");
    assert_eq!(
        request.resolution.as_ref().expect("res")["reason"],
        TURN_STOPPED
    );
    let record = p.store.get_run(&run_ref).await.expect("g").expect("r");
    assert_eq!(
        (record.status, record.pending_request_id.clone()),
        (RunStatus::Cancelled, None)
    );
    let messages = p.store.list_messages("s", None).await.expect("m");
    let n = messages.len();
    assert_eq!(result_of(&messages[n - 2]), (TURN_STOPPED.to_owned(), true));
    assert_eq!(text(&messages[n - 1]), "[Request interrupted by user]");
    assert_eq!(
        handle
            .submit(approve(&p.request_id))
            .await
            .expect_err("closed")
            .code,
        ErrorCode::NotRunning
    );
    let later = reopen(&p.agent, p.handle.run_id(), None);
    assert_eq!(later.outcome().await.status(), RunStatus::Cancelled);
}

#[tokio::test]
async fn a_cancel_at_an_input_request_declines_it() {
    // Item 146.
    let (_model, store, handle, _request_id) =
        asked(json!({ "id": "q", "question": "Why?" })).await;
    handle.cancel(None);
    handle.outcome().await;
    let events = types(&all_events(&handle).await);
    assert_eq!(
        &events[events.len() - 4..],
        [
            "input.declined",
            "run.resumed",
            "tool.completed",
            "run.finished"
        ]
    );
    let steps = store
        .list_steps(&RunRef::new("s", handle.run_id()))
        .await
        .expect("steps");
    let step = steps
        .iter()
        .find_map(|s| {
            if let StepRecord::Tool(t) = s {
                Some(t)
            } else {
                None
            }
        })
        .expect("tool step");
    assert_eq!(step.status, StepStatus::Failed);
    assert_eq!(step.original.as_ref().expect("o").content, TURN_STOPPED);
}
