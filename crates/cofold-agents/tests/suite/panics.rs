//! Panics and stops reaching every await: a panic in a tool, a hook or the store settles the run
//! `failed` with a sentence, releases the claim and ends the stream; a cancel during a hook and
//! the time limit of a resumed run stop the run like any other.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::pause_support::*;
use super::run_support::*;
use cofold_agents::agent::PartialLimits;
use cofold_agents::error::ErrorCode;
use cofold_agents::event::{ApprovalDecision, EventBody, OutcomeKind, RunOutcome, StopReason};
use cofold_agents::hooks::{BeforeTool, HookError, Hooks, RunInfo};
use cofold_agents::message::{Message, ToolCall};
use cofold_agents::pairing::is_well_paired;
use cofold_agents::run::{
    INTERRUPT_MARKER, INTERRUPT_TOOL_TEXT, ResumeOptions, RunHandle, RunOptions,
    resume_with_signal, run,
};
use cofold_agents::store::{RunRef, RunStatus, StepRecord, StepStatus, Store};
use cofold_agents::testing::{FakeCall, FakeModel, FakeStep};
use cofold_agents::tool::{
    AbortController, AbortReason, Tool, ToolDef, ToolError, ToolOutput, handler_fn,
};

/// `boom`, whose execution panics.
fn boom_tool() -> Tool {
    let def = ToolDef::new(
        "boom",
        "Panics.",
        json!({ "type": "object" }),
        handler_fn(|input: Value, _ctx| async move {
            if input.is_object() {
                panic!("the tool blew up");
            }
            Ok::<_, ToolError>(ToolOutput::from("never"))
        }),
    );
    Tool::new(def).expect("boom tool")
}

fn failed_with(outcome: &RunOutcome) -> (ErrorCode, String) {
    match &outcome.kind {
        OutcomeKind::Failed { error } => (error.code, error.message.clone()),
        other => panic!("not failed: {other:?}"),
    }
}

/// The run's record is `failed`, the claim free, and the transcript one a model can read.
async fn settled_cleanly(store: &dyn Store, run_id: &str) -> Vec<Message> {
    let record = store
        .get_run(&RunRef::new("s", run_id))
        .await
        .expect("get")
        .expect("record");
    assert_eq!(record.status, RunStatus::Failed);
    let session = store.get_session("s").await.expect("get").expect("session");
    assert_eq!(session.active_writer_run_id, None, "the claim is released");
    let messages = store.list_messages("s", None).await.expect("messages");
    assert!(is_well_paired(&messages), "{:?}", shape(&messages));
    messages
}

/// The run failed as internal with a message containing `says`, and was settled cleanly.
async fn panicked(handle: &RunHandle, store: &dyn Store, says: &str) -> Vec<Message> {
    let (code, message) = failed_with(&handle.outcome().await);
    assert_eq!(code, ErrorCode::Internal);
    assert!(message.contains(says), "{message}");
    settled_cleanly(store, handle.run_id()).await
}

