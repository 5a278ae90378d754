//! Interrupts (runtime cases, section E of docs/acceptance.md): cancel and timeout leave a transcript a model can read.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;

use super::run_support::*;
use cofold_agents::event::{OutcomeKind, StopReason};
use cofold_agents::hooks::{AfterTool, HookError, Hooks, RunInfo};
use cofold_agents::message::ToolCall;
use cofold_agents::run::{INTERRUPT_MARKER, INTERRUPT_TOOL_TEXT, RunOptions, run};
use cofold_agents::store::{RunRef, StepRecord, StepStatus, Store};
use cofold_agents::testing::{FakeCall, FakeModel, FakeStep};
use cofold_agents::tool::{AbortController, AbortReason, Tool};

fn two_hanging_calls() -> FakeStep {
    FakeStep::tool_calls(vec![
        FakeCall::new("hang", json!({})),
        FakeCall::new("hang", json!({})),
    ])
}

#[tokio::test]
async fn a_cancel_during_the_first_of_two_calls_answers_both_and_writes_the_marker() {
    let model = FakeModel::new(vec![
        two_hanging_calls(),
        FakeStep::text("never"),
        FakeStep::text("next turn"),
    ]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(hang_tool("hang", Arc::default()))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    next_of(&handle, "tool.started", 0).await;
    handle.cancel(Some("stop".into()));
    let outcome = handle.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Cancelled { reason } if reason.as_deref() == Some("stop"))
    );
    assert_eq!(outcome.steps, 1);
    let events = types(&all_events(&handle).await);
    assert_eq!(
        &events[events.len() - 2..],
        ["tool.started", "run.finished"]
    );
    let messages = store.list_messages("s", None).await.expect("messages");
    assert_eq!(
        shape(&messages),
        pairs(&[
            ("user", "input"),
            ("assistant", "model"),
            ("tool", "tool"),
            ("tool", "tool"),
            ("user", "system")
        ])
    );
    assert_eq!(
        result_of(&messages[2]),
        (INTERRUPT_TOOL_TEXT.to_owned(), true)
    );
    assert_eq!(
        result_of(&messages[3]),
        (INTERRUPT_TOOL_TEXT.to_owned(), true)
    );
    assert_eq!(text(&messages[4]), INTERRUPT_MARKER);
    let steps = store
        .list_steps(&RunRef::new("s", handle.run_id()))
        .await
        .expect("steps");
    assert!(
        matches!(&steps[..], [StepRecord::Model(m), StepRecord::Tool(t)] if m.status == StepStatus::Completed && t.status == StepStatus::Uncertain)
    );
    assert_eq!(
        model.remaining(),
        2,
        "the second script step was never used"
    );

    // The next run's request holds every result and the marker before the new input.
    let next = run(&agent, RunOptions::new("s", "again"));
    next.outcome().await;
    let request = model.requests().last().cloned().expect("request");
    let n = request.messages.len();
    assert_eq!(text(&request.messages[n - 2]), INTERRUPT_MARKER);
    assert_eq!(text(&request.messages[n - 1]), "again");
    assert_eq!(result_of(&request.messages[n - 3]).0, INTERRUPT_TOOL_TEXT);
}

struct CancelAfter(Arc<Mutex<Option<cofold_agents::run::RunHandle>>>);
#[async_trait]
impl Hooks for CancelAfter {
    async fn after_tool(
        &self,
        _c: &ToolCall,
        _t: &Tool,
        output: String,
        _e: bool,
        _r: &RunInfo,
    ) -> Result<AfterTool, HookError> {
        if let Some(handle) = self.0.lock().expect("slot").clone() {
            handle.cancel(Some("from hook".into()));
        }
        Ok(AfterTool::keep(output))
    }
}

#[tokio::test]
async fn a_cancel_from_after_tool_keeps_the_result_and_writes_only_the_marker() {
    let model = FakeModel::new(vec![echo_call("a"), FakeStep::text("never")]);
    let store = memory();
    let slot = Arc::new(Mutex::new(None));
    let agent = builder(&model, store.clone())
        .tool(echo_tool())
        .hooks(Arc::new(CancelAfter(slot.clone())))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    *slot.lock().expect("slot") = Some(handle.clone());
    let outcome = handle.outcome().await;
    assert!(matches!(outcome.kind, OutcomeKind::Cancelled { .. }));
    let messages = store.list_messages("s", None).await.expect("messages");
    assert_eq!(
        shape(&messages),
        pairs(&[
            ("user", "input"),
            ("assistant", "model"),
            ("tool", "tool"),
            ("user", "system")
        ])
    );
    assert_eq!(result_of(&messages[2]), ("echo:a".to_owned(), false));
    assert_eq!(model.requests().len(), 1, "no further model call");
}

#[tokio::test(start_paused = true)]
async fn a_timeout_during_two_calls_stops_with_the_same_texts() {
    let model = FakeModel::new(vec![two_hanging_calls()]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(hang_tool("hang", Arc::default()))
        .limits(cofold_agents::agent::PartialLimits {
            timeout_ms: Some(20),
            ..Default::default()
        })
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let outcome = handle.outcome().await;
    assert!(matches!(
        outcome.kind,
        OutcomeKind::Stopped {
            reason: StopReason::Timeout
        }
    ));
    let messages = store.list_messages("s", None).await.expect("messages");
    assert_eq!(result_of(&messages[2]).0, INTERRUPT_TOOL_TEXT);
    assert_eq!(result_of(&messages[3]).0, INTERRUPT_TOOL_TEXT);
    assert_eq!(text(&messages[4]), INTERRUPT_MARKER);
}

#[tokio::test]
async fn a_signal_already_fired_writes_the_marker_without_calling_the_model() {
    let model = FakeModel::new(vec![FakeStep::text("never")]);
    let store = memory();
    let controller = AbortController::new();
    controller.abort(AbortReason::Cancel { reason: None });
    let mut opts = RunOptions::new("s", "x");
    opts.signal = Some(controller.signal());
    let handle = run(&echo_agent(&model, store.clone()), opts);
    assert_eq!(
        types(&all_events(&handle).await),
        ["run.started", "run.finished"]
    );
    assert!(
        matches!(&handle.outcome().await.kind, OutcomeKind::Cancelled { reason } if reason.as_deref() == Some("signal"))
    );
    assert!(model.requests().is_empty());
    let messages = store.list_messages("s", None).await.expect("messages");
    assert_eq!(text(&messages[1]), INTERRUPT_MARKER);
}

#[tokio::test]
async fn a_cancel_while_the_model_is_in_flight_fails_the_step_and_writes_the_marker() {
    let model = FakeModel::new(vec![FakeStep::block()]);
    let store = memory();
    let handle = run(
        &echo_agent(&model, store.clone()),
        RunOptions::new("s", "x"),
    );
    next_of(&handle, "model.started", 0).await;
    handle.cancel(None);
    handle.outcome().await;
    assert_eq!(
        types(&all_events(&handle).await),
        ["run.started", "model.started", "run.finished"]
    );
    let steps = store
        .list_steps(&RunRef::new("s", handle.run_id()))
        .await
        .expect("steps");
    assert!(matches!(&steps[0], StepRecord::Model(m) if m.status == StepStatus::Failed));
    let messages = store.list_messages("s", None).await.expect("messages");
    assert_eq!(
        shape(&messages),
        pairs(&[("user", "input"), ("user", "system")])
    );
}
