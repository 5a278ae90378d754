//! Denials and hook stops (runtime cases, section G of docs/acceptance.md): the refusals a run keeps and in what order, and a
//! `before_tool` or `after_tool` hook stopping the run.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;

use super::run_support::*;
use cofold_agents::agent::PartialLimits;
use cofold_agents::event::{OutcomeKind, StopReason};
use cofold_agents::hooks::{AfterTool, BeforeTool, HookError, Hooks, RunInfo};
use cofold_agents::message::ToolCall;
use cofold_agents::policy::{Decision, DenialBy, policy_fn};
use cofold_agents::run::{RunOptions, run};
use cofold_agents::store::{RunRef, StepRecord, StepStatus, Store};
use cofold_agents::testing::{FakeCall, FakeModel, FakeStep};
use cofold_agents::tool::Tool;

struct Gatekeeper;
#[async_trait]
impl Hooks for Gatekeeper {
    async fn before_tool(
        &self,
        call: &ToolCall,
        _t: &Tool,
        _r: &RunInfo,
    ) -> Result<BeforeTool, HookError> {
        Ok(match call.input.as_ref().and_then(|i| i["text"].as_str()) {
            Some("hook") => BeforeTool::Deny {
                reason: "hooked".into(),
            },
            _ => BeforeTool::Allow,
        })
    }
}

#[tokio::test]
async fn denials_are_kept_in_order_with_who_refused() {
    // Item 118.
    let calls = vec![
        FakeCall::new("nope", json!({})),
        FakeCall::new("echo", json!({ "text": 1 })),
        FakeCall::new("echo", json!({ "text": "hook" })),
        FakeCall::new("echo", json!({ "text": "policy" })),
        FakeCall::new("echo", json!({ "text": "ok" })),
        FakeCall::new("echo", json!({ "text": "over" })),
    ];
    let model = FakeModel::new(vec![FakeStep::tool_calls(calls)]);
    let store = memory();
    let policy = policy_fn(|args| {
        if args.input["text"] == "policy" {
            Decision::deny("no policy")
        } else {
            Decision::allow()
        }
    });
    let agent = builder(&model, store.clone())
        .tool(echo_tool())
        .hooks(Arc::new(Gatekeeper))
        .policy(policy)
        .limits(PartialLimits {
            max_tool_calls: Some(1),
            ..Default::default()
        })
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let outcome = handle.outcome().await;
    let by: Vec<DenialBy> = outcome.denials.iter().map(|d| d.by).collect();
    assert_eq!(
        by,
        [
            DenialBy::Invalid,
            DenialBy::Invalid,
            DenialBy::Hook,
            DenialBy::Policy,
            DenialBy::Limit
        ]
    );
    assert_eq!(outcome.denials[4].reason, "Tool call limit reached");
    let record = store
        .get_run(&RunRef::new("s", handle.run_id()))
        .await
        .expect("g")
        .expect("r");
    assert_eq!(record.denials, outcome.denials);
    // Item 119.
    let model = FakeModel::new(vec![
        FakeStep::raw_tool_call("echo", "{"),
        FakeStep::text("ok"),
    ]);
    let outcome = run(&echo_agent(&model, memory()), RunOptions::new("s", "x"))
        .outcome()
        .await;
    let denial = &outcome.denials[0];
    assert_eq!(
        (denial.input.is_none(), denial.reason.as_str(), denial.by),
        (true, "Invalid arguments: not valid JSON", DenialBy::Invalid)
    );
    // Item 123 (first half): no refusals, an empty list.
    let model = FakeModel::new(vec![FakeStep::text("ok")]);
    let outcome = run(&echo_agent(&model, memory()), RunOptions::new("s", "x"))
        .outcome()
        .await;
    assert_eq!(
        serde_json::to_value(&outcome).expect("json")["denials"],
        json!([])
    );
}

struct Stopper {
    before_calls: Arc<Mutex<u32>>,
    after: bool,
}
#[async_trait]
impl Hooks for Stopper {
    async fn before_tool(
        &self,
        _c: &ToolCall,
        _t: &Tool,
        _r: &RunInfo,
    ) -> Result<BeforeTool, HookError> {
        *self.before_calls.lock().expect("calls") += 1;
        Ok(if self.after {
            BeforeTool::Allow
        } else {
            BeforeTool::Stop {
                reason: "halt".into(),
            }
        })
    }
    async fn after_tool(
        &self,
        _c: &ToolCall,
        _t: &Tool,
        output: String,
        _e: bool,
        _r: &RunInfo,
    ) -> Result<AfterTool, HookError> {
        Ok(AfterTool {
            output,
            is_error: None,
            stop: self.after.then(|| "had enough".to_owned()),
        })
    }
}