#[tokio::test]
async fn a_panic_in_a_tool_settles_the_run_and_the_session_goes_on() {
    let calls = vec![
        FakeCall::new("boom", json!({})),
        FakeCall::new("echo", json!({ "text": "later" })),
    ];
    let model = FakeModel::new(vec![FakeStep::tool_calls(calls), FakeStep::text("again")]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(boom_tool())
        .tool(echo_tool())
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let events = all_events(&handle).await;
    assert_eq!(types(&events).last(), Some(&"run.finished"));
    let messages = panicked(&handle, &*store, "tool \"boom\" panicked: the tool blew up").await;
    // The call that was running gets "outcome unknown", the one after it "not run".
    assert!(result_of(&messages[2]).0.starts_with("outcome unknown"));
    assert!(result_of(&messages[3]).0.starts_with("not run"));
    let steps = store
        .list_steps(&RunRef::new("s", handle.run_id()))
        .await
        .expect("steps");
    let tool_steps: Vec<StepStatus> = steps
        .iter()
        .filter_map(|s| match s {
            StepRecord::Tool(t) => Some(t.status),
            _ => None,
        })
        .collect();
    assert_eq!(
        tool_steps,
        [StepStatus::Uncertain],
        "only the call that ran"
    );

    let next = run(&agent, RunOptions::new("s", "go on"));
    assert_eq!(next.outcome().await.status(), RunStatus::Completed);
    let request = model.requests().pop().expect("a request");
    assert!(is_well_paired(&request.messages));
}

struct PanickyHook;
#[async_trait]
impl Hooks for PanickyHook {
    async fn before_tool(
        &self,
        _call: &ToolCall,
        _tool: &Tool,
        _run: &RunInfo,
    ) -> Result<BeforeTool, HookError> {
        panic!("hook bug");
    }
}

#[tokio::test]
async fn a_panic_in_a_hook_settles_the_run() {
    let model = FakeModel::new(vec![echo_call("hi")]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(echo_tool())
        .hooks(Arc::new(PanickyHook))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let messages = panicked(&handle, &*store, "the beforeTool hook panicked: hook bug").await;
    assert!(result_of(&messages[2]).0.starts_with("not run"));
    assert_eq!(
        all_events(&handle).await.len(),
        events_stored(&*store, handle.run_id()).await
    );
}

async fn events_stored(store: &dyn Store, run_id: &str) -> usize {
    store
        .list_events(&RunRef::new("s", run_id), None)
        .await
        .expect("events")
        .len()
}

#[tokio::test]
async fn a_panic_in_the_store_settles_the_run() {
    let model = FakeModel::new(vec![FakeStep::text("never")]);
    let memory = memory();
    let store = FaultStore::over(memory.clone());
    let armed = AtomicBool::new(true);
    store.set_fault(move |op, _| {
        if op == "append_step" && armed.swap(false, Ordering::SeqCst) {
            panic!("disk driver bug");
        }
        None
    });
    let agent = builder(&model, store).build().expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    panicked(
        &handle,
        &*memory,
        "the store (append_step) panicked: disk driver bug",
    )
    .await;
    assert_eq!(
        types(&all_events(&handle).await).last(),
        Some(&"run.finished")
    );
}

/// A `before_tool` hook that never answers, saying when it was entered.
struct StuckHook(Arc<Notify>);
#[async_trait]
impl Hooks for StuckHook {
    async fn before_tool(
        &self,
        _call: &ToolCall,
        _tool: &Tool,
        _run: &RunInfo,
    ) -> Result<BeforeTool, HookError> {
        self.0.notify_one();
        futures::future::pending::<()>().await;
        Ok(BeforeTool::Allow)
    }
}

#[tokio::test]
async fn a_cancel_reaches_a_hook_that_never_answers() {
    let model = FakeModel::new(vec![FakeStep::tool_calls(vec![
        FakeCall::new("echo", json!({ "text": "a" })),
        FakeCall::new("echo", json!({ "text": "b" })),
    ])]);
    let store = memory();
    let entered = Arc::new(Notify::new());
    let agent = builder(&model, store.clone())
        .tool(echo_tool())
        .hooks(Arc::new(StuckHook(entered.clone())))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    entered.notified().await;
    handle.cancel(Some("enough".into()));
    let outcome = handle.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Cancelled { reason } if reason.as_deref() == Some("enough")),
        "{outcome:?}"
    );
    let messages = store.list_messages("s", None).await.expect("messages");
    assert!(is_well_paired(&messages));
    assert_eq!(result_of(&messages[2]).0, INTERRUPT_TOOL_TEXT);
    assert_eq!(result_of(&messages[3]).0, INTERRUPT_TOOL_TEXT);
    assert_eq!(text(&messages[4]), INTERRUPT_MARKER);
    let session = store.get_session("s").await.expect("get").expect("session");
    assert_eq!(session.active_writer_run_id, None);
}

