//! Runs (runtime cases, section B of docs/acceptance.md): the canonical sequences and records, tool calls refused before they run,
//! cancels, event streams, workspaces, input parts, chosen message ids and the model reference.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::json;

use super::run_support::*;
use cofold_agents::error::ErrorCode;
use cofold_agents::event::{Command, Event, EventBody, OutcomeKind, RunStatus};
use cofold_agents::hooks::{BeforeTool, HookError, Hooks, RunInfo};
use cofold_agents::message::{Input, Part, ToolCall};
use cofold_agents::model::Usage;
use cofold_agents::run::{CompactOptions, RunOptions, compact, run};
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
    ) -> Result<BeforeTool, HookError> {
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
    fn on_event(&self, _event: &Event) -> Result<(), HookError> {
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
