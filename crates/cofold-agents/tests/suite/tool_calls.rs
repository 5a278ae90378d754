//! One tool call before it runs (runtime cases, section C of docs/acceptance.md): refusals, hook changes, hook and policy
//! precedence, what the policy sees, and subjects.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::run_support::*;
use cofold_agents::event::{Event, EventBody};
use cofold_agents::hooks::{BeforeTool, HookError, Hooks, RunInfo};
use cofold_agents::message::ToolCall;
use cofold_agents::policy::{DecideArgs, Decision, Policy};
use cofold_agents::run::{RunOptions, run};
use cofold_agents::store::{KvScope, Store};
use cofold_agents::testing::{FakeModel, FakeStep};
use cofold_agents::tool::{Tool, ToolDef, ToolError, ToolOutput, handler_fn};

struct BeforeHook(BeforeTool);
#[async_trait]
impl Hooks for BeforeHook {
    async fn before_tool(
        &self,
        _c: &ToolCall,
        _t: &Tool,
        _r: &RunInfo,
    ) -> Result<BeforeTool, HookError> {
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

pub(super) fn last_result(model: &FakeModel) -> (String, bool) {
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
