//! Pauses (runtime cases, section B of docs/acceptance.md): approvals and questions answered on the same handle, remembered
//! approvals, an observer acting on the awaiting record, and a paused run's claim.

use std::sync::{Arc, Mutex};

use serde_json::json;

use super::run_support::*;
use cofold_agents::error::ErrorCode;
use cofold_agents::event::{Command, Event, EventBody, OutcomeKind, RequestKind, RunStatus};
use cofold_agents::hooks::{HookError, Hooks};
use cofold_agents::model::Usage;
use cofold_agents::run::{ResumeOptions, RunOptions, resume, run};
use cofold_agents::store::{RunRef, StepRecord, StepStatus, Store};
use cofold_agents::testing::{FakeModel, FakeStep};
use cofold_agents::tool::{Tool, ToolDef, ToolError, ToolOutput, handler_fn};

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

struct Observer {
    store: Arc<dyn Store>,
    seen_awaiting: Arc<Mutex<Option<bool>>>,
    approve_from: Option<Arc<Mutex<Option<cofold_agents::run::RunHandle>>>>,
}
impl Hooks for Observer {
    fn on_event(&self, event: &Event) -> Result<(), HookError> {
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
