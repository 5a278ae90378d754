//! Answers and resume (harness §12.H): stale handles, lost races, detach, replay, edited
//! approvals, questions, dead processes and cancels at a pause.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::run_support::*;
use cofold_agents::agent::Agent;
use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::event::{
    ApprovalDecision, Command, EventBody, OutcomeKind, RequestKind, RunStatus,
};
use cofold_agents::policy::DenialBy;
use cofold_agents::question::ask_user_tool;
use cofold_agents::run::{ResumeOptions, RunHandle, RunOptions, TURN_STOPPED, resume, run};
use cofold_agents::store::{KvScope, MemoryStore, RunRef, StepRecord, StepStatus, Store};
use cofold_agents::testing::{FakeCall, FakeModel, FakeStep};

fn approve(request_id: &str) -> Command {
    Command::Approve {
        request_id: request_id.into(),
        input: None,
        always_approve: None,
    }
}

fn reopen(agent: &Agent, run_id: &str, after_seq: Option<u64>) -> RunHandle {
    resume(
        agent,
        ResumeOptions {
            session_id: "s".into(),
            run_id: run_id.into(),
            after_seq,
        },
    )
}

struct Paused {
    model: FakeModel,
    store: Arc<MemoryStore>,
    runs: Arc<Mutex<Vec<Value>>>,
    agent: Agent,
    handle: RunHandle,
    request_id: String,
}

/// A run paused on `rm` in session `s`.
async fn paused_rm() -> Paused {
    paused_rm_then(FakeStep::text("done")).await
}

/// A run paused on `rm`, whose model answers `last` after the tool.
async fn paused_rm_then(last: FakeStep) -> Paused {
    let model = FakeModel::new(vec![
        FakeStep::tool_call("rm", json!({ "path": "p" })),
        last,
    ]);
    let store = memory();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let agent = builder(&model, store.clone())
        .tool(rm_tool(runs.clone()))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let (request_id, _) = pause(&handle, 0).await;
    Paused {
        model,
        store,
        runs,
        agent,
        handle,
        request_id,
    }
}

/// The same agent over another store instance onto the same data: another process.
fn other_process(p: &Paused) -> Agent {
    let other = FaultStore::over(p.store.clone());
    builder(&p.model, other)
        .tool(rm_tool(p.runs.clone()))
        .build()
        .expect("agent")
}

#[tokio::test]
async fn a_stale_handle_detaches_on_cancel_and_writes_nothing() {
    // Item 128: the other process is held in its model step until our cancel is done.
    let gate = Arc::new(tokio::sync::Notify::new());
    let p = paused_rm_then(FakeStep::text("done").gated(gate.clone())).await;
    let other = other_process(&p);
    let theirs = reopen(&other, p.handle.run_id(), None);
    theirs
        .submit(approve(&p.request_id))
        .await
        .expect("their approve");
    // Ours still waits; its cancel finds the request resolved.
    p.handle.cancel(Some("mine".into()));
    let ours = p.handle.outcome().await;
    assert!(
        matches!(ours.kind, OutcomeKind::Awaiting { .. }),
        "{ours:?}"
    );
    assert_eq!(
        all_events(&p.handle)
            .await
            .last()
            .and_then(|e| e.finished_outcome())
            .map(|o| o.status()),
        Some(RunStatus::Awaiting)
    );
    let run_ref = RunRef::new("s", p.handle.run_id());
    assert_eq!(
        p.store
            .get_run(&run_ref)
            .await
            .expect("g")
            .expect("r")
            .status,
        RunStatus::Running
    );
    gate.notify_one();
    assert_eq!(theirs.outcome().await.status(), RunStatus::Completed);
    assert_eq!(p.runs.lock().expect("runs").len(), 1);
    let request = p
        .store
        .get_request(&run_ref, &p.request_id)
        .await
        .expect("g")
        .expect("r");
    assert_eq!(
        request.resolution.as_ref().expect("resolution")["type"],
        "approve"
    );
    assert_eq!(
        p.store
            .get_session("s")
            .await
            .expect("g")
            .expect("s")
            .active_writer_run_id,
        None
    );
}

