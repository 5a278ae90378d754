//! Conformance checks for rewind, fork and session usage (runtime cases 199-202, 207, docs/acceptance.md).

use serde_json::json;

use crate::error::ErrorCode;
use crate::event::{RequestKind, RunStatus};
use crate::id::Timestamp;
use crate::model::Usage;
use crate::store::{
    PendingRequest, RunRef, RunUpdate, SessionQuery, Store, TruncationResult, session_usage,
};

use super::runs::{model_step, tool_step};
use super::{
    AGENT, StoreFixture, denial, event, expect_code, ids, ok, run_record, session, write_as,
};

async fn request(store: &dyn Store, run: &RunRef, request_id: &str) {
    let request = PendingRequest {
        request_id: request_id.to_owned(),
        session_id: run.session_id.clone(),
        run_id: run.run_id.clone(),
        kind: RequestKind::Approval,
        call_id: None,
        payload: json!({}),
        created_at: Timestamp::now(),
        resolved_at: None,
        resolution: None,
    };
    ok(store.create_request(&request).await, "create_request");
}

/// Builds the seeded session of the spec: m1..m5; r1 over m1-m2 completed with events and a
/// request; r2 over m3-m4 completed with a step; r3 over m5 completed with a request; r4 running
/// over m1-m2 (not holding the claim).
pub async fn seed_session(store: &dyn Store, session_id: &str) {
    session(store, session_id, Some("/home/u/proj")).await;
    let over = |run_id: &str, input: &str, status: RunStatus| {
        let mut record = run_record(session_id, run_id, status);
        record.input_message_id = Some(input.to_owned());
        record.usage = Usage {
            input_tokens: 10,
            output_tokens: 2,
            ..crate::usage::ZERO_USAGE
        };
        record.steps = 1;
        record
    };
    ok(
        store
            .create_run(over("r1", "m1", RunStatus::Completed))
            .await,
        "create r1",
    );
    ok(
        store
            .create_run(over("r2", "m3", RunStatus::Completed))
            .await,
        "create r2",
    );
    ok(
        store
            .create_run(over("r3", "m5", RunStatus::Completed))
            .await,
        "create r3",
    );
    write_as(store, session_id, "r1", &["m1", "m2"]).await;
    write_as(store, session_id, "r2", &["m3", "m4"]).await;
    write_as(store, session_id, "r3", &["m5"]).await;
    let mut r4 = over("r4", "m1", RunStatus::Running);
    r4.last_message_id = Some("m2".into());
    ok(store.create_run(r4).await, "create r4");
    let r1 = RunRef::new(session_id, "r1");
    ok(store.append_event(&event(&r1, 1)).await, "event 1");
    ok(store.append_event(&event(&r1, 2)).await, "event 2");
    request(store, &r1, "q1").await;
    ok(
        store
            .append_step(&model_step(&RunRef::new(session_id, "r2"), 0, "i1"))
            .await,
        "r2 step",
    );
    request(store, &RunRef::new(session_id, "r3"), "q3").await;
    ok(
        store
            .append_event(&event(&RunRef::new(session_id, "r4"), 1))
            .await,
        "r4 event",
    );
}

