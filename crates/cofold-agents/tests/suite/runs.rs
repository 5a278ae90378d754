//! Runs (harness §12.B): the canonical sequences, records, pauses, capabilities, observers and
//! store failures.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;

use super::run_support::*;
use cofold_agents::capability::{Capability, CapabilityArgs};
use cofold_agents::error::{AgentError, ErrorCode};
use cofold_agents::event::{Command, Event, EventBody, OutcomeKind, RequestKind, RunStatus};
use cofold_agents::hooks::{AfterModel, BeforeModel, BeforeTool, Hooks, RunInfo};
use cofold_agents::message::{Input, Part, ToolCall};
use cofold_agents::model::{ModelReply, ModelRequest, Usage};
use cofold_agents::run::{CompactOptions, ResumeOptions, RunOptions, compact, resume, run};
use cofold_agents::store::{RunRef, SessionQuery, StepRecord, StepStatus, Store};
use cofold_agents::testing::{FakeModel, FakeStep};
use cofold_agents::tool::{
    AbortController, AbortReason, Tool, ToolDef, ToolError, ToolOutput, handler_fn,
};

const TOOL_THEN_DONE: [&str; 9] = [
    "run.started",
    "model.started",
    "model.completed",
    "tool.proposed",
    "tool.started",
    "tool.completed",
    "model.started",
    "model.completed",
    "run.finished",
];

#[tokio::test]
async fn a_tool_call_then_an_answer_gives_the_canonical_sequence_and_records() {
    let model = FakeModel::new(vec![echo_call("hi"), FakeStep::text("done")]);
    let store = memory();
    let agent = echo_agent(&model, store.clone());
    let handle = run(&agent, RunOptions::new("s", "hello"));
    assert_eq!(handle.status(), RunStatus::Running);
    let events = all_events(&handle).await;
    assert_eq!(types(&events), TOOL_THEN_DONE);
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event.seq, i as u64 + 1);
        assert_eq!(
            (
                event.run_id.as_str(),
                event.session_id.as_str(),
                event.agent_id.as_str()
            ),
            (handle.run_id(), "s", "a")
        );
    }
    let outcome = handle.outcome().await;
    assert_eq!(handle.status(), RunStatus::Completed);
    assert_eq!(outcome.steps, 2);
    assert_eq!(outcome.usage, Usage::new(2, 2));
    assert_eq!(outcome.denials, vec![]);
    let OutcomeKind::Completed { message } = &outcome.kind else {
        panic!("{outcome:?}")
    };
    assert_eq!(text(message), "done");
    assert_eq!(events[8].finished_outcome(), Some(&outcome));

    // Item 22: transcript, steps, record, claim, stored events.
    let messages = store.list_messages("s", None).await.expect("messages");
    assert_eq!(
        shape(&messages),
        pairs(&[
            ("user", "input"),
            ("assistant", "model"),
            ("tool", "tool"),
            ("assistant", "model")
        ])
    );
    assert_eq!(result_of(&messages[2]), ("echo:hi".to_owned(), false));
    let run_ref = RunRef::new("s", handle.run_id());
    let steps = store.list_steps(&run_ref).await.expect("steps");
    let summary: Vec<(String, u32, StepStatus)> = steps
        .iter()
        .map(|s| match s {
            StepRecord::Model(m) => ("model".to_owned(), m.index, m.status),
            StepRecord::Tool(t) => ("tool".to_owned(), t.index, t.status),
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("model".into(), 0, StepStatus::Completed),
            ("tool".into(), 1, StepStatus::Completed),
            ("model".into(), 2, StepStatus::Completed)
        ]
    );
    let StepRecord::Tool(tool_step) = &steps[1] else {
        panic!()
    };
    assert_eq!(tool_step.input, json!({ "text": "hi", "loud": false }));
    let StepRecord::Model(first) = &steps[0] else {
        panic!()
    };
    let request = first.request.as_ref().expect("request stored");
    assert_eq!(request["instructions"], "be brief");
    assert!(request.get("signal").is_none());
    assert_eq!(first.reply.as_ref().expect("reply")["finish"], "tool_calls");
    let record = store.get_run(&run_ref).await.expect("get").expect("record");
    assert_eq!(record.status, RunStatus::Completed);
    assert_eq!(record.steps, 2);
    let session = store.get_session("s").await.expect("get").expect("session");
    assert_eq!(session.active_writer_run_id, None, "the claim is released");
    let stored = store.list_events(&run_ref, None).await.expect("events");
    assert_eq!(stored, events, "stored events equal the stream (item 52)");
    assert_eq!(
        stored
            .iter()
            .filter(|e| e.type_name() == "run.finished")
            .count(),
        1
    );
}

