//! Resume (runtime cases, section H of docs/acceptance.md): stale handles, lost races, detach, replay, finished, unknown and dead
//! runs, and two resumes in one process.

use std::sync::Arc;

use serde_json::json;

use super::pause_support::*;
use super::run_support::*;
use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::event::{ApprovalDecision, EventBody, OutcomeKind, RunStatus};
use cofold_agents::run::{RunOptions, run};
use cofold_agents::store::{RunRef, StepRecord, StepStatus, Store};
use cofold_agents::testing::{FakeCall, FakeModel, FakeStep};

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
async fn a_run_that_died_during_a_tool_is_interrupted_and_its_calls_answered() {
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
    assert_eq!(error.code, ErrorCode::Interrupted);
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
        cofold_agents::pairing::OUTCOME_UNKNOWN_TEXT
    );
    assert_eq!(
        result_of(&messages[3]).0,
        cofold_agents::pairing::NOT_RUN_TEXT
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
