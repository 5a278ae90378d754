//! One tool call as it runs (runtime cases, section C of docs/acceptance.md): the execution record and its context, a failing
//! executor, bounded output, after_tool changes and a cancel mid-execution.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::run_support::*;
use cofold_agents::event::{Command, EventBody, OutcomeKind, RunStatus};
use cofold_agents::hooks::{AfterTool, HookError, Hooks, RunInfo};
use cofold_agents::message::ToolCall;
use cofold_agents::policy::Behavior;
use cofold_agents::run::{RunOptions, run};
use cofold_agents::store::{RunRef, StepRecord, StepStatus, Store};
use cofold_agents::testing::{FakeModel, FakeStep};
use cofold_agents::tool::{
    Tool, ToolContext, ToolDef, ToolEffects, ToolError, ToolOutput, handler_fn,
};

use super::tool_calls::last_result;

#[derive(Debug, Clone, PartialEq)]
struct HostValue(u32);

#[tokio::test]
async fn an_execution_is_recorded_with_its_context() {
    // Item 81.
    let contexts = Arc::new(Mutex::new(Vec::<ToolContext>::new()));
    let sink = contexts.clone();
    let def = ToolDef::new(
        "probe",
        "Probes.",
        json!({ "type": "object" }),
        handler_fn(move |_i, ctx: ToolContext| {
            let sink = sink.clone();
            async move {
                sink.lock().expect("ctx").push(ctx);
                Ok::<_, ToolError>(ToolOutput::with_detail("probed", json!({ "n": 1 })))
            }
        }),
    );
    let model = FakeModel::new(vec![
        FakeStep::tool_call("probe", json!({})),
        FakeStep::text("ok"),
    ]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(Tool::new(def).expect("tool"))
        .resources(cofold_agents::tool::Resources::new().with(HostValue(7)))
        .build()
        .expect("agent");
    let mut opts = RunOptions::new("s", "x");
    opts.workspace = Some("/w".into());
    let handle = run(&agent, opts);
    let events = all_events(&handle).await;
    let steps = store
        .list_steps(&RunRef::new("s", handle.run_id()))
        .await
        .expect("steps");
    let StepRecord::Tool(step) = &steps[1] else {
        panic!()
    };
    assert_eq!(
        (step.index, step.status, step.name.as_str()),
        (1, StepStatus::Completed, "probe")
    );
    let original = step.original.as_ref().expect("original");
    assert_eq!(
        (original.content.as_str(), original.detail.clone()),
        ("probed", Some(json!({ "n": 1 })))
    );
    assert!(step.transformed.is_none() && step.ended_at.is_some());
    let completed = events
        .iter()
        .find(|e| e.type_name() == "tool.completed")
        .expect("completed");
    let EventBody::ToolCompleted {
        invocation_id,
        content,
        is_error,
        ..
    } = &completed.body
    else {
        panic!()
    };
    assert_eq!(
        (invocation_id, content.as_str(), *is_error),
        (&step.invocation_id, "probed", false)
    );
    let ctx = contexts.lock().expect("ctx")[0].clone();
    assert_eq!(
        (
            ctx.agent_id.as_str(),
            ctx.session_id.as_str(),
            ctx.run_id.as_str()
        ),
        ("a", "s", handle.run_id())
    );
    assert_eq!(ctx.call_id, step.call_id);
    assert!(ctx.kv.workspace.is_some());
    assert_eq!(ctx.resources.get::<HostValue>(), Some(&HostValue(7)));
}

#[tokio::test]
async fn a_failing_executor_gives_an_error_result_and_a_failed_step() {
    // Item 82.
    let def = ToolDef::new(
        "fail",
        "Fails.",
        json!({ "type": "object" }),
        handler_fn(|_i, _c| async {
            Err::<ToolOutput, _>(ToolError::failed_named("Boom", "it broke"))
        }),
    );
    let model = FakeModel::new(vec![
        FakeStep::tool_call("fail", json!({})),
        FakeStep::text("ok"),
    ]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(Tool::new(def).expect("tool"))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let events = all_events(&handle).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.body, EventBody::ToolCompleted { is_error: true, .. }))
    );
    assert_eq!(last_result(&model), ("it broke".to_owned(), true));
    let steps = store
        .list_steps(&RunRef::new("s", handle.run_id()))
        .await
        .expect("steps");
    let StepRecord::Tool(step) = &steps[1] else {
        panic!()
    };
    assert_eq!(step.status, StepStatus::Failed);
    assert_eq!(
        step.original.as_ref().expect("o").detail,
        Some(json!({ "name": "Boom" }))
    );
}

