//! What fails or holds a run (runtime cases, section B of docs/acceptance.md): model hooks and model errors, capabilities that
//! break, store failures, the writer claim and its heartbeat.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;

use super::run_support::*;
use cofold_agents::capability::{Capability, CapabilityArgs, CapabilityError};
use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::event::{OutcomeKind, RunStatus};
use cofold_agents::hooks::{AfterModel, BeforeModel, HookError, Hooks, RunInfo};
use cofold_agents::model::{ModelReply, ModelRequest, Usage};
use cofold_agents::run::{RunOptions, run};
use cofold_agents::store::{RunRef, StepRecord, StepStatus, Store};
use cofold_agents::testing::{FakeModel, FakeStep};
use cofold_agents::tool::{Tool, ToolDef, ToolError, ToolOutput, handler_fn};

struct ModelHooks {
    before: Option<Result<(), String>>,
    after: Option<Result<(), String>>,
}
#[async_trait]
impl Hooks for ModelHooks {
    async fn before_model(
        &self,
        request: ModelRequest,
        _r: &RunInfo,
    ) -> Result<BeforeModel, HookError> {
        match &self.before {
            Some(Ok(())) => Ok(BeforeModel::Abort {
                reason: "no".into(),
            }),
            Some(Err(e)) => Err(HookError::new(e.clone())),
            None => Ok(BeforeModel::Continue(request)),
        }
    }
    async fn after_model(&self, reply: ModelReply, _r: &RunInfo) -> Result<AfterModel, HookError> {
        match &self.after {
            Some(Ok(())) => Ok(AfterModel::Abort {
                reason: "enough".into(),
            }),
            Some(Err(e)) => Err(HookError::new(e.clone())),
            None => Ok(AfterModel::Continue(reply)),
        }
    }
}

async fn with_model_hooks(
    hooks: ModelHooks,
) -> (
    FakeModel,
    Arc<cofold_agents::store::MemoryStore>,
    cofold_agents::event::RunOutcome,
    String,
) {
    let model = FakeModel::new(vec![FakeStep::text("hi")]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .hooks(Arc::new(hooks))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let outcome = handle.outcome().await;
    (model, store, outcome, handle.run_id().to_owned())
}

#[tokio::test]
async fn model_hooks_abort_or_fail_the_run() {
    // Item 34: before_model aborts.
    let (model, store, outcome, run_id) = with_model_hooks(ModelHooks {
        before: Some(Ok(())),
        after: None,
    })
    .await;
    assert!(matches!(
        outcome.kind,
        OutcomeKind::Stopped {
            reason: cofold_agents::event::StopReason::Policy
        }
    ));
    assert_eq!(outcome.steps, 1);
    assert!(model.requests().is_empty(), "no request reached the model");
    let steps = store
        .list_steps(&RunRef::new("s", &run_id))
        .await
        .expect("steps");
    let StepRecord::Model(step) = &steps[0] else {
        panic!()
    };
    assert_eq!(step.status, StepStatus::Completed);
    assert_eq!(
        step.detail,
        Some(json!({ "abortedBy": "beforeModel", "reason": "no" }))
    );

    // Item 35: after_model aborts, keeping the usage and the reply.
    let (_, store, outcome, run_id) = with_model_hooks(ModelHooks {
        before: None,
        after: Some(Ok(())),
    })
    .await;
    assert!(matches!(outcome.kind, OutcomeKind::Stopped { .. }));
    assert_eq!(outcome.usage, Usage::new(1, 1));
    let steps = store
        .list_steps(&RunRef::new("s", &run_id))
        .await
        .expect("steps");
    let StepRecord::Model(step) = &steps[0] else {
        panic!()
    };
    assert_eq!(step.status, StepStatus::Completed);
    assert!(step.reply.is_some());
    assert!(step.reply.as_ref().expect("reply").get("raw").is_none());
    assert_eq!(
        step.detail.as_ref().expect("detail")["abortedBy"],
        "afterModel"
    );

    // Item 36: after_model fails.
    let (_, store, outcome, run_id) = with_model_hooks(ModelHooks {
        before: None,
        after: Some(Err("bad hook".into())),
    })
    .await;
    let OutcomeKind::Failed { error } = &outcome.kind else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        (error.code, error.message.as_str()),
        (ErrorCode::HookError, "afterModel: bad hook")
    );
    let steps = store
        .list_steps(&RunRef::new("s", &run_id))
        .await
        .expect("steps");
    assert!(matches!(&steps[0], StepRecord::Model(m) if m.status == StepStatus::Failed));
    assert_eq!(
        store
            .get_session("s")
            .await
            .expect("get")
            .expect("s")
            .active_writer_run_id,
        None
    );
}

