//! Runs whose process is gone are settled at once; live runs are never taken over; and a
//! conversation with an unanswered call never reaches a model as it is.

use std::sync::Arc;

use serde_json::json;

use super::pause_support::*;
use super::run_support::*;
use cofold_agents::error::ErrorCode;
use cofold_agents::event::OutcomeKind;
use cofold_agents::id::Timestamp;
use cofold_agents::message::{Message, MessageSource, Part, Role, ToolCall};
use cofold_agents::pairing::{
    MISSING_RESULT_TEXT, NOT_RUN_TEXT, OUTCOME_UNKNOWN_TEXT, is_well_paired,
};
use cofold_agents::run::{RunOptions, run, settle_dead_runs};
use cofold_agents::store::{
    MemoryStore, RunRecord, RunRef, RunStatus, StepRecord, StepStatus, Store, ToolStep,
};
use cofold_agents::testing::{FakeModel, FakeStep};
use cofold_agents::usage::ZERO_USAGE;

fn record(run_id: &str, status: RunStatus, input: &str) -> RunRecord {
    let now = Timestamp::now();
    RunRecord {
        run_id: run_id.into(),
        session_id: "s".into(),
        agent_id: "a".into(),
        model: None,
        status,
        created_at: now.clone(),
        updated_at: now,
        pending_request_id: None,
        usage: ZERO_USAGE,
        cost: None,
        steps: 1,
        denials: Vec::new(),
        input_message_id: Some(input.into()),
        last_message_id: None,
    }
}

fn two_calls() -> Message {
    Message::new(
        Role::Assistant,
        MessageSource::Model,
        vec![
            Part::ToolCall(ToolCall::from_input("c1", "echo", json!({ "text": "one" }))),
            Part::ToolCall(ToolCall::from_input("c2", "echo", json!({ "text": "two" }))),
        ],
    )
    .with_id("calls")
}

/// Opens session `s` with run `run_id` (input `in`) in `status`, holding the session's claim.
async fn claimed_run(store: &MemoryStore, run_id: &str, status: RunStatus) {
    open_session(store).await;
    store
        .create_run(record(run_id, status, "in"))
        .await
        .expect("run");
    assert!(store.claim_writer("s", run_id).await.expect("claim"));
}

/// What a daemon killed during the first of two calls leaves: the record `running`, the claim
/// held, the calls unanswered, the first call's step `started`. No task of this process runs it.
async fn killed_during_a_call(store: &MemoryStore) {
    claimed_run(store, "dead", RunStatus::Running).await;
    let input = Message::user_text("do two things").with_id("in");
    store
        .append_messages("s", "dead", &[input, two_calls()])
        .await
        .expect("append");
    let step = StepRecord::Tool(ToolStep {
        session_id: "s".into(),
        run_id: "dead".into(),
        index: 1,
        invocation_id: "inv1".into(),
        call_id: "c1".into(),
        name: "echo".into(),
        input: json!({ "text": "one" }),
        status: StepStatus::Started,
        original: None,
        transformed: None,
        detail: None,
        started_at: Timestamp::now(),
        ended_at: None,
    });
    store.append_step(&step).await.expect("step");
}

#[tokio::test]
async fn a_dead_claim_is_settled_at_once_and_the_next_turn_runs() {
    let store = memory();
    killed_during_a_call(&store).await;
    let model = FakeModel::new(vec![FakeStep::text("fine")]);
    let agent = echo_agent(&model, store.clone());
    let next = run(&agent, RunOptions::new("s", "next"));
    assert_eq!(next.outcome().await.status(), RunStatus::Completed);

    // The dead run: interrupted, its calls answered right after them, its step closed.
    let dead = store
        .list_events(&RunRef::new("s", "dead"), None)
        .await
        .expect("events");
    let finished = dead
        .last()
        .and_then(|e| e.finished_outcome())
        .expect("run.finished");
    assert!(
        matches!(&finished.kind, OutcomeKind::Failed { error } if error.code == ErrorCode::Interrupted),
        "{finished:?}"
    );
    let record = store
        .get_run(&RunRef::new("s", "dead"))
        .await
        .expect("get")
        .expect("record");
    assert_eq!(record.status, RunStatus::Failed);
    let messages = store.list_messages("s", None).await.expect("messages");
    assert!(is_well_paired(&messages));
    assert_eq!(result_of(&messages[2]).0, OUTCOME_UNKNOWN_TEXT);
    assert_eq!(result_of(&messages[3]).0, NOT_RUN_TEXT);
    assert_eq!(text(&messages[4]), "next");
    let steps = store
        .list_steps(&RunRef::new("s", "dead"))
        .await
        .expect("steps");
    assert!(matches!(&steps[0], StepRecord::Tool(t) if t.status == StepStatus::Uncertain));
    let request = model.requests().pop().expect("request");
    assert!(is_well_paired(&request.messages));
}