#[tokio::test]
async fn a_resolve_that_loses_the_race_fails_not_found_and_writes_nothing() {
    // Item 129: another process resolved the request directly in the store.
    let p = paused_rm().await;
    let run_ref = RunRef::new("s", p.handle.run_id());
    let theirs = json!({ "type": "deny", "requestId": p.request_id, "reason": "theirs" });
    p.store
        .resolve_request(&run_ref, &p.request_id, theirs.clone())
        .await
        .expect("their resolve");
    let before = p
        .store
        .list_events(&run_ref, None)
        .await
        .expect("events")
        .len();
    let lost = p
        .handle
        .submit(approve(&p.request_id))
        .await
        .expect_err("lost");
    assert_eq!(lost.code, ErrorCode::NotFound);
    let outcome = p.handle.outcome().await;
    assert!(matches!(outcome.kind, OutcomeKind::Awaiting { .. }));
    assert_eq!(
        p.store
            .list_events(&run_ref, None)
            .await
            .expect("events")
            .len(),
        before
    );
    let record = p.store.get_run(&run_ref).await.expect("g").expect("r");
    assert_eq!(record.status, RunStatus::Awaiting);
    assert_eq!(
        p.store
            .get_request(&run_ref, &p.request_id)
            .await
            .expect("g")
            .expect("r")
            .resolution,
        Some(theirs)
    );
    assert_eq!(
        p.store
            .get_session("s")
            .await
            .expect("g")
            .expect("s")
            .active_writer_run_id
            .as_deref(),
        Some(p.handle.run_id())
    );
}

#[tokio::test]
async fn a_store_refusing_the_pause_fails_the_run_and_leaves_the_request_open() {
    // Item 130.
    let model = FakeModel::new(vec![
        FakeStep::tool_call("rm", json!({ "path": "p" })),
        FakeStep::text("done"),
    ]);
    let store = FaultStore::over(memory());
    store.set_fault(|op, event| {
        let paused = event.is_some_and(|e| {
            matches!(
                e.body,
                EventBody::RunPaused { .. } | EventBody::RunFinished { .. }
            )
        });
        (op == "append_event" && paused).then(store_down)
    });
    let agent = builder(&model, store.clone())
        .tool(rm_tool(Arc::default()))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let request_id = match next_of(&handle, "approval.requested", 0).await.body {
        EventBody::ApprovalRequested { request_id, .. } => request_id,
        _ => unreachable!(),
    };
    let outcome = handle.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Failed { error } if error.code == ErrorCode::Internal)
    );
    assert_eq!(
        handle
            .submit(approve(&request_id))
            .await
            .expect_err("closed")
            .code,
        ErrorCode::NotRunning
    );
    let run_ref = RunRef::new("s", handle.run_id());
    assert_eq!(
        store
            .inner
            .get_run(&run_ref)
            .await
            .expect("g")
            .expect("r")
            .status,
        RunStatus::Failed
    );
    assert!(
        store
            .inner
            .get_request(&run_ref, &request_id)
            .await
            .expect("g")
            .expect("r")
            .resolution
            .is_none()
    );
}

#[tokio::test]
async fn detach_leaves_the_request_for_a_later_resume() {
    // Item 131.
    let p = paused_rm().await;
    let busy = reopen(&p.agent, p.handle.run_id(), None);
    assert!(
        matches!(&busy.outcome().await.kind, OutcomeKind::Failed { error } if error.code == ErrorCode::WriterBusy)
    );
    assert!(p.handle.detach());
    let outcome = p.handle.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Awaiting { request_id, .. } if *request_id == p.request_id)
    );
    assert_eq!(p.handle.status(), RunStatus::Awaiting);
    let run_ref = RunRef::new("s", p.handle.run_id());
    assert_eq!(
        p.store
            .get_run(&run_ref)
            .await
            .expect("g")
            .expect("r")
            .status,
        RunStatus::Awaiting
    );
    assert!(
        p.store
            .get_request(&run_ref, &p.request_id)
            .await
            .expect("g")
            .expect("r")
            .resolution
            .is_none()
    );
    assert!(!p.handle.detach(), "detach only works while waiting");
    let again = reopen(&p.agent, p.handle.run_id(), None);
    again.submit(approve(&p.request_id)).await.expect("approve");
    assert_eq!(again.outcome().await.status(), RunStatus::Completed);
    assert_eq!(p.runs.lock().expect("runs").len(), 1);
}

