//! Compaction and context (runtime cases, section I of docs/acceptance.md): `compact`, automatic compaction, the kept tail, and
//! what the model is sent.

use std::sync::Arc;

use serde_json::json;

use super::run_support::*;
use cofold_agents::agent::{Agent, PartialContext};
use cofold_agents::error::ErrorCode;
use cofold_agents::event::{EventBody, OutcomeKind};
use cofold_agents::message::{MessageSource, Role};
use cofold_agents::run::{CompactOptions, RunOptions, compact, run};
use cofold_agents::store::{MemoryStore, RunRef, StepRecord, Store};
use cofold_agents::testing::{FakeModel, FakeStep};

fn compacted(events: &[cofold_agents::event::Event]) -> (u32, u32, u64, u64) {
    events
        .iter()
        .find_map(|e| match &e.body {
            EventBody::ContextCompacted {
                summarized,
                kept,
                estimated_tokens,
                after_tokens,
                ..
            } => Some((*summarized, *kept, *estimated_tokens, *after_tokens)),
            _ => None,
        })
        .expect("context.compacted")
}

fn agent_with(model: &FakeModel, store: Arc<MemoryStore>, context: PartialContext) -> Agent {
    builder(model, store)
        .tool(echo_tool())
        .context(context)
        .build()
        .expect("agent")
}

fn sources(messages: &[cofold_agents::message::Message]) -> Vec<MessageSource> {
    messages.iter().map(|m| m.source).collect()
}

#[tokio::test]
async fn compact_writes_a_summary_that_the_next_turn_reads_first() {
    // Item 150.
    let model = FakeModel::new(vec![
        FakeStep::text("hello there"),
        FakeStep::text("they said hello"),
        FakeStep::text("ok"),
    ]);
    let store = memory();
    let agent = agent_with(
        &model,
        store.clone(),
        PartialContext {
            compact_keep_tokens: Some(0),
            ..Default::default()
        },
    );
    run(&agent, RunOptions::new("s", "hi")).outcome().await;
    let handle = compact(
        &agent,
        CompactOptions {
            session_id: "s".into(),
            ..Default::default()
        },
    );
    let events = all_events(&handle).await;
    assert_eq!(
        types(&events),
        [
            "run.started",
            "model.started",
            "model.completed",
            "context.compacted",
            "run.finished"
        ]
    );
    let outcome = handle.outcome().await;
    assert_eq!(outcome.steps, 1);
    let OutcomeKind::Completed { message } = &outcome.kind else {
        panic!()
    };
    assert_eq!(
        (message.role, message.source),
        (Role::User, MessageSource::Summary)
    );
    assert_eq!(
        text(message),
        "Summary of the conversation so far:\n\nthey said hello"
    );
    let (summarized, kept, before, after) = compacted(&events);
    assert_eq!((summarized, kept), (3, 0));
    assert!(before > 0 && after <= before + 40);
    let request = &model.requests()[1];
    assert!(request.tools.is_empty());
    assert!(request.instructions.contains("## summary"));
    assert_eq!(
        sources(&request.messages),
        [
            MessageSource::Input,
            MessageSource::Model,
            MessageSource::System
        ]
    );
    let messages = store.list_messages("s", None).await.expect("m");
    assert_eq!(
        sources(&messages),
        [
            MessageSource::Input,
            MessageSource::Model,
            MessageSource::System,
            MessageSource::Summary
        ]
    );
    let first_three: Vec<String> = messages[..3].iter().map(|m| m.id.clone()).collect();
    assert_eq!(messages[3].summarizes.as_ref(), Some(&first_three));
    let steps = store
        .list_steps(&RunRef::new("s", handle.run_id()))
        .await
        .expect("steps");
    assert_eq!(steps.len(), 1);
    let StepRecord::Model(step) = &steps[0] else {
        panic!()
    };
    assert_eq!(step.detail.as_ref().expect("detail")["compacted"], 3);
    run(&agent, RunOptions::new("s", "next")).outcome().await;
    let next = model.requests().last().cloned().expect("request");
    assert_eq!(
        sources(&next.messages),
        [MessageSource::Summary, MessageSource::Input]
    );
}

