//! Conformance checks for runs, events, steps and requests (runtime cases 189-197, 203, docs/acceptance.md).

use serde_json::json;

use crate::error::ErrorCode;
use crate::event::{RequestKind, RunStatus};
use crate::id::Timestamp;
use crate::model::Usage;
use crate::store::{
    ModelStep, PendingRequest, RunRef, RunUpdate, StepPatch, StepRecord, StepStatus, ToolStep,
};

use super::{StoreFixture, denial, event, expect_code, ok, run, run_record, session};

/// 189: events must follow on; listing with and without `after_seq`; exact round-trips.
pub async fn event_sequence(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    run(store, "s1", "r1", RunStatus::Running).await;
    let r1 = RunRef::new("s1", "r1");
    expect_code(
        store.append_event(&event(&r1, 2)).await,
        ErrorCode::SeqGap,
        "first event numbered 2",
    );
    let written: Vec<_> = (1..=3).map(|seq| event(&r1, seq)).collect();
    for one in &written {
        ok(store.append_event(one).await, "append_event");
    }
    expect_code(
        store.append_event(&event(&r1, 3)).await,
        ErrorCode::SeqGap,
        "a repeat",
    );
    expect_code(
        store.append_event(&event(&r1, 5)).await,
        ErrorCode::SeqGap,
        "a gap",
    );
    assert_eq!(ok(store.list_events(&r1, None).await, "list"), written);
    assert_eq!(
        ok(store.list_events(&r1, Some(1)).await, "list after 1"),
        written[1..]
    );
    assert_eq!(
        ok(store.list_events(&r1, Some(3)).await, "list after 3"),
        []
    );
    let again = fixture.reopen();
    assert_eq!(
        ok(
            again.list_events(&r1, None).await,
            "list from another handle"
        ),
        written
    );
}

/// 190: a run asked for under the wrong session.
pub async fn wrong_session_for_runs(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    session(store, "s2", None).await;
    run(store, "s1", "r1", RunStatus::Running).await;
    let wrong = RunRef::new("s2", "r1");
    assert_eq!(ok(store.get_run(&wrong).await, "get_run"), None);
    expect_code(
        store.update_run(RunUpdate::new(wrong.clone())).await,
        ErrorCode::NotFound,
        "update_run",
    );
    expect_code(
        store.append_event(&event(&wrong, 1)).await,
        ErrorCode::NotFound,
        "append_event",
    );
    expect_code(
        store.list_steps(&wrong).await,
        ErrorCode::NotFound,
        "list_steps",
    );
    expect_code(
        store
            .create_run(run_record("nope", "r1", RunStatus::Running))
            .await,
        ErrorCode::NotFound,
        "create_run",
    );
}

/// 191: a taken run id is refused and the first record stays.
pub async fn run_created_twice(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    let mut first = run_record("s1", "r1", RunStatus::Running);
    first.model = Some("p/m".into());
    ok(store.create_run(first.clone()).await, "create_run");
    expect_code(
        store
            .create_run(run_record("s1", "r1", RunStatus::Failed))
            .await,
        ErrorCode::AlreadyExists,
        "second",
    );
    assert_eq!(
        ok(store.get_run(&RunRef::new("s1", "r1")).await, "get_run"),
        Some(first)
    );
}

/// 192: a full record comes back unchanged.
pub async fn full_run_record_round_trips(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    let mut record = run_record("s1", "r1", RunStatus::Completed);
    record.model = Some("p/m".into());
    record.input_message_id = Some("m1".into());
    record.last_message_id = Some("m2".into());
    record.steps = 3;
    record.usage = Usage {
        input_tokens: 100,
        output_tokens: 20,
        cache_read_tokens: Some(40),
        cache_write_tokens: Some(5),
        reasoning_tokens: Some(7),
    };
    record.denials = vec![denial("c1")];
    ok(store.create_run(record.clone()).await, "create_run");
    assert_eq!(
        ok(store.get_run(&RunRef::new("s1", "r1")).await, "get_run"),
        Some(record.clone())
    );
    let again = fixture.reopen();
    assert_eq!(
        ok(
            again.get_run(&RunRef::new("s1", "r1")).await,
            "get_run again"
        ),
        Some(record)
    );
}