#[tokio::test]
async fn a_resume_replays_then_continues_the_numbering() {
    // Items 132 and 133.
    let p = paused_rm().await;
    assert!(p.handle.detach());
    let handle = reopen(&p.agent, p.handle.run_id(), None);
    let wrong = handle.submit(approve("nope")).await.expect_err("wrong id");
    assert_eq!(wrong.code, ErrorCode::NotFound);
    assert_eq!(handle.status(), RunStatus::Awaiting);
    handle
        .submit(approve(&p.request_id))
        .await
        .expect("approve");
    let events = all_events(&handle).await;
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=14).collect::<Vec<_>>()
    );
    assert_eq!(
        types(&events[7..]),
        [
            "approval.resolved",
            "run.resumed",
            "tool.started",
            "tool.completed",
            "model.started",
            "model.completed",
            "run.finished"
        ]
    );
    assert!(matches!(
        &events[7].body,
        EventBody::ApprovalResolved {
            decision: ApprovalDecision::Approve,
            ..
        }
    ));
    assert_eq!(p.runs.lock().expect("runs").len(), 1);
    let run_ref = RunRef::new("s", p.handle.run_id());
    let steps = p.store.list_steps(&run_ref).await.expect("steps");
    assert_eq!(steps.len(), 3);
    let record = p.store.get_run(&run_ref).await.expect("g").expect("r");
    assert_eq!(
        (record.status, record.pending_request_id.clone()),
        (RunStatus::Completed, None)
    );
    let request = p
        .store
        .get_request(&run_ref, &p.request_id)
        .await
        .expect("g")
        .expect("r");
    assert_eq!(request.resolution.as_ref().expect("res")["type"], "approve");
    assert_eq!(
        p.store.list_events(&run_ref, None).await.expect("events"),
        events
    );
}

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
async fn resuming_a_finished_run_replays_without_claiming() {
    // Items 140 and 141.
    let model = FakeModel::new(vec![echo_call("a"), FakeStep::text("done")]);
    let store = FaultStore::over(memory());
    let agent = echo_agent(&model, store.clone());
    let handle = run(&agent, RunOptions::new("s", "x"));
    let outcome = handle.outcome().await;
    let claims = store.calls_named("claim_writer");
    let replay = reopen(&agent, handle.run_id(), Some(2));
    let events = all_events(&replay).await;
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (3..=9).collect::<Vec<_>>()
    );
    assert_eq!(replay.outcome().await, outcome);
    let far = reopen(&agent, handle.run_id(), Some(99));
    let events = all_events(&far).await;
    assert_eq!(
        (events.len(), events[0].seq, events[0].type_name()),
        (1, 100, "run.finished")
    );
    assert_eq!(far.outcome().await, outcome);
    assert_eq!(store.calls_named("claim_writer"), claims, "nothing claimed");
    assert_eq!(
        store
            .inner
            .list_events(&RunRef::new("s", handle.run_id()), None)
            .await
            .expect("e")
            .len(),
        9
    );
}

#[tokio::test]
async fn an_unknown_run_fails_not_found() {
    // Item 142.
    let agent = echo_agent(&FakeModel::new(vec![]), memory());
    let handle = reopen(&agent, "missing", None);
    assert_eq!(types(&all_events(&handle).await), ["run.finished"]);
    let outcome = handle.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Failed { error } if error.code == ErrorCode::NotFound)
    );
    assert_eq!(outcome.steps, 0);
    assert_eq!(
        handle.submit(approve("r")).await.expect_err("closed").code,
        ErrorCode::NotRunning
    );
}