/// 199: rewinding the seeded session through m4.
pub async fn truncate_seeded_session(fixture: &StoreFixture) {
    let store = fixture.store();
    seed_session(store, "s1").await;
    let before = ok(store.get_session("s1").await, "get")
        .expect("session exists")
        .updated_at;
    let result = ok(store.truncate("s1", "m4").await, "truncate");
    assert_eq!(
        result,
        TruncationResult {
            remaining_messages: 4,
            removed_messages: 1,
            removed_runs: 2
        }
    );
    assert_eq!(
        ids(&ok(store.list_messages("s1", None).await, "list")),
        ["m1", "m2", "m3", "m4"]
    );
    let (r1, r2) = (RunRef::new("s1", "r1"), RunRef::new("s1", "r2"));
    let kept = ok(store.get_run(&r1).await, "get r1").expect("r1 stays");
    assert_eq!(kept.usage.input_tokens, 10);
    assert_eq!(ok(store.list_events(&r1, None).await, "r1 events").len(), 2);
    assert!(ok(store.get_request(&r1, "q1").await, "r1 request").is_some());
    assert_eq!(ok(store.list_steps(&r2).await, "r2 steps").len(), 1);
    for gone in ["r3", "r4"] {
        let run = RunRef::new("s1", gone);
        assert_eq!(
            ok(store.get_run(&run).await, "get"),
            None,
            "{gone} is removed"
        );
        expect_code(
            store.list_events(&run, None).await,
            ErrorCode::NotFound,
            "events of a removed run",
        );
        expect_code(
            store.list_steps(&run).await,
            ErrorCode::NotFound,
            "steps of a removed run",
        );
    }
    assert_eq!(
        ok(
            store.get_request(&RunRef::new("s1", "r3"), "q3").await,
            "r3 request"
        ),
        None
    );
    let after = ok(store.get_session("s1").await, "get")
        .expect("session exists")
        .updated_at;
    assert!(after >= before, "updatedAt does not go back");
    let again = fixture.reopen();
    assert_eq!(
        ids(&ok(again.list_messages("s1", None).await, "list again")),
        ["m1", "m2", "m3", "m4"]
    );
}

/// 200: rewind refusals and the paused holder.
pub async fn truncate_refusals(fixture: &StoreFixture) {
    let store = fixture.store();
    expect_code(
        store.truncate("nope", "m1").await,
        ErrorCode::NotFound,
        "unknown session",
    );
    session(store, "s1", None).await;
    ok(
        store
            .create_run(run_record("s1", "r1", RunStatus::Running))
            .await,
        "create r1",
    );
    write_as(store, "s1", "r1", &["m1", "m2"]).await;
    assert!(ok(store.claim_writer("s1", "r1").await, "claim"));
    expect_code(
        store.truncate("s1", "m1").await,
        ErrorCode::WriterBusy,
        "running holder",
    );
    expect_code(
        store.truncate("s1", "nope").await,
        ErrorCode::WriterBusy,
        "running holder, unknown message",
    );
    let mut update = RunUpdate::new(RunRef::new("s1", "r1"));
    update.status = Some(RunStatus::Awaiting);
    ok(store.update_run(update).await, "pause");
    expect_code(
        store.truncate("s1", "nope").await,
        ErrorCode::NotFound,
        "paused holder, unknown message",
    );
    let result = ok(
        store.truncate("s1", "m1").await,
        "cut past the paused holder",
    );
    assert_eq!(result.removed_runs, 1);
    let record = ok(store.get_session("s1").await, "get").expect("session exists");
    assert_eq!(
        record.active_writer_run_id, None,
        "the dropped holder's claim is cleared"
    );
    assert!(ok(store.claim_writer("s1", "r2").await, "a new run claims"));
}

/// 201: forking the seeded session through m4.
pub async fn fork_seeded_session(fixture: &StoreFixture) {
    let store = fixture.store();
    seed_session(store, "s1").await;
    let source_messages = ok(store.list_messages("s1", None).await, "list");
    let source_runs = ok(store.list_runs("s1", None).await, "runs");
    let forked = ok(store.fork("s1", "m4", "s2").await, "fork");
    assert_eq!(forked.session_id, "s2");
    assert_eq!(forked.agent_id, AGENT);
    assert_eq!(forked.workspace.as_deref(), Some("/home/u/proj"));
    assert_eq!(
        ids(&ok(store.list_messages("s2", None).await, "list")),
        ["m1", "m2", "m3", "m4"]
    );
    let mut runs: Vec<String> = ok(store.list_runs("s2", None).await, "runs")
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    runs.sort();
    assert_eq!(runs, ["r1", "r2"]);
    let (r1, r2) = (RunRef::new("s2", "r1"), RunRef::new("s2", "r2"));
    assert_eq!(
        ok(store.get_run(&r1).await, "get")
            .expect("r1 copied")
            .session_id,
        "s2"
    );
    let events = ok(store.list_events(&r1, None).await, "events");
    assert_eq!(events.len(), 2);
    assert!(
        events.iter().all(|event| event.session_id == "s2"),
        "events are re-keyed"
    );
    let steps = ok(store.list_steps(&r2).await, "steps");
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].run_ref(), r2, "steps are re-keyed");
    assert_eq!(
        ok(store.get_request(&r1, "q1").await, "request"),
        None,
        "requests are not copied"
    );
    assert_eq!(
        ok(
            store.list_runs("s2", Some(RunStatus::Running)).await,
            "running"
        )
        .len(),
        0
    );
    assert_eq!(
        ok(store.list_messages("s1", None).await, "source"),
        source_messages
    );
    assert_eq!(
        ok(store.list_runs("s1", None).await, "source runs"),
        source_runs
    );
    assert!(
        ok(
            store.get_request(&RunRef::new("s1", "r1"), "q1").await,
            "source request"
        )
        .is_some()
    );
}