/// 193: updates write what they carry and leave the rest.
pub async fn run_updates(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    run(store, "s1", "r1", RunStatus::Running).await;
    let r1 = RunRef::new("s1", "r1");
    let mut update = RunUpdate::new(r1.clone());
    update.status = Some(RunStatus::Awaiting);
    update.pending_request_id = Some(Some("q1".into()));
    update.steps = Some(2);
    update.usage = Some(Usage {
        input_tokens: 5,
        output_tokens: 6,
        ..crate::usage::ZERO_USAGE
    });
    let written = ok(store.update_run(update).await, "update");
    assert_eq!(written.status, RunStatus::Awaiting);
    assert_eq!(written.pending_request_id.as_deref(), Some("q1"));
    assert_eq!(written.steps, 2);
    assert!(written.updated_at > written.created_at, "updatedAt moves");
    let mut update = RunUpdate::new(r1.clone());
    update.last_message_id = Some("m9".into());
    let kept = ok(store.update_run(update).await, "update without pending");
    assert_eq!(
        kept.pending_request_id.as_deref(),
        Some("q1"),
        "None leaves pendingRequestId"
    );
    assert_eq!(kept.last_message_id.as_deref(), Some("m9"));
    let mut update = RunUpdate::new(r1.clone());
    update.status = Some(RunStatus::Running);
    update.pending_request_id = Some(None);
    ok(store.update_run(update).await, "clear pending");
    let read = ok(store.get_run(&r1).await, "get_run").expect("run exists");
    assert_eq!(read.status, RunStatus::Running);
    assert_eq!(read.steps, 2);
    assert_eq!(read.usage.output_tokens, 6);
    let json = serde_json::to_value(&read).expect("a record serializes");
    assert!(
        json.get("pendingRequestId").is_none(),
        "Some(None) removes the key: {json}"
    );
    assert!(json.get("events").is_none());
}

/// 194: cost stays absent until written; a written cost persists.
pub async fn cost_is_absent_until_written(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    run(store, "s1", "r1", RunStatus::Running).await;
    let r1 = RunRef::new("s1", "r1");
    let mut update = RunUpdate::new(r1.clone());
    update.steps = Some(1);
    ok(store.update_run(update).await, "update without cost");
    let json = serde_json::to_value(ok(store.get_run(&r1).await, "get").expect("run exists"))
        .expect("serializes");
    assert!(json.get("cost").is_none(), "no cost key: {json}");
    let mut update = RunUpdate::new(r1.clone());
    update.cost = Some(0.25);
    ok(store.update_run(update).await, "update with cost");
    ok(
        store.update_run(RunUpdate::new(r1.clone())).await,
        "empty update",
    );
    assert_eq!(
        ok(store.get_run(&r1).await, "get")
            .expect("run exists")
            .cost,
        Some(0.25)
    );
    let mut record = run_record("s1", "r2", RunStatus::Completed);
    record.cost = Some(1.5);
    ok(store.create_run(record).await, "create with cost");
    assert_eq!(
        ok(store.get_run(&RunRef::new("s1", "r2")).await, "get")
            .expect("run exists")
            .cost,
        Some(1.5)
    );
}

/// 195: denials start empty; an update with a list writes it; one without leaves it.
pub async fn denials_default_and_update(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    run(store, "s1", "r1", RunStatus::Running).await;
    let r1 = RunRef::new("s1", "r1");
    let read = ok(store.get_run(&r1).await, "get").expect("run exists");
    assert!(read.denials.is_empty());
    let json = serde_json::to_value(&read).expect("serializes");
    assert_eq!(json.get("denials"), Some(&json!([])));
    let mut update = RunUpdate::new(r1.clone());
    update.denials = Some(vec![denial("c1"), denial("c2")]);
    ok(store.update_run(update).await, "update denials");
    ok(
        store.update_run(RunUpdate::new(r1.clone())).await,
        "update without denials",
    );
    assert_eq!(
        ok(store.get_run(&r1).await, "get")
            .expect("run exists")
            .denials,
        vec![denial("c1"), denial("c2")]
    );
}

/// 196: newest first, filtered by status.
pub async fn list_runs_order_and_filter(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    run(store, "s1", "r1", RunStatus::Completed).await;
    run(store, "s1", "r2", RunStatus::Failed).await;
    run(store, "s1", "r3", RunStatus::Completed).await;
    let all: Vec<String> = ok(store.list_runs("s1", None).await, "list")
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    assert_eq!(all, ["r3", "r2", "r1"]);
    let done: Vec<String> = ok(
        store.list_runs("s1", Some(RunStatus::Completed)).await,
        "list",
    )
    .into_iter()
    .map(|r| r.run_id)
    .collect();
    assert_eq!(done, ["r3", "r1"]);
    assert!(
        ok(
            store.list_runs("s1", Some(RunStatus::Awaiting)).await,
            "list"
        )
        .is_empty()
    );
    expect_code(
        store.list_runs("nope", None).await,
        ErrorCode::NotFound,
        "unknown session",
    );
}