#[tokio::test]
async fn a_model_error_fails_the_run_with_its_code_and_a_model_error_detail() {
    let model = FakeModel::new(vec![FakeStep::error(ErrorCode::RateLimit, "slow down")]);
    let handle = run(&echo_agent(&model, memory()), RunOptions::new("s", "x"));
    let outcome = handle.outcome().await;
    let OutcomeKind::Failed { error } = &outcome.kind else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        (error.code, error.message.as_str()),
        (ErrorCode::RateLimit, "slow down")
    );
    assert_eq!(error.detail.as_ref().expect("detail")["name"], "ModelError");
}

struct Broken;
#[async_trait]
impl Capability for Broken {
    fn id(&self) -> &str {
        "broken"
    }
    async fn tools(&self, _args: &CapabilityArgs) -> Result<Vec<Tool>, CapabilityError> {
        Err("nope".into())
    }
}

struct Clock(Arc<Mutex<Option<CapabilityArgs>>>);
#[async_trait]
impl Capability for Clock {
    fn id(&self) -> &str {
        "clock"
    }
    async fn tools(&self, args: &CapabilityArgs) -> Result<Vec<Tool>, CapabilityError> {
        *self.0.lock().expect("args") = Some(args.clone());
        let def = ToolDef::new(
            "now",
            "Tells the time.",
            json!({ "type": "object" }),
            handler_fn(|_i, _c| async { Ok::<_, ToolError>(ToolOutput::from("noon")) }),
        );
        Ok(vec![Tool::new(def).map_err(|e| e.message)?])
    }
    async fn instructions(
        &self,
        _args: &CapabilityArgs,
    ) -> Result<Option<String>, CapabilityError> {
        Ok(Some("   tell the time   ".into()))
    }
}

struct Dup;
#[async_trait]
impl Capability for Dup {
    fn id(&self) -> &str {
        "dup"
    }
    async fn tools(&self, _args: &CapabilityArgs) -> Result<Vec<Tool>, CapabilityError> {
        Ok(vec![echo_tool()])
    }
}

