//! Steering (runtime cases, section D of docs/acceptance.md): steers land before the next model step, or fail `not_running`.

use std::sync::Arc;

use serde_json::json;
use tokio::sync::Notify;

use super::run_support::*;
use cofold_agents::error::ErrorCode;
use cofold_agents::event::{Command, EventBody, RunStatus};
use cofold_agents::message::Part;
use cofold_agents::run::{ResumeOptions, RunOptions, resume, run};
use cofold_agents::store::{RunRef, Store};
use cofold_agents::testing::{FakeModel, FakeStep};
use cofold_agents::tool::{Tool, ToolDef, ToolError, ToolOutput, handler_fn};

fn steer(text: &str, parts: Option<Vec<Part>>) -> Command {
    Command::Steer {
        text: text.into(),
        parts,
    }
}

fn gated_tool(gate: Arc<Notify>) -> Tool {
    let def = ToolDef::new(
        "wait",
        "Waits for the test.",
        json!({ "type": "object" }),
        handler_fn(move |_i, _c| {
            let gate = gate.clone();
            async move {
                gate.notified().await;
                Ok::<_, ToolError>(ToolOutput::from("waited"))
            }
        }),
    );
    Tool::new(def).expect("tool")
}

#[tokio::test]
async fn a_steer_during_a_tool_lands_after_its_result() {
    let gate = Arc::new(Notify::new());
    let model = FakeModel::new(vec![
        FakeStep::tool_call("wait", json!({})),
        FakeStep::text("done"),
    ]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(gated_tool(gate.clone()))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    next_of(&handle, "tool.started", 0).await;
    // Both steers are queued on their first poll, before the tool is let go.
    let (one, two, ()) = tokio::join!(
        handle.submit(steer("first", None)),
        handle.submit(steer("second", None)),
        async { gate.notify_one() }
    );
    one.expect("first steer");
    two.expect("second steer");
    handle.outcome().await;
    let events = types(&all_events(&handle).await);
    let at = events
        .iter()
        .position(|t| *t == "tool.completed")
        .expect("completed");
    assert_eq!(
        &events[at..at + 4],
        [
            "tool.completed",
            "run.steered",
            "run.steered",
            "model.started"
        ]
    );
    let roles: Vec<String> = shape(&model.requests()[1].messages)
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "user", "user"]);
    let messages = store.list_messages("s", None).await.expect("messages");
    assert_eq!(
        (text(&messages[3]).as_str(), text(&messages[4]).as_str()),
        ("first", "second")
    );
    assert_eq!(shape(&messages[3..4]), pairs(&[("user", "input")]));
    let stored = store
        .list_events(&RunRef::new("s", handle.run_id()), None)
        .await
        .expect("events");
    assert_eq!(
        types(&stored)
            .iter()
            .filter(|t| **t == "run.steered")
            .count(),
        2
    );
}

#[tokio::test]
async fn a_steer_sent_while_a_resumed_runs_tool_works_is_accepted() {
    // Item 92.
    let gate = Arc::new(Notify::new());
    let model = FakeModel::new(vec![
        FakeStep::tool_call("wait", json!({})),
        FakeStep::text("done"),
    ]);
    let store = memory();
    let tool = gated_tool(gate.clone());
    let policy = cofold_agents::policy::policy_fn(|_args| cofold_agents::policy::Decision::ask());
    let agent = builder(&model, store.clone())
        .tool(tool)
        .policy(policy)
        .build()
        .expect("agent");
    let first = run(&agent, RunOptions::new("s", "x"));
    let (request_id, _) = pause(&first, 0).await;
    assert!(first.detach());
    let handle = resume(
        &agent,
        ResumeOptions {
            session_id: "s".into(),
            run_id: first.run_id().into(),
            after_seq: None,
        },
    );
    handle
        .submit(Command::Approve {
            request_id,
            input: None,
            always_approve: None,
        })
        .await
        .expect("approve");
    next_of(&handle, "tool.started", 0).await;
    let (landed, ()) = tokio::join!(handle.submit(steer("meanwhile", None)), async {
        gate.notify_one()
    });
    landed.expect("accepted");
    handle.outcome().await;
    assert_eq!(
        text(
            model
                .requests()
                .last()
                .expect("r")
                .messages
                .last()
                .expect("m")
        ),
        "meanwhile"
    );
}

#[tokio::test]
async fn a_steer_after_the_end_or_during_the_last_step_is_not_running() {
    let model = FakeModel::new(vec![FakeStep::text("done")]);
    let store = memory();
    let handle = run(
        &echo_agent(&model, store.clone()),
        RunOptions::new("s", "x"),
    );
    handle.outcome().await;
    assert_eq!(
        handle
            .submit(steer("late", None))
            .await
            .expect_err("closed")
            .code,
        ErrorCode::NotRunning
    );

    let gate = Arc::new(Notify::new());
    let model = FakeModel::new(vec![FakeStep::text("done").gated(gate.clone())]);
    let store = memory();
    let handle = run(
        &echo_agent(&model, store.clone()),
        RunOptions::new("s", "x"),
    );
    next_of(&handle, "model.started", 0).await;
    let (refused, ()) = tokio::join!(handle.submit(steer("too late", None)), async {
        gate.notify_one()
    });
    assert_eq!(refused.expect_err("not read").code, ErrorCode::NotRunning);
    assert_eq!(
        shape(&store.list_messages("s", None).await.expect("m")),
        pairs(&[("user", "input"), ("assistant", "model")])
    );
}

