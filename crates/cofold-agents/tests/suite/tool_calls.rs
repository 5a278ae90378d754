//! One tool call (harness §12.C): refusals, hooks and policy precedence, subjects, execution
//! records, bounding and after_tool changes.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::run_support::*;
use cofold_agents::event::{Command, Event, EventBody, OutcomeKind, RunStatus};
use cofold_agents::hooks::{AfterTool, BeforeTool, Hooks, RunInfo};
use cofold_agents::message::ToolCall;
use cofold_agents::policy::{Behavior, DecideArgs, Decision, Policy};
use cofold_agents::run::{RunOptions, run};
use cofold_agents::store::{KvScope, RunRef, StepRecord, StepStatus, Store};
use cofold_agents::testing::{FakeModel, FakeStep};
use cofold_agents::tool::{
    Tool, ToolContext, ToolDef, ToolEffects, ToolError, ToolOutput, handler_fn,
};

struct BeforeHook(BeforeTool);
#[async_trait]
impl Hooks for BeforeHook {
    async fn before_tool(
        &self,
        _c: &ToolCall,
        _t: &Tool,
        _r: &RunInfo,
    ) -> Result<BeforeTool, String> {
        Ok(self.0.clone())
    }
}

/// What a policy saw: tool name, input, run id.
type Seen = Arc<Mutex<Vec<(String, Value, String)>>>;

struct FixedPolicy {
    decision: Decision,
    seen: Seen,
}
#[async_trait]
impl Policy for FixedPolicy {
    async fn decide(&self, args: &DecideArgs<'_>) -> Decision {
        self.seen.lock().expect("seen").push((
            args.tool.name().to_owned(),
            args.input.clone(),
            args.run.run_id.clone(),
        ));
        self.decision.clone()
    }
}

fn policy(decision: Decision) -> (Arc<FixedPolicy>, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    (
        Arc::new(FixedPolicy {
            decision,
            seen: seen.clone(),
        }),
        seen,
    )
}

/// Runs one call of `tool` with `input` then a text answer; returns the events and the model.
async fn one(
    tools: Vec<Tool>,
    step: FakeStep,
    hook: Option<BeforeTool>,
    decide: Option<Arc<FixedPolicy>>,
) -> (Vec<Event>, FakeModel, cofold_agents::run::RunHandle) {
    let model = FakeModel::new(vec![step, FakeStep::text("ok")]);
    let mut b = builder(&model, memory()).tools(tools);
    if let Some(hook) = hook {
        b = b.hooks(Arc::new(BeforeHook(hook)));
    }
    if let Some(p) = decide {
        b = b.policy(p);
    }
    let handle = run(&b.build().expect("agent"), RunOptions::new("s", "x"));
    // The stream ends with the run's `run.finished`, or we stop at its pause: no clock needed.
    let mut events = Vec::new();
    let mut stream = Box::pin(handle.events());
    while let Some(e) = futures::StreamExt::next(&mut stream).await {
        let paused = e.type_name() == "run.paused";
        events.push(e);
        if paused {
            break;
        }
    }
    drop(stream);
    (events, model, handle)
}

fn tool_types(events: &[Event]) -> Vec<&'static str> {
    types(events)
        .into_iter()
        .filter(|t| t.starts_with("tool.") || t.starts_with("approval."))
        .collect()
}

fn last_result(model: &FakeModel) -> (String, bool) {
    result_of(model.requests()[1].messages.last().expect("result"))
}

#[tokio::test]
async fn refusals_before_execution_read_as_error_results() {
    // Item 65.
    let (events, model, _) = one(
        vec![echo_tool()],
        FakeStep::tool_call("nope", json!({})),
        None,
        None,
    )
    .await;
    assert_eq!(tool_types(&events), ["tool.denied"]);
    assert_eq!(
        last_result(&model),
        ("Unknown tool \"nope\"".to_owned(), true)
    );
    // Item 66.
    let (events, model, _) = one(
        vec![echo_tool()],
        FakeStep::raw_tool_call("echo", "{"),
        None,
        None,
    )
    .await;
    assert_eq!(tool_types(&events), ["tool.proposed", "tool.denied"]);
    assert_eq!(
        last_result(&model),
        ("Invalid arguments: not valid JSON".to_owned(), true)
    );
    // Item 67.
    let (events, model, _) = one(
        vec![echo_tool()],
        FakeStep::tool_call("echo", json!({ "text": 3 })),
        None,
        None,
    )
    .await;
    let reason = "Invalid arguments: $.text expected string, got number";
    assert_eq!(last_result(&model), (reason.to_owned(), true));
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.body, EventBody::ToolDenied { reason: r, .. } if r == reason))
    );
    assert!(!types(&events).contains(&"tool.started"));
    // Item 68.
    let (_, model, _) = one(
        vec![echo_tool()],
        echo_call("a"),
        Some(BeforeTool::Deny {
            reason: "no echo".into(),
        }),
        None,
    )
    .await;
    assert_eq!(last_result(&model), ("no echo".to_owned(), true));
}