#[tokio::test]
async fn a_before_tool_stop_answers_every_call_and_stops_the_run() {
    // Items 120, 124, 126.
    let calls = vec![
        FakeCall::new("echo", json!({ "text": "1" })),
        FakeCall::new("echo", json!({ "text": "2" })),
    ];
    let model = FakeModel::new(vec![
        FakeStep::tool_calls(calls),
        FakeStep::text("next turn"),
    ]);
    let store = memory();
    let count = Arc::new(Mutex::new(0));
    let agent = builder(&model, store.clone())
        .tool(echo_tool())
        .hooks(Arc::new(Stopper {
            before_calls: count.clone(),
            after: false,
        }))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let events = all_events(&handle).await;
    let outcome = handle.outcome().await;
    assert!(matches!(
        outcome.kind,
        OutcomeKind::Stopped {
            reason: StopReason::Hook
        }
    ));
    assert_eq!(outcome.denials[0].by, DenialBy::Hook);
    assert_eq!(
        types(&events)
            .iter()
            .filter(|t| **t == "tool.denied")
            .count(),
        1
    );
    assert_eq!(*count.lock().expect("count"), 1);
    let messages = store.list_messages("s", None).await.expect("m");
    assert_eq!(
        result_of(&messages[2]),
        ("Not executed: halt".to_owned(), true)
    );
    assert_eq!(
        result_of(&messages[3]),
        ("Not executed: the run was stopped".to_owned(), true)
    );
    let steps = store
        .list_steps(&RunRef::new("s", handle.run_id()))
        .await
        .expect("steps");
    assert!(steps.iter().all(|s| matches!(s, StepRecord::Model(_))));
    assert_eq!(
        store
            .get_session("s")
            .await
            .expect("g")
            .expect("s")
            .active_writer_run_id,
        None
    );
    // Item 126: the next run's request pairs every call with a result.
    let plain = echo_agent(&model, store.clone());
    run(&plain, RunOptions::new("s", "again")).outcome().await;
    let request = model.requests().last().cloned().expect("request");
    let results = request
        .messages
        .iter()
        .filter(|m| m.role == cofold_agents::message::Role::Tool)
        .count();
    assert_eq!(results, 2);
}

#[tokio::test]
async fn an_after_tool_stop_keeps_its_result_and_marks_the_step() {
    // Items 125 and 127.
    for failing in [false, true] {
        let tool_name = if failing { "boom" } else { "echo" };
        let calls = vec![
            FakeCall::new(tool_name, json!({ "text": "1" })),
            FakeCall::new("echo", json!({ "text": "2" })),
        ];
        let model = FakeModel::new(vec![FakeStep::tool_calls(calls)]);
        let store = memory();
        let boom = Tool::new(cofold_agents::tool::ToolDef::new(
            "boom",
            "Fails.",
            json!({ "type": "object" }),
            cofold_agents::tool::handler_fn(|_i, _c| async {
                Err::<cofold_agents::tool::ToolOutput, _>(cofold_agents::tool::ToolError::failed(
                    "bang",
                ))
            }),
        ))
        .expect("tool");
        let agent = builder(&model, store.clone())
            .tools([echo_tool(), boom])
            .hooks(Arc::new(Stopper {
                before_calls: Arc::default(),
                after: true,
            }))
            .build()
            .expect("agent");
        let handle = run(&agent, RunOptions::new("s", "x"));
        let outcome = handle.outcome().await;
        assert!(matches!(
            outcome.kind,
            OutcomeKind::Stopped {
                reason: StopReason::Hook
            }
        ));
        let messages = store.list_messages("s", None).await.expect("m");
        assert_eq!(
            result_of(&messages[3]),
            ("Not executed: the run was stopped".to_owned(), true)
        );
        let steps = store
            .list_steps(&RunRef::new("s", handle.run_id()))
            .await
            .expect("steps");
        let StepRecord::Tool(step) = &steps[1] else {
            panic!()
        };
        assert_eq!(
            step.status,
            if failing {
                StepStatus::Failed
            } else {
                StepStatus::Completed
            }
        );
        assert_eq!(
            step.detail,
            Some(json!({ "stoppedBy": "afterTool", "reason": "had enough" }))
        );
    }
}