#[tokio::test]
async fn summary_failures_write_no_summary() {
    // Item 151.
    for (step, code, message) in [
        (
            FakeStep::text("  "),
            ErrorCode::InvalidResponse,
            "summary: the model returned no summary".to_owned(),
        ),
        (
            FakeStep::error(ErrorCode::Server, "down"),
            ErrorCode::Server,
            "summary: down".to_owned(),
        ),
    ] {
        let model = FakeModel::new(vec![FakeStep::text("hello"), step]);
        let store = memory();
        let agent = agent_with(&model, store.clone(), PartialContext::default());
        run(&agent, RunOptions::new("s", "hi")).outcome().await;
        let outcome = compact(
            &agent,
            CompactOptions {
                session_id: "s".into(),
                ..Default::default()
            },
        )
        .outcome()
        .await;
        let OutcomeKind::Failed { error } = &outcome.kind else {
            panic!("{outcome:?}")
        };
        assert_eq!(
            (error.code, error.message.as_str()),
            (code, message.as_str())
        );
        let messages = store.list_messages("s", None).await.expect("m");
        assert!(messages.iter().all(|m| m.source != MessageSource::Summary));
    }
}

#[tokio::test]
async fn auto_compaction_summarizes_before_answering() {
    // Item 152.
    let long = "x".repeat(400);
    let model = FakeModel::new(vec![
        FakeStep::text(long.clone()),
        FakeStep::text("summary of before"),
        FakeStep::text("answer"),
        FakeStep::text("short answer"),
    ]);
    let store = memory();
    let context = PartialContext {
        auto_compact_tokens: Some(150),
        compact_keep_tokens: Some(0),
        ..Default::default()
    };
    let agent = agent_with(&model, store.clone(), context.clone());
    // The previous exchange without auto-compaction (it would not trigger yet anyway).
    run(&agent, RunOptions::new("s", long.clone()))
        .outcome()
        .await;
    let handle = run(&agent, RunOptions::new("s", long.clone()));
    let events = all_events(&handle).await;
    assert_eq!(
        types(&events),
        [
            "run.started",
            "model.started",
            "model.completed",
            "context.compacted",
            "model.started",
            "model.completed",
            "run.finished"
        ]
    );
    let outcome = handle.outcome().await;
    assert_eq!(outcome.steps, 2);
    let OutcomeKind::Completed { message } = &outcome.kind else {
        panic!()
    };
    assert_eq!(text(message), "answer");
    let requests = model.requests();
    let summary_request = &requests[1];
    assert!(summary_request.tools.is_empty());
    assert_eq!(
        text(summary_request.messages.last().expect("ask")),
        "Summarize the conversation so far."
    );
    assert_eq!(
        sources(&requests[2].messages),
        [MessageSource::Summary, MessageSource::Input]
    );
    assert_eq!(compacted(&events).0, 2);
    assert_eq!(compacted(&events).1, 0);
    let messages = store.list_messages("s", None).await.expect("m");
    assert_eq!(
        sources(&messages),
        [
            MessageSource::Input,
            MessageSource::Model,
            MessageSource::Input,
            MessageSource::Summary,
            MessageSource::Model
        ]
    );
    // A short next turn does not compact.
    let short = run(&agent, RunOptions::new("s", "hi"));
    assert!(!types(&all_events(&short).await).contains(&"context.compacted"));
}