#[tokio::test]
async fn hook_changes_are_validated_and_judged() {
    // Item 69: a valid change runs with defaults filled.
    let (p, seen) = policy(Decision::allow());
    let (events, model, _) = one(
        vec![echo_tool()],
        echo_call("a"),
        Some(BeforeTool::Modify {
            input: json!({ "text": "changed" }),
        }),
        Some(p),
    )
    .await;
    assert_eq!(last_result(&model).0, "echo:changed");
    // Item 79: the policy judged the changed input.
    assert_eq!(
        seen.lock().expect("seen")[0].1,
        json!({ "text": "changed", "loud": false })
    );
    // Item 80: the subject comes from the changed input.
    assert!(events.iter().any(
        |e| matches!(&e.body, EventBody::ToolProposed { subject: Some(s), .. } if s == "changed")
    ));
    // An invalid change: proposed without subject, then refused (D4).
    let (events, model, _) = one(
        vec![echo_tool()],
        echo_call("a"),
        Some(BeforeTool::Modify {
            input: json!({ "text": 1 }),
        }),
        None,
    )
    .await;
    assert_eq!(tool_types(&events), ["tool.proposed", "tool.denied"]);
    assert!(matches!(
        &events[3].body,
        EventBody::ToolProposed { subject: None, .. }
    ));
    assert!(
        last_result(&model)
            .0
            .starts_with("Invalid arguments after hook modify: $.text")
    );
}

fn approval_prompt(events: &[Event]) -> Option<Option<String>> {
    events.iter().find_map(|e| match &e.body {
        EventBody::ApprovalRequested { prompt, .. } => Some(prompt.clone()),
        _ => None,
    })
}

#[tokio::test]
async fn approvals_follow_hook_and_policy_precedence() {
    let runs = Arc::new(Mutex::new(Vec::new()));
    let rm_step = || FakeStep::tool_call("rm", json!({ "path": "p" }));
    // Item 70: hook approval with a prompt; only tool.proposed before the request.
    let (events, _, h) = one(
        vec![echo_tool()],
        echo_call("a"),
        Some(BeforeTool::Approval {
            prompt: Some("sure?".into()),
        }),
        None,
    )
    .await;
    assert_eq!(approval_prompt(&events), Some(Some("sure?".into())));
    assert_eq!(tool_types(&events), ["tool.proposed", "approval.requested"]);
    assert!(events.iter().any(|e| matches!(&e.body, EventBody::ApprovalRequested { input, .. } if *input == json!({ "text": "a", "loud": false }))));
    h.cancel(None);
    // Item 71: destructive + hook allow → approval without a prompt.
    let (events, _, h) = one(
        vec![rm_tool(runs.clone())],
        rm_step(),
        Some(BeforeTool::Allow),
        None,
    )
    .await;
    assert_eq!(approval_prompt(&events), Some(None));
    h.cancel(None);
    // Item 77: policy ask + hook allow.
    let (p, _) = policy(Decision::ask());
    let (events, _, h) = one(
        vec![echo_tool()],
        echo_call("a"),
        Some(BeforeTool::Allow),
        Some(p),
    )
    .await;
    assert_eq!(approval_prompt(&events), Some(None));
    h.cancel(None);
    // Item 78: policy allow + hook approval keeps the prompt.
    let (p, _) = policy(Decision::allow());
    let (events, _, h) = one(
        vec![echo_tool()],
        echo_call("a"),
        Some(BeforeTool::Approval {
            prompt: Some("p".into()),
        }),
        Some(p),
    )
    .await;
    assert_eq!(approval_prompt(&events), Some(Some("p".into())));
    h.cancel(None);
    assert!(runs.lock().expect("runs").is_empty());
}