#[tokio::test]
async fn arguments_that_are_not_json_are_proposed_then_denied() {
    let model = FakeModel::new(vec![
        FakeStep::raw_tool_call("echo", "{not json"),
        FakeStep::text("ok"),
    ]);
    let handle = run(&echo_agent(&model, memory()), RunOptions::new("s", "x"));
    let events = all_events(&handle).await;
    assert_eq!(
        &types(&events)[3..6],
        ["tool.proposed", "tool.denied", "model.started"]
    );
    let EventBody::ToolDenied { reason, .. } = &events[4].body else {
        panic!()
    };
    assert!(reason.starts_with("Invalid arguments"));
    let second = &model.requests()[1];
    let (content, is_error) = result_of(second.messages.last().expect("result"));
    assert!(is_error && content.starts_with("Invalid arguments"));
    assert_eq!(handle.outcome().await.status(), RunStatus::Completed);
}

#[tokio::test]
async fn an_unknown_tool_is_denied_without_a_proposal() {
    let model = FakeModel::new(vec![
        FakeStep::tool_call("nope", json!({})),
        FakeStep::text("ok"),
    ]);
    let handle = run(&echo_agent(&model, memory()), RunOptions::new("s", "x"));
    let events = all_events(&handle).await;
    assert_eq!(
        &types(&events)[2..5],
        ["model.completed", "tool.denied", "model.started"]
    );
    assert!(!types(&events).contains(&"tool.proposed"));
    assert_eq!(handle.outcome().await.status(), RunStatus::Completed);
}

struct DenyTools;
#[async_trait]
impl Hooks for DenyTools {
    async fn before_tool(
        &self,
        _c: &ToolCall,
        _t: &Tool,
        _r: &RunInfo,
    ) -> Result<BeforeTool, String> {
        Ok(BeforeTool::Deny {
            reason: "not here".into(),
        })
    }
}

#[tokio::test]
async fn a_before_tool_deny_refuses_with_the_hooks_reason() {
    let model = FakeModel::new(vec![echo_call("hi"), FakeStep::text("ok")]);
    let agent = builder(&model, memory())
        .tool(echo_tool())
        .hooks(Arc::new(DenyTools))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let events = all_events(&handle).await;
    assert!(!types(&events).contains(&"tool.started"));
    let denied = events
        .iter()
        .find(|e| e.type_name() == "tool.denied")
        .expect("denied");
    assert!(matches!(&denied.body, EventBody::ToolDenied { reason, .. } if reason == "not here"));
    assert_eq!(handle.outcome().await.status(), RunStatus::Completed);
}