#[tokio::test]
async fn a_store_that_hands_a_dead_claim_over_still_gets_the_dead_run_settled() {
    // The file store gives a killed process's claim to the next claimant at once; the run that
    // held it must not be left `running` with its calls unanswered.
    let memory = memory();
    killed_during_a_call(&memory).await;
    let store = FaultStore::over(memory.clone());
    store.declare_dead("dead");
    let model = FakeModel::new(vec![FakeStep::text("fine")]);
    let agent = echo_agent(&model, store.clone());
    let next = run(&agent, RunOptions::new("s", "next"));
    assert_eq!(next.outcome().await.status(), RunStatus::Completed);
    let record = memory
        .get_run(&RunRef::new("s", "dead"))
        .await
        .expect("get")
        .expect("record");
    assert_eq!(record.status, RunStatus::Failed);
    let messages = memory.list_messages("s", None).await.expect("messages");
    assert_eq!(result_of(&messages[2]).0, OUTCOME_UNKNOWN_TEXT);
    assert_eq!(result_of(&messages[3]).0, NOT_RUN_TEXT);
    assert_eq!(text(&messages[4]), "next");
    assert!(is_well_paired(&messages));
}

#[tokio::test]
async fn settling_a_session_on_open_answers_the_dead_run_once() {
    let store = memory();
    killed_during_a_call(&store).await;
    let model = FakeModel::new(Vec::new());
    let agent = echo_agent(&model, store.clone());
    let settled = settle_dead_runs(&agent, "s").await.expect("settle");
    assert!(matches!(
        settled.map(|o| o.kind),
        Some(OutcomeKind::Failed { error }) if error.code == ErrorCode::Interrupted
    ));
    assert_eq!(settle_dead_runs(&agent, "s").await.expect("again"), None);
    let messages = store.list_messages("s", None).await.expect("messages");
    assert_eq!(messages.len(), 4, "each open call answered once");
    let session = store.get_session("s").await.expect("get").expect("session");
    assert_eq!(session.active_writer_run_id, None);
    assert_eq!(model.requests().len(), 0);
}

#[tokio::test]
async fn a_live_claim_is_never_taken_over() {
    let model = FakeModel::new(vec![echo_call_of("hang")]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(hang_tool("hang", Arc::default()))
        .build()
        .expect("agent");
    let live = run(&agent, RunOptions::new("s", "x"));
    next_of(&live, "tool.started", 0).await;

    let newcomer = run(&agent, RunOptions::new("s", "y"));
    let outcome = newcomer.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Failed { error } if error.code == ErrorCode::WriterBusy),
        "{outcome:?}"
    );
    assert_eq!(settle_dead_runs(&agent, "s").await.expect("settle"), None);
    let same_id = reopen(&agent, live.run_id(), None);
    assert!(matches!(
        &same_id.outcome().await.kind,
        OutcomeKind::Failed { error } if error.code == ErrorCode::WriterBusy
    ));
    assert_eq!(live.status(), RunStatus::Running);
    let session = store.get_session("s").await.expect("get").expect("session");
    assert_eq!(session.active_writer_run_id.as_deref(), Some(live.run_id()));

    live.cancel(None);
    assert!(matches!(
        live.outcome().await.kind,
        OutcomeKind::Cancelled { .. }
    ));
    let messages = store.list_messages("s", None).await.expect("messages");
    assert!(is_well_paired(&messages));
}

fn echo_call_of(name: &str) -> FakeStep {
    FakeStep::tool_call(name, json!({}))
}

#[tokio::test]
async fn a_request_never_carries_a_call_without_its_result() {
    // A transcript damaged before this guard existed: a call left unanswered, then a new turn.
    let store = memory();
    claimed_run(&store, "old", RunStatus::Failed).await;
    let messages = [
        Message::user_text("first").with_id("in"),
        two_calls(),
        Message::user_text("second").with_id("later"),
    ];
    store
        .append_messages("s", "old", &messages)
        .await
        .expect("append");
    store.release_writer("s", "old").await.expect("release");

    let model = FakeModel::new(vec![FakeStep::text("ok")]);
    let agent = echo_agent(&model, store.clone());
    let handle = run(&agent, RunOptions::new("s", "third"));
    assert_eq!(handle.outcome().await.status(), RunStatus::Completed);
    let request = model.requests().pop().expect("request");
    assert!(is_well_paired(&request.messages));
    let ids: Vec<&str> = request.messages.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids[0..2], ["in", "calls"]);
    assert_eq!(result_of(&request.messages[2]).0, MISSING_RESULT_TEXT);
    assert_eq!(result_of(&request.messages[3]).0, MISSING_RESULT_TEXT);
    assert_eq!(ids[4..], ["later", handle_input(&request.messages)]);
    // The store is not rewritten by the guard.
    assert_eq!(store.list_messages("s", None).await.expect("m").len(), 5);
}

fn handle_input(messages: &[Message]) -> &str {
    messages.last().map_or("", |m| m.id.as_str())
}
