//! Limits and cost: step and tool-call limits, cost in
//! micro-dollars and its limit, and what a paused, dead or compacting run carries.

use std::sync::Arc;

use serde_json::json;

use super::run_support::*;
use cofold_agents::agent::{Limits, PartialLimits};
use cofold_agents::event::{Command, EventBody, OutcomeKind, RunStatus, StopReason};
use cofold_agents::model::{ModelPricing, Usage};
use cofold_agents::policy::DenialBy;
use cofold_agents::run::{CompactOptions, ResumeOptions, RunOptions, compact, resume, run};
use cofold_agents::store::{RunRef, Store};
use cofold_agents::testing::{FakeCall, FakeModel, FakeOptions, FakeStep};

fn priced(script: Vec<FakeStep>) -> FakeModel {
    FakeModel::with_options(FakeOptions {
        script,
        pricing: Some(ModelPricing::usd(1.0, 2.0)),
        ..FakeOptions::default()
    })
}

#[tokio::test]
async fn max_steps_stops_after_the_results_are_appended() {
    let model = FakeModel::new(vec![echo_call("a"), FakeStep::text("never")]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(echo_tool())
        .limits(PartialLimits {
            max_steps: Some(1),
            ..Default::default()
        })
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let outcome = handle.outcome().await;
    assert!(matches!(
        outcome.kind,
        OutcomeKind::Stopped {
            reason: StopReason::MaxSteps
        }
    ));
    assert_eq!(outcome.steps, 1);
    let messages = store.list_messages("s", None).await.expect("m");
    assert_eq!(
        shape(&messages),
        pairs(&[("user", "input"), ("assistant", "model"), ("tool", "tool")])
    );
    let record = store
        .get_run(&RunRef::new("s", handle.run_id()))
        .await
        .expect("g")
        .expect("r");
    assert_eq!(record.status, RunStatus::Stopped);
}

#[tokio::test]
async fn max_tool_calls_refuses_the_rest_of_the_batch() {
    let calls = vec![
        FakeCall::new("echo", json!({ "text": "1" })),
        FakeCall::new("echo", json!({ "text": "2" })),
    ];
    let model = FakeModel::new(vec![FakeStep::tool_calls(calls), FakeStep::text("never")]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(echo_tool())
        .limits(PartialLimits {
            max_tool_calls: Some(1),
            ..Default::default()
        })
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let events = all_events(&handle).await;
    assert_eq!(
        &types(&events)[events.len() - 2..],
        ["tool.denied", "run.finished"]
    );
    assert!(
        matches!(&events[events.len() - 2].body, EventBody::ToolDenied { reason, .. } if reason == "max_tool_calls")
    );
    assert_eq!(
        types(&events)
            .iter()
            .filter(|t| **t == "tool.started")
            .count(),
        1
    );
    let outcome = handle.outcome().await;
    assert!(matches!(
        outcome.kind,
        OutcomeKind::Stopped {
            reason: StopReason::MaxToolCalls
        }
    ));
    let messages = store.list_messages("s", None).await.expect("m");
    assert_eq!(
        result_of(&messages[3]),
        ("Tool call limit reached".to_owned(), true)
    );

    // Item 27: an unknown call does not count.
    let calls = vec![
        FakeCall::new("nope", json!({})),
        FakeCall::new("echo", json!({ "text": "1" })),
    ];
    let model = FakeModel::new(vec![FakeStep::tool_calls(calls), FakeStep::text("done")]);
    let agent = builder(&model, memory())
        .tool(echo_tool())
        .limits(PartialLimits {
            max_tool_calls: Some(1),
            ..Default::default()
        })
        .build()
        .expect("agent");
    assert_eq!(
        run(&agent, RunOptions::new("s", "x"))
            .outcome()
            .await
            .status(),
        RunStatus::Completed
    );
}

#[tokio::test]
async fn cost_is_counted_in_micro_dollars_and_written_as_usd() {
    // Item 111.
    assert_eq!(Limits::default().max_cost, 0.0);
    // Item 112.
    let model = priced(vec![echo_call("a"), FakeStep::text("done")]);
    let store = memory();
    let handle = run(
        &echo_agent(&model, store.clone()),
        RunOptions::new("s", "x"),
    );
    let events = all_events(&handle).await;
    let outcome = handle.outcome().await;
    assert_eq!(outcome.cost, Some(0.000006));
    assert_eq!(
        events
            .last()
            .and_then(|e| e.finished_outcome())
            .and_then(|o| o.cost),
        Some(0.000006)
    );
    let record = store
        .get_run(&RunRef::new("s", handle.run_id()))
        .await
        .expect("g")
        .expect("r");
    assert_eq!(record.cost, Some(0.000006));
    // Item 113.
    let model = FakeModel::new(vec![echo_call("a"), FakeStep::text("done")]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(echo_tool())
        .limits(PartialLimits {
            max_cost: Some(0.0000001),
            ..Default::default()
        })
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let outcome = handle.outcome().await;
    assert_eq!(
        outcome.status(),
        RunStatus::Completed,
        "maxCost never trips without pricing"
    );
    assert!(
        serde_json::to_value(&outcome)
            .expect("json")
            .get("cost")
            .is_none()
    );
    let record = store
        .get_run(&RunRef::new("s", handle.run_id()))
        .await
        .expect("g")
        .expect("r");
    assert!(
        serde_json::to_value(&record)
            .expect("json")
            .get("cost")
            .is_none()
    );
}

#[tokio::test]
async fn max_cost_lets_the_crossing_step_and_its_batch_finish() {
    // Item 114.
    let model = priced(vec![
        echo_call("a"),
        echo_call("b"),
        FakeStep::text("never"),
    ]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(echo_tool())
        .limits(PartialLimits {
            max_cost: Some(0.000004),
            ..Default::default()
        })
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let outcome = handle.outcome().await;
    assert!(matches!(
        outcome.kind,
        OutcomeKind::Stopped {
            reason: StopReason::MaxCost
        }
    ));
    assert_eq!(
        (outcome.usage, outcome.steps, outcome.cost),
        (Usage::new(2, 2), 2, Some(0.000006))
    );
    assert!(outcome.denials.is_empty());
    assert_eq!(model.remaining(), 1);
    let messages = store.list_messages("s", None).await.expect("m");
    assert_eq!(
        messages
            .iter()
            .filter(|m| m.role == cofold_agents::message::Role::Tool)
            .count(),
        2
    );
}

#[tokio::test]
async fn a_paused_run_carries_its_cost_and_denials_through_resume() {
    // Items 115 and 123: a refusal before the pause stays on every outcome.
    let calls = vec![
        FakeCall::new("nope", json!({})),
        FakeCall::new("rm", json!({ "path": "p" })),
    ];
    let model = priced(vec![FakeStep::tool_calls(calls), FakeStep::text("done")]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(rm_tool(Arc::default()))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let (request_id, _) = pause(&handle, 0).await;
    let awaiting = next_of(&handle, "run.finished", 0)
        .await
        .finished_outcome()
        .cloned()
        .expect("outcome");
    assert_eq!(awaiting.cost, Some(0.000003));
    assert_eq!(awaiting.denials.len(), 1);
    let record = store
        .get_run(&RunRef::new("s", handle.run_id()))
        .await
        .expect("g")
        .expect("r");
    assert_eq!((record.cost, record.denials.len()), (Some(0.000003), 1));
    assert!(handle.detach());
    let resumed = resume(
        &agent,
        ResumeOptions {
            session_id: "s".into(),
            run_id: handle.run_id().into(),
            after_seq: None,
        },
    );
    resumed
        .submit(Command::Deny {
            request_id,
            reason: Some("not today".into()),
        })
        .await
        .expect("deny");
    let outcome = resumed.outcome().await;
    assert_eq!(outcome.cost, Some(0.000006));
    // Item 121: a person's deny after a resume.
    let reasons: Vec<(String, DenialBy)> = outcome
        .denials
        .iter()
        .map(|d| (d.reason.clone(), d.by))
        .collect();
    assert_eq!(
        reasons,
        [
            ("Unknown tool \"nope\"".to_owned(), DenialBy::Invalid),
            ("not today".to_owned(), DenialBy::User)
        ]
    );
    let record = store
        .get_run(&RunRef::new("s", handle.run_id()))
        .await
        .expect("g")
        .expect("r");
    assert_eq!(record.denials, outcome.denials);
    let later = resume(
        &agent,
        ResumeOptions {
            session_id: "s".into(),
            run_id: handle.run_id().into(),
            after_seq: None,
        },
    );
    assert_eq!(later.outcome().await.denials, outcome.denials);
}

#[tokio::test]
async fn a_run_that_died_is_recounted_from_its_steps() {
    // Item 116: two model steps were written, then the process died (the record says running).
    let model = priced(vec![echo_call("a"), FakeStep::text("done")]);
    let store = memory();
    let agent = echo_agent(&model, store.clone());
    let handle = run(&agent, RunOptions::new("s", "x"));
    handle.outcome().await;
    let run_ref = RunRef::new("s", handle.run_id());
    let mut update = cofold_agents::store::RunUpdate::new(run_ref.clone());
    update.status = Some(RunStatus::Running);
    update.usage = Some(Usage::new(0, 0));
    update.steps = Some(0);
    store.update_run(update).await.expect("pretend it died");
    let other = FaultStore::over(store.clone());
    let agent = echo_agent(&priced(vec![]), other);
    let resumed = resume(
        &agent,
        ResumeOptions {
            session_id: "s".into(),
            run_id: handle.run_id().into(),
            after_seq: Some(99),
        },
    );
    let outcome = resumed.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Failed { error } if error.code == cofold_agents::error::ErrorCode::Interrupted)
    );
    assert_eq!(
        (outcome.steps, outcome.cost, outcome.usage),
        (2, Some(0.000006), Usage::new(2, 2))
    );
}

#[tokio::test]
async fn compact_records_the_summary_steps_cost() {
    // Item 117.
    let model = priced(vec![
        FakeStep::text("hello"),
        FakeStep::text("short summary"),
    ]);
    let agent = echo_agent(&model, memory());
    run(&agent, RunOptions::new("s", "x")).outcome().await;
    let outcome = compact(
        &agent,
        CompactOptions {
            session_id: "s".into(),
            ..Default::default()
        },
    )
    .outcome()
    .await;
    assert_eq!(outcome.cost, Some(0.000003));
}