#[tokio::test]
async fn a_destructive_tool_pauses_and_an_approve_completes_with_fourteen_events() {
    let runs = Arc::new(Mutex::new(Vec::new()));
    let model = FakeModel::new(vec![
        FakeStep::tool_call("rm", json!({ "path": "/tmp/x" })),
        FakeStep::text("gone"),
    ]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(rm_tool(runs.clone()))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "clean"));
    let (request_id, kind) = pause(&handle, 0).await;
    assert_eq!(kind, RequestKind::Approval);
    let finished = next_of(&handle, "run.finished", 0).await;
    let awaiting = finished.finished_outcome().expect("outcome");
    assert!(
        matches!(&awaiting.kind, OutcomeKind::Awaiting { request_id: r, kind: RequestKind::Approval, .. } if *r == request_id)
    );
    assert_eq!(awaiting.steps, 1);
    assert_eq!(handle.status(), RunStatus::Awaiting);
    let run_ref = RunRef::new("s", handle.run_id());
    let request = store
        .get_request(&run_ref, &request_id)
        .await
        .expect("get")
        .expect("request");
    assert_eq!(request.payload["name"], "rm");
    assert_eq!(request.payload["input"], json!({ "path": "/tmp/x" }));
    assert!(request.call_id.is_some());
    let record = store.get_run(&run_ref).await.expect("get").expect("record");
    assert_eq!(record.status, RunStatus::Awaiting);
    assert_eq!(
        record.pending_request_id.as_deref(),
        Some(request_id.as_str())
    );
    let session = store.get_session("s").await.expect("get").expect("session");
    assert_eq!(
        session.active_writer_run_id.as_deref(),
        Some(handle.run_id()),
        "the claim is kept"
    );

    // Item 30: a wrong id changes nothing, the right one runs the tool once.
    let wrong = handle
        .submit(Command::Approve {
            request_id: "nope".into(),
            input: None,
            always_approve: None,
        })
        .await;
    assert_eq!(wrong.expect_err("wrong id").code, ErrorCode::NotFound);
    assert_eq!(handle.status(), RunStatus::Awaiting);
    assert!(runs.lock().expect("runs").is_empty());
    handle
        .submit(Command::Approve {
            request_id,
            input: None,
            always_approve: None,
        })
        .await
        .expect("approve");
    let outcome = handle.outcome().await;
    assert_eq!(outcome.status(), RunStatus::Completed);
    assert_eq!(outcome.steps, 2);
    assert_eq!(runs.lock().expect("runs").len(), 1);
    let session = store.get_session("s").await.expect("get").expect("session");
    assert_eq!(session.active_writer_run_id, None);
    assert_eq!(
        types(&all_events(&handle).await),
        [
            "run.started",
            "model.started",
            "model.completed",
            "tool.proposed",
            "approval.requested",
            "run.paused",
            "run.finished",
            "approval.resolved",
            "run.resumed",
            "tool.started",
            "tool.completed",
            "model.started",
            "model.completed",
            "run.finished"
        ]
    );
}

fn asking_tool() -> Tool {
    let def = ToolDef::new(
        "ask",
        "Asks.",
        json!({ "type": "object" }),
        handler_fn(|_input, _ctx| async move {
            Err::<ToolOutput, _>(ToolError::pause_for_input(vec![
                cofold_agents::question::Question::new("q1", "Which?"),
            ]))
        }),
    );
    Tool::new(def).expect("ask tool")
}