/// 202: fork refusals create nothing.
pub async fn fork_refusals(fixture: &StoreFixture) {
    let store = fixture.store();
    seed_session(store, "s1").await;
    session(store, "taken", None).await;
    expect_code(
        store.fork("s1", "m4", "taken").await,
        ErrorCode::AlreadyExists,
        "taken id",
    );
    expect_code(
        store.fork("nope", "m4", "s3").await,
        ErrorCode::NotFound,
        "missing source",
    );
    expect_code(
        store.fork("s1", "nope", "s3").await,
        ErrorCode::NotFound,
        "missing message",
    );
    assert!(ok(
        store.claim_writer("s1", "r4").await,
        "running holder claims"
    ));
    expect_code(
        store.fork("s1", "m4", "s3").await,
        ErrorCode::WriterBusy,
        "running holder",
    );
    assert_eq!(
        ok(store.get_session("s3").await, "get"),
        None,
        "nothing created"
    );
    let all = ok(store.list_sessions(SessionQuery::default()).await, "list");
    assert_eq!(all.len(), 2);
    assert_eq!(
        ok(store.list_messages("taken", None).await, "taken").len(),
        0
    );
}

/// 207: per-run usage rows, oldest first, and their totals.
pub async fn session_usage_rows(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    let mut first = run_record("s1", "r1", RunStatus::Completed);
    first.usage = Usage {
        input_tokens: 10,
        output_tokens: 1,
        cache_read_tokens: Some(4),
        ..crate::usage::ZERO_USAGE
    };
    first.steps = 2;
    first.denials = vec![denial("c1")];
    ok(store.create_run(first).await, "create r1");
    let mut second = run_record("s1", "r2", RunStatus::Failed);
    second.usage = Usage {
        input_tokens: 5,
        output_tokens: 3,
        ..crate::usage::ZERO_USAGE
    };
    second.steps = 1;
    ok(store.create_run(second).await, "create r2");
    let r1 = RunRef::new("s1", "r1");
    ok(
        store.append_step(&model_step(&r1, 0, "i1")).await,
        "model step",
    );
    ok(
        store.append_step(&tool_step(&r1, 1, "i2")).await,
        "tool step",
    );
    ok(
        store.append_step(&tool_step(&r1, 2, "i3")).await,
        "tool step",
    );
    let usage = ok(session_usage(store, "s1").await, "session_usage");
    let rows: Vec<(&str, u32, u32, u32)> = usage
        .runs
        .iter()
        .map(|row| (row.run_id.as_str(), row.steps, row.tool_calls, row.denials))
        .collect();
    assert_eq!(rows, [("r1", 2, 2, 1), ("r2", 1, 0, 0)]);
    assert_eq!(usage.usage.input_tokens, 15);
    assert_eq!(usage.usage.output_tokens, 4);
    assert_eq!(usage.usage.cache_read_tokens, Some(4));
    assert_eq!((usage.steps, usage.tool_calls, usage.denials), (3, 2, 1));
    expect_code(
        session_usage(store, "nope").await,
        ErrorCode::NotFound,
        "unknown session",
    );
}