#[tokio::test]
async fn the_tail_that_fits_is_kept_verbatim_and_units_are_never_split() {
    // Items 154 and 155: history = [u1, a1 (text), u2, call, result, a2 (text)], then compact.
    let model = FakeModel::new(vec![
        FakeStep::text("first answer"),
        echo_call("zz"),
        FakeStep::text("second"),
        FakeStep::text("the summary"),
    ]);
    let store = memory();
    let estimate = |text: &str| text.chars().count() as u64;
    let setup = |keep: u64| PartialContext {
        compact_keep_tokens: Some(keep),
        estimate_tokens: Some(Arc::new(estimate)),
        ..Default::default()
    };
    let agent = agent_with(&model, store.clone(), setup(0));
    run(&agent, RunOptions::new("s", "q1")).outcome().await;
    run(&agent, RunOptions::new("s", "q2")).outcome().await;
    let history = store.list_messages("s", None).await.expect("m");
    // "second" = 4 + 6 = 10 fits 10; the call unit is 4+4+{"text":"zz"} and its result more.
    let agent = agent_with(&model, store.clone(), setup(10));
    let handle = compact(
        &agent,
        CompactOptions {
            session_id: "s".into(),
            ..Default::default()
        },
    );
    let events = all_events(&handle).await;
    let (summarized, kept, before, after) = compacted(&events);
    assert_eq!(
        (summarized, kept),
        (6, 1),
        "five covered plus the ask, one kept"
    );
    assert!(after < before);
    let summary_request = model.requests().last().cloned().expect("request");
    assert!(
        summary_request
            .messages
            .iter()
            .all(|m| m.id != history[5].id),
        "the tail is never summarized"
    );
    let steps = store
        .list_steps(&RunRef::new("s", handle.run_id()))
        .await
        .expect("steps");
    let StepRecord::Model(step) = &steps[0] else {
        panic!()
    };
    assert_eq!(step.detail, Some(json!({ "compacted": 6, "kept": 1 })));
    // The view is summary, then the kept tail.
    let view =
        cofold_agents::compaction::context_of(&store.list_messages("s", None).await.expect("m"));
    assert_eq!(view[0].source, MessageSource::Summary);
    assert_eq!(view[1].id, history[5].id);
}

#[tokio::test]
async fn compact_keep_tokens_defaults_to_a_fifth_of_max_tokens() {
    // Item 153.
    let model = FakeModel::new(vec![]);
    let agent = builder(&model, memory())
        .context(PartialContext {
            max_tokens: Some(10_000),
            ..Default::default()
        })
        .build()
        .expect("agent");
    assert_eq!(agent.context().compact_keep_tokens, 2_000);
}

#[tokio::test]
async fn requests_carry_the_newest_units_that_fit() {
    // Item 160: a budget that fits only the newest exchange.
    let model = FakeModel::new(vec![FakeStep::text("a".repeat(100)), FakeStep::text("b")]);
    let store = memory();
    let estimate = |text: &str| text.chars().count() as u64;
    let context = PartialContext {
        max_tokens: Some(60),
        estimate_tokens: Some(Arc::new(estimate)),
        ..Default::default()
    };
    let agent = builder(&model, store)
        .context(context)
        .build()
        .expect("agent");
    run(&agent, RunOptions::new("s", "one")).outcome().await;
    run(&agent, RunOptions::new("s", "two")).outcome().await;
    let request = model.requests().last().cloned().expect("request");
    // Budget 60 - "be brief" (8) = 52: the 104-token answer does not fit, so only the new input.
    assert_eq!(request.messages.len(), 1);
    assert_eq!(text(&request.messages[0]), "two");
    assert_eq!(request.instructions, "be brief");
    assert_eq!(request.cache_key.as_deref(), Some("s"));
}

#[tokio::test]
async fn auto_compaction_keeps_the_tail_too() {
    // Item 157.
    let long = "y".repeat(400);
    let model = FakeModel::new(vec![
        FakeStep::text("ok"),
        FakeStep::text("gist"),
        FakeStep::text("answer"),
    ]);
    let store = memory();
    let context = PartialContext {
        auto_compact_tokens: Some(150),
        compact_keep_tokens: Some(5),
        ..Default::default()
    };
    let agent = agent_with(&model, store.clone(), context);
    run(&agent, RunOptions::new("s", long.clone()))
        .outcome()
        .await;
    let handle = run(&agent, RunOptions::new("s", long.clone()));
    let events = all_events(&handle).await;
    let (summarized, kept, _, _) = compacted(&events);
    assert_eq!((summarized, kept), (1, 1));
    let answering = model.requests().last().cloned().expect("request");
    assert_eq!(
        sources(&answering.messages),
        [
            MessageSource::Summary,
            MessageSource::Model,
            MessageSource::Input
        ]
    );
    assert_eq!(text(&answering.messages[1]), "ok");
}