pub(crate) fn model_step(run: &RunRef, index: u32, invocation_id: &str) -> StepRecord {
    StepRecord::Model(ModelStep {
        session_id: run.session_id.clone(),
        run_id: run.run_id.clone(),
        index,
        invocation_id: invocation_id.to_owned(),
        status: StepStatus::Started,
        request: Some(json!({ "messages": [] })),
        reply: None,
        detail: None,
        started_at: Timestamp::now(),
        ended_at: None,
    })
}

pub(crate) fn tool_step(run: &RunRef, index: u32, invocation_id: &str) -> StepRecord {
    StepRecord::Tool(ToolStep {
        session_id: run.session_id.clone(),
        run_id: run.run_id.clone(),
        index,
        invocation_id: invocation_id.to_owned(),
        call_id: format!("call-{invocation_id}"),
        name: "echo".into(),
        input: json!({ "text": "hi" }),
        status: StepStatus::Started,
        original: None,
        transformed: None,
        detail: None,
        started_at: Timestamp::now(),
        ended_at: None,
    })
}

/// 197: steps append, successive patches merge, unknown invocations are `not_found`.
pub async fn steps_merge(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    run(store, "s1", "r1", RunStatus::Running).await;
    let r1 = RunRef::new("s1", "r1");
    ok(
        store.append_step(&model_step(&r1, 0, "i1")).await,
        "append model step",
    );
    ok(
        store.append_step(&tool_step(&r1, 1, "i2")).await,
        "append tool step",
    );
    let patch = StepPatch {
        reply: Some(json!({ "finish": "stop" })),
        ..StepPatch::default()
    };
    ok(store.update_step(&r1, "i1", &patch).await, "first patch");
    let ended = Timestamp::now();
    let patch = StepPatch {
        status: Some(StepStatus::Completed),
        ended_at: Some(ended.clone()),
        ..StepPatch::default()
    };
    let merged = ok(store.update_step(&r1, "i1", &patch).await, "second patch");
    let StepRecord::Model(step) = &merged else {
        panic!("a model step stays a model step: {merged:?}")
    };
    assert_eq!(
        step.reply,
        Some(json!({ "finish": "stop" })),
        "the first patch stays"
    );
    assert_eq!(step.status, StepStatus::Completed);
    assert_eq!(step.ended_at, Some(ended));
    assert_eq!(step.request, Some(json!({ "messages": [] })));
    let steps = ok(store.list_steps(&r1).await, "list_steps");
    assert_eq!(steps.len(), 2);
    assert_eq!(steps[0], merged);
    assert_eq!(steps[1].invocation_id(), "i2");
    expect_code(
        store.update_step(&r1, "nope", &patch).await,
        ErrorCode::NotFound,
        "unknown invocation",
    );
    let again = fixture.reopen();
    assert_eq!(ok(again.list_steps(&r1).await, "list_steps again"), steps);
}

/// 203: requests live under their run.
pub async fn requests_under_their_run(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    run(store, "s1", "r1", RunStatus::Awaiting).await;
    run(store, "s1", "r2", RunStatus::Running).await;
    let (r1, r2) = (RunRef::new("s1", "r1"), RunRef::new("s1", "r2"));
    let request = PendingRequest {
        request_id: "q1".into(),
        session_id: "s1".into(),
        run_id: "r1".into(),
        kind: RequestKind::Approval,
        call_id: Some("c1".into()),
        payload: json!({ "input": { "command": "ls" } }),
        created_at: Timestamp::now(),
        resolved_at: None,
        resolution: None,
    };
    ok(store.create_request(&request).await, "create_request");
    assert_eq!(
        ok(store.get_request(&r1, "q1").await, "get"),
        Some(request.clone())
    );
    assert_eq!(
        ok(store.get_request(&r2, "q1").await, "get under another run"),
        None
    );
    assert_eq!(
        ok(
            store.get_request(&RunRef::new("s2", "r1"), "q1").await,
            "get under another session"
        ),
        None
    );
    expect_code(
        store.resolve_request(&r2, "q1", json!("approve")).await,
        ErrorCode::NotFound,
        "resolve elsewhere",
    );
    expect_code(
        store.resolve_request(&r1, "q9", json!("approve")).await,
        ErrorCode::NotFound,
        "unknown request",
    );
    let resolved = ok(
        store
            .resolve_request(&r1, "q1", json!({ "decision": "approve" }))
            .await,
        "resolve",
    );
    assert_eq!(resolved.resolution, Some(json!({ "decision": "approve" })));
    let read = ok(store.get_request(&r1, "q1").await, "get").expect("request exists");
    assert_eq!(read.resolution, Some(json!({ "decision": "approve" })));
    assert!(read.resolved_at.is_some(), "resolvedAt is stored");
}