#[tokio::test]
async fn policy_denials_beat_hooks_and_remembered_approvals() {
    // Item 74.
    let (p, _) = policy(Decision::deny("not allowed"));
    let (events, model, _) = one(
        vec![echo_tool()],
        echo_call("a"),
        Some(BeforeTool::Allow),
        Some(p),
    )
    .await;
    assert_eq!(tool_types(&events), ["tool.proposed", "tool.denied"]);
    assert_eq!(last_result(&model), ("not allowed".to_owned(), true));
    // Item 75.
    let (p, _) = policy(Decision::deny_without_reason());
    let (_, model, _) = one(vec![echo_tool()], echo_call("a"), None, Some(p)).await;
    assert_eq!(last_result(&model).0, "Denied by policy: echo");
    // Item 76: a remembered approval does not skip a deny.
    let model = FakeModel::new(vec![echo_call("a"), FakeStep::text("ok")]);
    let store = memory();
    store
        .kv_set(
            &KvScope::Agent {
                agent_id: "a".into(),
            },
            "approvals/s/echo",
            json!(true),
        )
        .await
        .expect("kv");
    let (p, _) = policy(Decision::deny("no"));
    let agent = builder(&model, store)
        .tool(echo_tool())
        .policy(p)
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    assert_eq!(
        tool_types(&all_events(&handle).await),
        ["tool.proposed", "tool.denied"]
    );
    // Item 73: a remembered approval for a destructive tool runs it.
    let model = FakeModel::new(vec![
        FakeStep::tool_call("rm", json!({ "path": "p" })),
        FakeStep::text("ok"),
    ]);
    let store = memory();
    store
        .kv_set(
            &KvScope::Agent {
                agent_id: "a".into(),
            },
            "approvals/s/rm",
            json!(true),
        )
        .await
        .expect("kv");
    let agent = builder(&model, store)
        .tool(rm_tool(Arc::default()))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    assert_eq!(
        tool_types(&all_events(&handle).await),
        ["tool.proposed", "tool.started", "tool.completed"]
    );
}

#[tokio::test]
async fn the_policy_sees_the_tool_the_validated_input_and_the_run() {
    // Item 72.
    let (p, seen) = policy(Decision::allow());
    let (_, _, handle) = one(vec![echo_tool()], echo_call("a"), None, Some(p)).await;
    handle.outcome().await;
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(
        seen,
        vec![(
            "echo".to_owned(),
            json!({ "text": "a", "loud": false }),
            handle.run_id().to_owned()
        )]
    );
}

#[tokio::test]
async fn subjects_are_absent_without_a_function_and_when_validation_fails() {
    let called = Arc::new(Mutex::new(0));
    let count = called.clone();
    let def = ToolDef::new(
        "echo2",
        "Echo.",
        json!({ "type": "object", "properties": { "text": { "type": "string" } }, "required": ["text"] }),
        handler_fn(|_i, _c| async { Ok::<_, ToolError>(ToolOutput::from("x")) }),
    )
    .subject(move |input| {
        *count.lock().expect("count") += 1;
        input["text"].as_str().filter(|t| *t != "none").map(str::to_owned)
    });
    let counted = Tool::new(def).expect("tool");
    let plain = Tool::new(ToolDef::new(
        "plain",
        "No subject.",
        json!({ "type": "object" }),
        handler_fn(|_i, _c| async { Ok::<_, ToolError>(ToolOutput::from("x")) }),
    ))
    .expect("tool");
    let subject_of = |events: &[Event]| {
        events.iter().find_map(|e| match &e.body {
            EventBody::ToolProposed { subject, .. } => Some(subject.clone()),
            _ => None,
        })
    };
    let (events, _, _) = one(
        vec![plain],
        FakeStep::tool_call("plain", json!({})),
        None,
        None,
    )
    .await;
    assert_eq!(subject_of(&events), Some(None));
    let (events, _, _) = one(
        vec![counted.clone()],
        FakeStep::tool_call("echo2", json!({ "text": 1 })),
        None,
        None,
    )
    .await;
    assert_eq!(subject_of(&events), Some(None));
    assert_eq!(
        *called.lock().expect("count"),
        0,
        "not called when validation fails"
    );
    let (events, model, _) = one(
        vec![counted],
        FakeStep::tool_call("echo2", json!({ "text": "none" })),
        None,
        None,
    )
    .await;
    assert_eq!(subject_of(&events), Some(None));
    assert_eq!(
        last_result(&model),
        ("x".to_owned(), false),
        "the call still runs"
    );
}

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
    ) -> Result<AfterTool, String> {
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