#[tokio::test]
async fn a_tool_that_pauses_for_input_is_answered_on_the_same_handle() {
    let model = FakeModel::new(vec![
        FakeStep::tool_call("ask", json!({})),
        FakeStep::text("thanks"),
    ]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(asking_tool())
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let (request_id, kind) = pause(&handle, 0).await;
    assert_eq!(kind, RequestKind::Input);
    let events = handle.events();
    let so_far: Vec<Event> = futures::StreamExt::collect(futures::StreamExt::take(events, 7)).await;
    assert_eq!(
        &types(&so_far)[3..],
        [
            "tool.proposed",
            "tool.started",
            "input.requested",
            "run.paused"
        ]
    );
    let run_ref = RunRef::new("s", handle.run_id());
    let request = store
        .get_request(&run_ref, &request_id)
        .await
        .expect("get")
        .expect("request");
    for key in ["name", "input", "questions", "invocationId"] {
        assert!(request.payload.get(key).is_some(), "payload has {key}");
    }
    let steps = store.list_steps(&run_ref).await.expect("steps");
    let StepRecord::Tool(step) = &steps[1] else {
        panic!()
    };
    assert_eq!(
        (step.status, step.ended_at.is_none()),
        (StepStatus::Started, true)
    );
    let record = store.get_run(&run_ref).await.expect("get").expect("record");
    assert_eq!(
        (record.status, record.steps, record.usage),
        (RunStatus::Awaiting, 1, Usage::new(1, 1))
    );

    handle
        .submit(Command::Answer {
            request_id,
            answers: json!({ "q1": "this one" }),
        })
        .await
        .expect("answer");
    assert_eq!(handle.outcome().await.status(), RunStatus::Completed);
    let all = types(&all_events(&handle).await);
    assert_eq!(
        &all[all.len() - 4..],
        [
            "tool.completed",
            "model.started",
            "model.completed",
            "run.finished"
        ]
    );
    let steps = store.list_steps(&run_ref).await.expect("steps");
    let StepRecord::Tool(step) = &steps[1] else {
        panic!()
    };
    assert_eq!(step.status, StepStatus::Completed);
    assert_eq!(
        step.original
            .as_ref()
            .expect("original")
            .detail
            .as_ref()
            .expect("detail")["answers"]["q1"],
        "this one"
    );
}

#[tokio::test]
async fn a_safe_call_runs_before_the_pause_and_both_run_in_order_after() {
    let runs = Arc::new(Mutex::new(Vec::new()));
    let calls = vec![
        cofold_agents::testing::FakeCall::new("echo", json!({ "text": "a" })),
        cofold_agents::testing::FakeCall::new("rm", json!({ "path": "b" })),
    ];
    let model = FakeModel::new(vec![FakeStep::tool_calls(calls), FakeStep::text("ok")]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tools([echo_tool(), rm_tool(runs.clone())])
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let (request_id, _) = pause(&handle, 0).await;
    let messages = store.list_messages("s", None).await.expect("messages");
    assert_eq!(messages.len(), 3, "the echo result is in before the pause");
    assert!(runs.lock().expect("runs").is_empty());
    handle
        .submit(Command::Approve {
            request_id,
            input: None,
            always_approve: None,
        })
        .await
        .expect("approve");
    handle.outcome().await;
    let messages = store.list_messages("s", None).await.expect("messages");
    assert_eq!(
        shape(&messages),
        pairs(&[
            ("user", "input"),
            ("assistant", "model"),
            ("tool", "tool"),
            ("tool", "tool"),
            ("assistant", "model")
        ])
    );
    assert_eq!(result_of(&messages[3]).0, "removed b");
}

#[tokio::test]
async fn a_remembered_approval_skips_the_pause() {
    let model = FakeModel::new(vec![
        FakeStep::tool_call("rm", json!({ "path": "x" })),
        FakeStep::text("ok"),
    ]);
    let store = memory();
    store
        .kv_set(
            &cofold_agents::store::KvScope::Agent {
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
    let events = all_events(&handle).await;
    assert!(!types(&events).contains(&"approval.requested"));
    assert_eq!(handle.outcome().await.status(), RunStatus::Completed);
}

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
    ) -> Result<BeforeModel, String> {
        match &self.before {
            Some(Ok(())) => Ok(BeforeModel::Abort {
                reason: "no".into(),
            }),
            Some(Err(e)) => Err(e.clone()),
            None => Ok(BeforeModel::Continue(request)),
        }
    }
    async fn after_model(&self, reply: ModelReply, _r: &RunInfo) -> Result<AfterModel, String> {
        match &self.after {
            Some(Ok(())) => Ok(AfterModel::Abort {
                reason: "enough".into(),
            }),
            Some(Err(e)) => Err(e.clone()),
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
    async fn tools(&self, _args: &CapabilityArgs) -> Result<Vec<Tool>, String> {
        Err("nope".into())
    }
}

struct Clock(Arc<Mutex<Option<CapabilityArgs>>>);
#[async_trait]
impl Capability for Clock {
    fn id(&self) -> &str {
        "clock"
    }
    async fn tools(&self, args: &CapabilityArgs) -> Result<Vec<Tool>, String> {
        *self.0.lock().expect("args") = Some(args.clone());
        let def = ToolDef::new(
            "now",
            "Tells the time.",
            json!({ "type": "object" }),
            handler_fn(|_i, _c| async { Ok::<_, ToolError>(ToolOutput::from("noon")) }),
        );
        Ok(vec![Tool::new(def).map_err(|e| e.message)?])
    }
    async fn instructions(&self, _args: &CapabilityArgs) -> Result<Option<String>, String> {
        Ok(Some("   tell the time   ".into()))
    }
}

struct Dup;
#[async_trait]
impl Capability for Dup {
    fn id(&self) -> &str {
        "dup"
    }
    async fn tools(&self, _args: &CapabilityArgs) -> Result<Vec<Tool>, String> {
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

struct Observer {
    store: Arc<dyn Store>,
    seen_awaiting: Arc<Mutex<Option<bool>>>,
    approve_from: Option<Arc<Mutex<Option<cofold_agents::run::RunHandle>>>>,
}
impl Hooks for Observer {
    fn on_event(&self, event: &Event) -> Result<(), String> {
        if let EventBody::ApprovalRequested { request_id, .. } = &event.body {
            let store = self.store.clone();
            let seen = self.seen_awaiting.clone();
            let run_ref = RunRef::new(event.session_id.clone(), event.run_id.clone());
            let handle = self
                .approve_from
                .as_ref()
                .and_then(|h| h.lock().expect("h").clone());
            let request_id = request_id.clone();
            // A synchronous observer must not block; it reads and answers on a task of its own.
            tokio::spawn(async move {
                let record = store.get_run(&run_ref).await.expect("get").expect("record");
                *seen.lock().expect("seen") = Some(record.status == RunStatus::Awaiting);
                if let Some(handle) = handle {
                    handle
                        .submit(Command::Approve {
                            request_id,
                            input: None,
                            always_approve: None,
                        })
                        .await
                        .expect("approve");
                }
            });
        }
        Ok(())
    }
}

#[tokio::test]
async fn an_observer_sees_the_awaiting_record_and_may_approve_with_the_d3_order() {
    let model = FakeModel::new(vec![
        FakeStep::tool_call("rm", json!({ "path": "x" })),
        FakeStep::text("ok"),
    ]);
    let store = memory();
    let seen = Arc::new(Mutex::new(None));
    let slot = Arc::new(Mutex::new(None));
    let hooks = Observer {
        store: store.clone(),
        seen_awaiting: seen.clone(),
        approve_from: Some(slot.clone()),
    };
    let agent = builder(&model, store.clone())
        .tool(rm_tool(Arc::default()))
        .hooks(Arc::new(hooks))
        .build()
        .expect("agent");
    // The handle is put in the slot before the run can reach its pause: the task needs the
    // model's first answer first, and this test holds the only thread until the slot is set.
    let handle = run(&agent, RunOptions::new("s", "x"));
    *slot.lock().expect("slot") = Some(handle.clone());
    let outcome = handle.outcome().await;
    assert_eq!(outcome.status(), RunStatus::Completed);
    assert_eq!(
        *seen.lock().expect("seen"),
        Some(true),
        "the record was awaiting when approval.requested was seen"
    );
    let events = types(&all_events(&handle).await);
    assert_eq!(events.iter().filter(|t| **t == "run.finished").count(), 2);
    let at = events
        .iter()
        .position(|t| *t == "approval.requested")
        .expect("requested");
    assert_eq!(
        &events[at..at + 6],
        [
            "approval.requested",
            "run.paused",
            "run.finished",
            "approval.resolved",
            "run.resumed",
            "tool.started"
        ]
    );
}

#[tokio::test]
async fn two_pauses_in_one_run_use_the_same_handle() {
    let calls = vec![
        cofold_agents::testing::FakeCall::new("rm", json!({ "path": "a" })),
        cofold_agents::testing::FakeCall::new("rm", json!({ "path": "b" })),
    ];
    let model = FakeModel::new(vec![FakeStep::tool_calls(calls), FakeStep::text("ok")]);
    let agent = builder(&model, memory())
        .tool(rm_tool(Arc::default()))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let (first, _) = pause(&handle, 0).await;
    handle
        .submit(Command::Approve {
            request_id: first.clone(),
            input: None,
            always_approve: None,
        })
        .await
        .expect("approve");
    let (second, _) = pause(&handle, 1).await;
    assert_ne!(first, second);
    assert_eq!(handle.status(), RunStatus::Awaiting);
    handle
        .submit(Command::Approve {
            request_id: second,
            input: None,
            always_approve: None,
        })
        .await
        .expect("approve");
    assert_eq!(handle.outcome().await.status(), RunStatus::Completed);
}

#[tokio::test]
async fn a_same_process_resume_of_a_paused_run_is_writer_busy() {
    let model = FakeModel::new(vec![
        FakeStep::tool_call("rm", json!({ "path": "a" })),
        FakeStep::text("ok"),
    ]);
    let agent = builder(&model, memory())
        .tool(rm_tool(Arc::default()))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    let (request_id, _) = pause(&handle, 0).await;
    let second = resume(
        &agent,
        ResumeOptions {
            session_id: "s".into(),
            run_id: handle.run_id().into(),
            after_seq: None,
        },
    );
    let OutcomeKind::Failed { error } = second.outcome().await.kind else {
        panic!()
    };
    assert_eq!(error.code, ErrorCode::WriterBusy);
    let refused = second
        .submit(Command::Approve {
            request_id: request_id.clone(),
            input: None,
            always_approve: None,
        })
        .await;
    assert_eq!(refused.expect_err("closed").code, ErrorCode::NotRunning);
    handle
        .submit(Command::Approve {
            request_id,
            input: None,
            always_approve: None,
        })
        .await
        .expect("approve");
    assert_eq!(handle.outcome().await.status(), RunStatus::Completed);
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

struct Slow;
#[tokio::test(start_paused = true)]
async fn heartbeats_run_every_ten_seconds_and_stop_when_the_run_settles() {
    let _ = Slow;
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

#[tokio::test]
async fn cancels_from_a_fired_signal_or_a_command() {
    let model = FakeModel::new(vec![FakeStep::text("x")]);
    let controller = AbortController::new();
    controller.abort(AbortReason::Cancel { reason: None });
    let mut opts = RunOptions::new("s", "x");
    opts.signal = Some(controller.signal());
    let handle = run(&echo_agent(&model, memory()), opts);
    let outcome = handle.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Cancelled { reason } if reason.as_deref() == Some("signal"))
    );
    assert_eq!(outcome.steps, 0);

    let gate = Arc::new(tokio::sync::Notify::new());
    let model = FakeModel::new(vec![FakeStep::block().gated(gate)]);
    let handle = run(&echo_agent(&model, memory()), RunOptions::new("s", "x"));
    next_of(&handle, "model.started", 0).await;
    handle
        .submit(Command::Cancel {
            reason: Some("stop it".into()),
        })
        .await
        .expect("cancel");
    let outcome = handle.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Cancelled { reason } if reason.as_deref() == Some("stop it"))
    );
}

#[tokio::test]
async fn every_events_stream_sees_the_same_nine_events() {
    let model = FakeModel::new(vec![echo_call("hi"), FakeStep::text("done")]);
    let handle = run(&echo_agent(&model, memory()), RunOptions::new("s", "x"));
    let (a, b) = tokio::join!(all_events(&handle), all_events(&handle));
    handle.outcome().await;
    let c = all_events(&handle).await;
    assert_eq!(a.len(), 9);
    assert_eq!(a, b);
    assert_eq!(a, c);
}

#[tokio::test]
async fn the_first_workspace_sticks_and_tools_get_a_workspace_scope() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_in_tool = seen.clone();
    let def = ToolDef::new(
        "where",
        "Says where.",
        json!({ "type": "object" }),
        handler_fn(move |_i, ctx: cofold_agents::tool::ToolContext| {
            let seen = seen_in_tool.clone();
            async move {
                seen.lock()
                    .expect("seen")
                    .push((ctx.workspace.clone(), ctx.kv.workspace.is_some()));
                Ok::<_, ToolError>(ToolOutput::from("here"))
            }
        }),
    );
    let tool = Tool::new(def).expect("tool");
    let store = memory();
    for workspace in ["/w/one", "/w/two"] {
        let model = FakeModel::new(vec![
            FakeStep::tool_call("where", json!({})),
            FakeStep::text("ok"),
        ]);
        let agent = builder(&model, store.clone())
            .tool(tool.clone())
            .build()
            .expect("agent");
        let mut opts = RunOptions::new("s", "x");
        opts.workspace = Some(workspace.into());
        run(&agent, opts).outcome().await;
    }
    assert_eq!(
        store
            .get_session("s")
            .await
            .expect("g")
            .expect("s")
            .workspace
            .as_deref(),
        Some("/w/one")
    );
    assert_eq!(
        *seen.lock().expect("seen"),
        vec![(Some("/w/one".to_owned()), true); 2]
    );
    let found = store
        .list_sessions(SessionQuery {
            workspace: Some("/w/one".into()),
            ..SessionQuery::default()
        })
        .await;
    assert_eq!(found.expect("list").len(), 1);
}

struct FailingObserver;
impl Hooks for FailingObserver {
    fn on_event(&self, _event: &Event) -> Result<(), String> {
        Err("observer broke".into())
    }
}

#[tokio::test]
async fn input_parts_are_kept_and_observer_failures_are_warned() {
    let warnings = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = warnings.clone();
    let model = FakeModel::new(vec![FakeStep::text("seen")]);
    let agent = builder(&model, memory())
        .hooks(Arc::new(FailingObserver))
        .warn(move |m| sink.lock().expect("w").push(m.to_owned()))
        .build()
        .expect("agent");
    let parts = vec![Part::text("look"), Part::image_data("image/png", "AAAA")];
    let handle = run(&agent, RunOptions::new("s", Input::Parts(parts.clone())));
    let events = all_events(&handle).await;
    assert_eq!(events.len(), 4);
    let EventBody::RunStarted { input } = &events[0].body else {
        panic!()
    };
    assert_eq!(input.parts, parts);
    let warnings = warnings.lock().expect("w").clone();
    let observer: Vec<_> = warnings
        .iter()
        .filter(|w| w.starts_with("onEvent observer threw"))
        .collect();
    assert_eq!(observer.len(), 4);
    assert_eq!(
        observer[0],
        "onEvent observer threw on run.started: observer broke"
    );
}

#[tokio::test]
async fn a_chosen_message_id_is_used_once_and_a_reused_one_writes_nothing() {
    let model = FakeModel::new(vec![FakeStep::text("a"), FakeStep::text("b")]);
    let store = memory();
    let agent = echo_agent(&model, store.clone());
    let mut opts = RunOptions::new("s", "x");
    opts.message_id = Some("m-1".into());
    let handle = run(&agent, opts.clone());
    let events = all_events(&handle).await;
    assert!(matches!(&events[0].body, EventBody::RunStarted { input } if input.id == "m-1"));
    let record = store
        .get_run(&RunRef::new("s", handle.run_id()))
        .await
        .expect("g")
        .expect("r");
    assert_eq!(record.input_message_id.as_deref(), Some("m-1"));
    assert_eq!(
        store.list_messages("s", None).await.expect("m")[0].id,
        "m-1"
    );

    let again = run(&agent, opts);
    assert_eq!(types(&all_events(&again).await), ["run.finished"]);
    let outcome = again.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Failed { error } if error.code == ErrorCode::AlreadyExists)
    );
    assert_eq!(outcome.steps, 0);
    assert!(
        store
            .get_run(&RunRef::new("s", again.run_id()))
            .await
            .expect("g")
            .is_none()
    );
    assert_eq!(store.list_messages("s", None).await.expect("m").len(), 2);
    assert_eq!(
        store
            .get_session("s")
            .await
            .expect("g")
            .expect("s")
            .active_writer_run_id,
        None
    );
}

#[tokio::test]
async fn compact_takes_the_chosen_ask_id_and_runs_carry_the_model_reference() {
    let model = FakeModel::new(vec![
        FakeStep::text("a"),
        FakeStep::text("summary"),
        FakeStep::text("c"),
    ]);
    let store = memory();
    let agent = echo_agent(&model, store.clone());
    let mut opts = RunOptions::new("s", "x");
    opts.model = Some("or/qwen/qwen3-8b".into());
    let first = run(&agent, opts);
    first.outcome().await;
    let record = store
        .get_run(&RunRef::new("s", first.run_id()))
        .await
        .expect("g")
        .expect("r");
    assert_eq!(record.model.as_deref(), Some("or/qwen/qwen3-8b"));
    let handle = compact(
        &agent,
        CompactOptions {
            session_id: "s".into(),
            message_id: Some("ask-1".into()),
            signal: None,
        },
    );
    handle.outcome().await;
    let messages = store.list_messages("s", None).await.expect("m");
    let ask = messages.iter().find(|m| m.id == "ask-1").expect("ask");
    assert_eq!(
        shape(std::slice::from_ref(ask)),
        pairs(&[("user", "system")])
    );
    let third = run(&agent, RunOptions::new("s", "y"));
    third.outcome().await;
    let record = store
        .get_run(&RunRef::new("s", third.run_id()))
        .await
        .expect("g")
        .expect("r");
    assert!(
        serde_json::to_value(&record)
            .expect("json")
            .get("model")
            .is_none()
    );
}