#[tokio::test]
async fn a_steer_on_a_resumed_paused_run_waits_for_the_approve() {
    let model = FakeModel::new(vec![
        FakeStep::tool_call("rm", json!({ "path": "p" })),
        FakeStep::text("ok"),
    ]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(rm_tool(Arc::default()))
        .build()
        .expect("agent");
    let first = run(&agent, RunOptions::new("s", "x"));
    let (request_id, _) = pause(&first, 0).await;
    assert!(first.detach());
    first.outcome().await;
    let handle = resume(
        &agent,
        ResumeOptions {
            session_id: "s".into(),
            run_id: first.run_id().into(),
            after_seq: None,
        },
    );
    let steered = {
        let handle = handle.clone();
        tokio::spawn(async move { handle.submit(steer("and then", None)).await })
    };
    next_of(&handle, "run.paused", 0).await;
    tokio::task::yield_now().await;
    assert_eq!(handle.status(), RunStatus::Awaiting);
    assert_eq!(
        store.list_messages("s", None).await.expect("m").len(),
        2,
        "the steer waits"
    );
    handle
        .submit(Command::Approve {
            request_id,
            input: None,
            always_approve: None,
        })
        .await
        .expect("approve");
    steered.await.expect("join").expect("steer landed");
    handle.outcome().await;
    let last_request = model.requests().last().cloned().expect("request");
    assert_eq!(
        text(last_request.messages.last().expect("last")),
        "and then"
    );
}

#[tokio::test]
async fn a_steer_waiting_at_a_pause_fails_when_the_run_is_cancelled() {
    let model = FakeModel::new(vec![
        FakeStep::tool_call("rm", json!({ "path": "p" })),
        FakeStep::text("ok"),
    ]);
    let store = memory();
    let agent = builder(&model, store.clone())
        .tool(rm_tool(Arc::default()))
        .build()
        .expect("agent");
    let handle = run(&agent, RunOptions::new("s", "x"));
    pause(&handle, 0).await;
    let steered = {
        let handle = handle.clone();
        tokio::spawn(async move { handle.submit(steer("never seen", None)).await })
    };
    tokio::task::yield_now().await;
    handle.cancel(None);
    assert_eq!(
        steered.await.expect("join").expect_err("refused").code,
        ErrorCode::NotRunning
    );
    let messages = store.list_messages("s", None).await.expect("m");
    assert!(messages.iter().all(|m| text(m) != "never seen"));
}

#[tokio::test]
async fn steer_parts_put_the_text_first_and_drop_only_empty_text_beside_parts() {
    let image = Part::image_data("image/png", "AAAA");
    type Case<'a> = (&'a str, Option<Vec<Part>>, Vec<Part>);
    let cases: Vec<Case<'_>> = vec![
        (
            "look",
            Some(vec![image.clone()]),
            vec![Part::text("look"), image.clone()],
        ),
        ("", Some(vec![image.clone()]), vec![image.clone()]),
        ("only", None, vec![Part::text("only")]),
        ("", None, vec![Part::text("")]),
    ];
    for (steer_text, parts, expected) in cases {
        let gate = Arc::new(Notify::new());
        let model = FakeModel::new(vec![
            echo_call("a").gated(gate.clone()),
            FakeStep::text("ok"),
        ]);
        let handle = run(&echo_agent(&model, memory()), RunOptions::new("s", "x"));
        next_of(&handle, "model.started", 0).await;
        let (landed, ()) = tokio::join!(handle.submit(steer(steer_text, parts)), async {
            gate.notify_one()
        });
        landed.expect("steer");
        let events = all_events(&handle).await;
        let message = events
            .iter()
            .find_map(|e| match &e.body {
                EventBody::RunSteered { message } => Some(message.clone()),
                _ => None,
            })
            .expect("steered");
        assert_eq!(message.parts, expected);
        let last = model.requests()[1].messages.last().cloned().expect("last");
        assert_eq!(last.parts, expected, "the next request holds the steer");
    }
    // A steer with a part other than text or image is refused.
    let model = FakeModel::new(vec![FakeStep::block()]);
    let handle = run(&echo_agent(&model, memory()), RunOptions::new("s", "x"));
    let bad = handle
        .submit(steer("x", Some(vec![Part::reasoning("no")])))
        .await;
    assert_eq!(bad.expect_err("refused").code, ErrorCode::InvalidOptions);
    handle.cancel(None);
}