#[tokio::test]
async fn capabilities_resolve_into_tools_and_instructions_or_fail_the_run() {
    // Item 38.
    let model = FakeModel::new(vec![FakeStep::text("x")]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .capability(Arc::new(Broken))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    assert_eq!(types(&all_events(&handle).await), ["run.finished"]);
    let OutcomeKind::Failed { error } = handle.outcome().await.kind else {
        panic!()
    };
    assert_eq!(
        (error.code, error.message.as_str()),
        (ErrorCode::CapabilityError, "capability \"broken\": nope")
    );
    assert_eq!(error.detail, Some(json!({ "capability": "broken" })));
    assert!(
        store
            .list_messages("s", None)
            .await
            .expect("messages")
            .is_empty()
    );

    // Item 40.
    let seen = Arc::new(Mutex::new(None));
    let model = FakeModel::new(vec![
        FakeStep::tool_call("now", json!({})),
        FakeStep::text("noon it is"),
    ]);
    let agent = builder(&model, memory())
        .tool(echo_tool())
        .capability(Arc::new(Clock(seen.clone())))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    assert_eq!(handle.outcome().await.status(), RunStatus::Completed);
    let request = &model.requests()[0];
    assert_eq!(request.instructions, "be brief\n\n## clock\ntell the time");
    assert_eq!(
        request
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["echo", "now"]
    );
    let args = seen.lock().expect("args").clone().expect("args seen");
    assert_eq!(
        (args.session_id.as_str(), args.run_id.as_str()),
        ("s", handle.run_id())
    );
    assert_eq!(
        result_of(model.requests()[1].messages.last().expect("last")).0,
        "noon"
    );

    // Item 41.
    let model = FakeModel::new(vec![FakeStep::text("x")]);
    let agent = builder(&model, memory())
        .tool(echo_tool())
        .capability(Arc::new(Dup))
        .build()
        .expect("agent");
    let OutcomeKind::Failed { error } = run(&agent, RunOptions::new("s", "x")).outcome().await.kind
    else {
        panic!()
    };
    assert_eq!(
        (error.code, error.message.as_str()),
        (
            ErrorCode::InvalidOptions,
            "capability \"dup\" contributes a duplicate tool \"echo\""
        )
    );
    // Item 42 (the exclusion half): excluding the duplicate lets the agent's own tool run.
    let model = FakeModel::new(vec![echo_call("z"), FakeStep::text("x")]);
    let agent = builder(&model, memory())
        .tool(echo_tool())
        .capability_excluding(Arc::new(Dup), ["echo"])
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
async fn store_failures_settle_the_handle_with_one_run_finished() {
    // Item 49: get_session fails.
    let model = FakeModel::new(vec![FakeStep::text("x")]);
    let store = FaultStore::over(memory());
    store.set_fault(|op, _| (op == "get_session").then(store_down));
    let handle = run(
        &echo_agent(&model, store.clone()),
        RunOptions::new("s", "x"),
    );
    let events = all_events(&handle).await;
    assert_eq!(types(&events), ["run.finished"]);
    let outcome = handle.outcome().await;
    let OutcomeKind::Failed { error } = &outcome.kind else {
        panic!()
    };
    assert_eq!(
        (error.code, error.message.as_str(), outcome.steps),
        (ErrorCode::Internal, "store down", 0)
    );
    assert_eq!(
        store
            .inner
            .list_runs("s", None)
            .await
            .map(|r| r.len())
            .unwrap_or(0),
        0
    );

    // Item 50: update_run fails at the end.
    let model = FakeModel::new(vec![FakeStep::text("x")]);
    let store = FaultStore::over(memory());
    store.set_fault(|op, _| (op == "update_run").then(store_down));
    let handle = run(
        &echo_agent(&model, store.clone()),
        RunOptions::new("s", "x"),
    );
    let events = all_events(&handle).await;
    assert_eq!(
        types(&events)
            .iter()
            .filter(|t| **t == "run.finished")
            .count(),
        1
    );
    assert_eq!(events.last().expect("last").type_name(), "run.finished");
    assert!(
        matches!(&handle.outcome().await.kind, OutcomeKind::Failed { error } if error.code == ErrorCode::Internal)
    );
    let stored = store
        .inner
        .list_events(&RunRef::new("s", handle.run_id()), None)
        .await
        .expect("events");
    assert!(!types(&stored).contains(&"run.finished"));

    // Item 51: seq_gap on the fourth event.
    let model = FakeModel::new(vec![echo_call("a"), FakeStep::text("x")]);
    let store = FaultStore::over(memory());
    store.set_fault(|op, event| {
        (op == "append_event" && event.map(|e| e.seq) == Some(4))
            .then(|| AgentError::new(ErrorCode::SeqGap, "gap"))
    });
    let handle = run(
        &echo_agent(&model, store.clone()),
        RunOptions::new("s", "x"),
    );
    let OutcomeKind::Failed { error } = handle.outcome().await.kind else {
        panic!()
    };
    assert_eq!(error.code, ErrorCode::Superseded);
    let stored = store
        .inner
        .list_events(&RunRef::new("s", handle.run_id()), None)
        .await
        .expect("events");
    assert!(!types(&stored).contains(&"run.finished"));
}

#[tokio::test(start_paused = true)]
async fn heartbeats_run_every_ten_seconds_and_stop_when_the_run_settles() {
    let def = ToolDef::new(
        "slow",
        "Takes 15 s.",
        json!({ "type": "object" }),
        handler_fn(|_i, _c| async {
            tokio::time::sleep(std::time::Duration::from_secs(15)).await;
            Ok::<_, ToolError>(ToolOutput::from("slept"))
        }),
    );
    let model = FakeModel::new(vec![
        FakeStep::tool_call("slow", json!({})),
        FakeStep::text("done"),
    ]);
    let store = FaultStore::over(memory());
    let agent = builder(&model, store.clone())
        .tool(Tool::new(def).expect("tool"))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    handle.outcome().await;
    assert_eq!(store.calls_named("heartbeat"), 1);
    // Item 55: after settling, time passing causes no store call and an abort changes nothing.
    let before = store.call_count();
    tokio::time::advance(std::time::Duration::from_secs(60)).await;
    handle.cancel(Some("late".into()));
    tokio::task::yield_now().await;
    assert_eq!(store.call_count(), before);
    assert_eq!(handle.status(), RunStatus::Completed);
}

#[tokio::test]
async fn a_second_run_on_a_held_session_fails_writer_busy() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let model = FakeModel::new(vec![
        FakeStep::text("first").gated(gate.clone()),
        FakeStep::text("never"),
    ]);
    let store = memory();
    let agent = echo_agent(&model, store.clone());
    let first = run(&agent, RunOptions::new("s", "one"));
    next_of(&first, "model.started", 0).await;
    let second = run(&agent, RunOptions::new("s", "two"));
    assert_eq!(types(&all_events(&second).await), ["run.finished"]);
    let outcome = second.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Failed { error } if error.code == ErrorCode::WriterBusy)
    );
    assert_eq!(outcome.steps, 0);
    assert_eq!(store.list_messages("s", None).await.expect("m").len(), 1);
    let record = store
        .get_run(&RunRef::new("s", second.run_id()))
        .await
        .expect("get")
        .expect("record");
    assert_eq!(record.status, RunStatus::Failed);
    assert_eq!(
        store
            .get_session("s")
            .await
            .expect("g")
            .expect("s")
            .active_writer_run_id
            .as_deref(),
        Some(first.run_id())
    );
    gate.notify_one();
    assert_eq!(first.outcome().await.status(), RunStatus::Completed);
}