#[tokio::test]
async fn a_resumed_run_honours_the_time_limit() {
    let p = paused_rm().await;
    assert!(p.handle.detach());
    let limited = builder(&p.model, p.store.clone())
        .tool(rm_tool(p.runs.clone()))
        .limits(PartialLimits {
            timeout_ms: Some(20),
            ..Default::default()
        })
        .build()
        .expect("agent");
    let handle = resume_with_signal(&limited, ResumeOptions::new("s", p.handle.run_id()), None);
    let outcome = handle.outcome().await;
    assert!(
        matches!(
            outcome.kind,
            OutcomeKind::Stopped {
                reason: StopReason::Timeout
            }
        ),
        "{outcome:?}"
    );
    let events = all_events(&handle).await;
    assert!(events.iter().any(|e| matches!(
        &e.body,
        EventBody::ApprovalResolved {
            decision: ApprovalDecision::Deny,
            ..
        }
    )));
    assert!(p.runs.lock().expect("runs").is_empty(), "rm never ran");
    let messages = p.store.list_messages("s", None).await.expect("messages");
    assert!(is_well_paired(&messages));
}

#[tokio::test]
async fn a_resumed_run_takes_an_external_abort() {
    let p = paused_rm().await;
    assert!(p.handle.detach());
    // Fired before the resume, as a fresh run takes a signal that already fired.
    let abort = AbortController::new();
    abort.abort(AbortReason::Cancel { reason: None });
    let handle = resume_with_signal(
        &p.agent,
        ResumeOptions::new("s", p.handle.run_id()),
        Some(abort.signal()),
    );
    let outcome = handle.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Cancelled { reason } if reason.as_deref() == Some("signal")),
        "{outcome:?}"
    );
    assert!(p.runs.lock().expect("runs").is_empty());
}

/// A `before_tool` hook that fails on the call whose text is `fail`.
struct FailingHook;
#[async_trait]
impl Hooks for FailingHook {
    async fn before_tool(
        &self,
        call: &ToolCall,
        _tool: &Tool,
        _run: &RunInfo,
    ) -> Result<BeforeTool, HookError> {
        match call.input.as_ref().and_then(|i| i["text"].as_str()) {
            Some("fail") => Err("the hook could not decide".into()),
            _ => Ok(BeforeTool::Allow),
        }
    }
}

#[tokio::test]
async fn a_hook_error_mid_batch_leaves_every_call_answered() {
    let model = FakeModel::new(vec![FakeStep::tool_calls(vec![
        FakeCall::new("echo", json!({ "text": "ok" })),
        FakeCall::new("echo", json!({ "text": "fail" })),
        FakeCall::new("echo", json!({ "text": "never" })),
    ])]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(echo_tool())
        .hooks(Arc::new(FailingHook))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let (code, _) = failed_with(&handle.outcome().await);
    assert_eq!(code, ErrorCode::HookError);
    let messages = settled_cleanly(&*store, handle.run_id()).await;
    assert_eq!(result_of(&messages[2]).0, "echo:ok");
    assert!(result_of(&messages[3]).0.starts_with("not run"));
    assert!(result_of(&messages[4]).0.starts_with("not run"));
    assert_eq!(messages.len(), 5, "each call answered once");
}

#[tokio::test(start_paused = true)]
async fn a_cancel_reaches_a_store_call_that_never_answers() {
    // Paused time: the store's grace after the cancel passes as soon as nothing else can run.
    let model = FakeModel::new(vec![echo_call("a"), FakeStep::text("never")]);
    let memory = memory();
    let store = FaultStore::over(memory.clone());
    store.stall("append_step");
    let agent = echo_agent(&model, store.clone());
    let handle = run(&agent, RunOptions::new("s", "x"));
    store.stalled_at.notified().await;
    handle.cancel(Some("stuck".into()));
    let outcome = handle.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Cancelled { reason } if reason.as_deref() == Some("stuck")),
        "{outcome:?}"
    );
    let messages = memory.list_messages("s", None).await.expect("messages");
    assert_eq!(text(messages.last().expect("marker")), INTERRUPT_MARKER);
    let session = memory
        .get_session("s")
        .await
        .expect("get")
        .expect("session");
    assert_eq!(session.active_writer_run_id, None);
    assert_eq!(
        types(&all_events(&handle).await).last(),
        Some(&"run.finished")
    );
}