#[tokio::test]
async fn a_run_that_died_during_a_tool_is_uncertain() {
    // Item 143: the old process hangs in a tool; another process resumes after the claim went stale.
    let calls = vec![
        FakeCall::new("hang", json!({})),
        FakeCall::new("hang", json!({})),
    ];
    let model = FakeModel::new(vec![FakeStep::tool_calls(calls)]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(hang_tool("hang", Arc::default()))
        .build()
        .expect("agent");
    let old = run(&agent, RunOptions::new("s", "x"));
    next_of(&old, "tool.started", 0).await;
    store
        .release_writer("s", old.run_id())
        .await
        .expect("stale");
    let other = builder(&model, FaultStore::over(store.clone()))
        .tool(hang_tool("hang", Arc::default()))
        .build()
        .expect("agent");
    let resumed = reopen(&other, old.run_id(), None);
    let outcome = resumed.outcome().await;
    let OutcomeKind::Failed { error } = &outcome.kind else {
        panic!("{outcome:?}")
    };
    assert_eq!(error.code, ErrorCode::UncertainInvocation);
    let detail = error.detail.clone().expect("detail");
    assert!(detail.get("callId").is_some() && detail.get("invocationId").is_some());
    assert_eq!(
        (outcome.steps, outcome.usage),
        (1, cofold_agents::model::Usage::new(1, 1))
    );
    let run_ref = RunRef::new("s", old.run_id());
    let steps = store.list_steps(&run_ref).await.expect("steps");
    assert!(
        matches!(&steps[1], StepRecord::Tool(t) if t.status == StepStatus::Uncertain && t.ended_at.is_some())
    );
    let messages = store.list_messages("s", None).await.expect("m");
    assert_eq!(
        result_of(&messages[2]).0,
        "execution outcome unknown: the process died during the call"
    );
    assert_eq!(
        result_of(&messages[3]).0,
        "not executed: the run was interrupted"
    );
    assert_eq!(
        store.get_run(&run_ref).await.expect("g").expect("r").status,
        RunStatus::Failed
    );
    assert_eq!(
        store
            .get_session("s")
            .await
            .expect("g")
            .expect("s")
            .active_writer_run_id,
        None
    );
    // The old handle, cancelled now, finds its writes refused and settles superseded.
    old.cancel(None);
    assert!(
        matches!(&old.outcome().await.kind, OutcomeKind::Failed { error } if error.code == ErrorCode::Superseded)
    );
}

#[tokio::test]
async fn a_run_that_died_before_its_first_step_is_interrupted() {
    // Item 144.
    let store = memory();
    let gate = Arc::new(tokio::sync::Notify::new());
    let model = FakeModel::new(vec![FakeStep::text("x").gated(gate)]);
    let agent = echo_agent(&model, store.clone());
    let old = run(&agent, RunOptions::new("s", "x"));
    next_of(&old, "run.started", 0).await;
    // Pretend the process died right after run.started: no step was written yet.
    let run_ref = RunRef::new("s", old.run_id());
    let steps = store.list_steps(&run_ref).await.expect("steps");
    let other = echo_agent(&model, FaultStore::over(store.clone()));
    if steps.is_empty() {
        let handle = reopen(&other, old.run_id(), None);
        let outcome = handle.outcome().await;
        assert!(
            matches!(&outcome.kind, OutcomeKind::Failed { error } if error.code == ErrorCode::Interrupted)
        );
    } else {
        // The model step was already open: it is marked failed and the run interrupted.
        let handle = reopen(&other, old.run_id(), None);
        let outcome = handle.outcome().await;
        assert!(
            matches!(&outcome.kind, OutcomeKind::Failed { error } if error.code == ErrorCode::Interrupted)
        );
    }
    let events = store.list_events(&run_ref, None).await.expect("events");
    assert_eq!(
        types(&events)
            .iter()
            .filter(|t| **t == "run.finished")
            .count(),
        1
    );
    assert_eq!(
        store.get_run(&run_ref).await.expect("g").expect("r").status,
        RunStatus::Failed
    );
    old.cancel(None);
    old.outcome().await;
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

#[tokio::test]
async fn two_resumes_in_one_process_and_a_submit_before_the_attach() {
    // Items 147 and 148.
    let p = paused_rm().await;
    assert!(p.handle.detach());
    let first = reopen(&p.agent, p.handle.run_id(), None);
    // Sent before the resume has read the run: it waits for the attach.
    let early = first.submit(approve(&p.request_id));
    let second = reopen(&p.agent, p.handle.run_id(), None);
    early.await.expect("early approve");
    let busy = second.outcome().await;
    assert!(
        matches!(&busy.kind, OutcomeKind::Failed { error } if error.code == ErrorCode::WriterBusy)
    );
    assert_eq!(busy.steps, 1);
    assert_eq!(
        second
            .submit(approve(&p.request_id))
            .await
            .expect_err("closed")
            .code,
        ErrorCode::NotRunning
    );
    assert_eq!(first.outcome().await.status(), RunStatus::Completed);
    let third = reopen(&p.agent, p.handle.run_id(), None);
    assert_eq!(third.outcome().await.status(), RunStatus::Completed);
    let _ = AgentError::internal("unused");
}