fn fifty() -> Tool {
    Tool::new(ToolDef::new(
        "long",
        "Long output.",
        json!({ "type": "object", "properties": { "text": { "type": "string" } } }),
        handler_fn(|input: Value, _c| async move {
            Ok::<_, ToolError>(ToolOutput::from(
                input["text"].as_str().unwrap_or(&"a".repeat(50)).to_owned(),
            ))
        }),
    ))
    .expect("tool")
}

#[tokio::test]
async fn long_output_is_bounded_for_the_model_and_kept_whole_on_the_step() {
    // Item 83.
    let model = FakeModel::new(vec![
        FakeStep::tool_call("long", json!({})),
        FakeStep::tool_call("long", json!({ "text": "ééééééééééééé" })),
        FakeStep::text("ok"),
    ]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(fifty())
        .limits(cofold_agents::agent::PartialLimits {
            max_tool_output_chars: Some(10),
            ..Default::default()
        })
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    handle.outcome().await;
    let first = result_of(model.requests()[1].messages.last().expect("r")).0;
    assert_eq!(first, format!("{}\n…[truncated 40 chars]", "a".repeat(10)));
    let second = result_of(model.requests()[2].messages.last().expect("r")).0;
    assert_eq!(second, "éééééééééé\n…[truncated 3 chars]");
    let steps = store
        .list_steps(&RunRef::new("s", handle.run_id()))
        .await
        .expect("steps");
    let StepRecord::Tool(step) = &steps[1] else {
        panic!()
    };
    assert_eq!(step.original.as_ref().expect("o").content, "a".repeat(50));
}

struct Rewrite;
#[async_trait]
impl Hooks for Rewrite {
    async fn after_tool(
        &self,
        _c: &ToolCall,
        _t: &Tool,
        output: String,
        _e: bool,
        _r: &RunInfo,
    ) -> Result<AfterTool, HookError> {
        Ok(AfterTool {
            output: format!("{output}!"),
            is_error: Some(true),
            stop: None,
        })
    }
}

#[tokio::test]
async fn after_tool_changes_reach_the_model_and_the_step() {
    // Item 84.
    let model = FakeModel::new(vec![echo_call("a"), FakeStep::text("ok")]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(echo_tool())
        .hooks(Arc::new(Rewrite))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let events = all_events(&handle).await;
    assert!(events.iter().any(|e| matches!(&e.body, EventBody::ToolCompleted { content, is_error: true, .. } if content == "echo:a!")));
    assert_eq!(last_result(&model), ("echo:a!".to_owned(), true));
    let steps = store
        .list_steps(&RunRef::new("s", handle.run_id()))
        .await
        .expect("steps");
    let StepRecord::Tool(step) = &steps[1] else {
        panic!()
    };
    assert_eq!(step.original.as_ref().expect("o").content, "echo:a");
    let transformed = step.transformed.as_ref().expect("t");
    assert_eq!(
        (transformed.content.as_str(), transformed.is_error),
        ("echo:a!", true)
    );
}

#[tokio::test]
async fn a_cancel_during_execution_drops_the_future_and_leaves_the_step_uncertain() {
    // Item 85 (and 53).
    let dropped = Arc::new(Mutex::new(0));
    let model = FakeModel::new(vec![
        FakeStep::tool_call("hang", json!({})),
        FakeStep::text("never"),
    ]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(hang_tool("hang", dropped.clone()))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    next_of(&handle, "tool.started", 0).await;
    handle
        .submit(Command::Cancel {
            reason: Some("enough".into()),
        })
        .await
        .expect("cancel");
    let outcome = handle.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Cancelled { reason } if reason.as_deref() == Some("enough"))
    );
    assert_eq!(outcome.steps, 1);
    assert_eq!(
        *dropped.lock().expect("dropped"),
        1,
        "the execution future was dropped"
    );
    let events = all_events(&handle).await;
    assert!(!types(&events).contains(&"tool.completed"));
    let run_ref = RunRef::new("s", handle.run_id());
    let steps = store.list_steps(&run_ref).await.expect("steps");
    assert!(
        matches!(&steps[1], StepRecord::Tool(t) if t.status == StepStatus::Uncertain && t.ended_at.is_some())
    );
    assert_eq!(
        store.get_run(&run_ref).await.expect("g").expect("r").status,
        RunStatus::Cancelled
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
    let _ = ToolEffects::default();
    let _ = Behavior::Allow;
}
