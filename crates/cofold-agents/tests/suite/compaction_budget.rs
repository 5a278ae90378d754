//! Compaction that loses nothing: a summary is marked as covering only what its request carried
//! (chunks when the history does not fit), a turn with nothing to cover does not compact, and one
//! oversized batch of results is cut to fit rather than wedging the session.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::run_support::*;
use cofold_agents::agent::{Agent, PartialContext};
use cofold_agents::compaction::{default_estimate, estimate_messages};
use cofold_agents::event::EventBody;
use cofold_agents::message::{Message, MessageSource, Part};
use cofold_agents::run::{CompactOptions, RunOptions, compact, run};
use cofold_agents::store::{RunStatus, Store};
use cofold_agents::testing::{FakeCall, FakeModel, FakeStep};
use cofold_agents::tool::{Tool, ToolDef, ToolError, ToolOutput, handler_fn};

fn agent_with(
    model: &FakeModel,
    store: std::sync::Arc<dyn Store>,
    context: PartialContext,
) -> Agent {
    builder(model, store)
        .tool(big_tool())
        .context(context)
        .build()
        .expect("agent")
}

/// `big`, answering 12000 characters.
fn big_tool() -> Tool {
    let def = ToolDef::new(
        "big",
        "Answers a lot.",
        json!({ "type": "object" }),
        handler_fn(|_input: Value, _ctx| async move {
            Ok::<_, ToolError>(ToolOutput::from("y".repeat(12_000)))
        }),
    );
    Tool::new(def).expect("big tool")
}

#[tokio::test]
async fn a_history_over_the_summary_budget_is_summarized_in_chunks_that_cover_what_they_saw() {
    let store = memory();
    open_session(&store).await;
    // Twenty turns of about 100 tokens each, against a 600-token budget.
    let model = FakeModel::new(Vec::new());
    for n in 0..20 {
        model.push([FakeStep::text(format!("answer {n} {}", "b".repeat(200)))]);
    }
    let agent = agent_with(
        &model,
        store.clone(),
        PartialContext {
            max_tokens: Some(600),
            compact_keep_tokens: Some(0),
            ..Default::default()
        },
    );
    for n in 0..20 {
        let said = format!("turn {n} {}", "a".repeat(200));
        run(&agent, RunOptions::new("s", said)).outcome().await;
    }
    let before: Vec<String> = store
        .list_messages("s", None)
        .await
        .expect("m")
        .iter()
        .map(|m| m.id.clone())
        .collect();
    let asked = model.requests().len();
    for n in 0..20 {
        model.push([FakeStep::text(format!("summary {n}"))]);
    }
    let handle = compact(
        &agent,
        CompactOptions {
            session_id: "s".into(),
            ..Default::default()
        },
    );
    let events = all_events(&handle).await;
    assert_eq!(handle.outcome().await.status(), RunStatus::Completed);
    let requests = model.requests()[asked..].to_vec();
    assert!(requests.len() > 1, "summarized in chunks");
    let compacted = events
        .iter()
        .filter(|e| matches!(e.body, EventBody::ContextCompacted { .. }))
        .count();
    assert_eq!(compacted, requests.len());

    let messages = store.list_messages("s", None).await.expect("m");
    let summaries: Vec<&Message> = messages
        .iter()
        .filter(|m| m.source == MessageSource::Summary)
        .collect();
    assert_eq!(summaries.len(), requests.len());
    // Each summary newly covers only messages its own request carried.
    let mut covered_before: HashSet<String> = HashSet::new();
    for (summary, request) in summaries.iter().zip(&requests) {
        let budget = 600u64.saturating_sub(default_estimate(&request.instructions));
        assert!(estimate_messages(&request.messages, &default_estimate) <= budget);
        let seen: HashSet<&str> = request.messages.iter().map(|m| m.id.as_str()).collect();
        let covers: HashSet<String> = summary
            .summarizes
            .clone()
            .expect("covers")
            .into_iter()
            .collect();
        for id in covers.difference(&covered_before) {
            assert!(seen.contains(id.as_str()), "{id} was marked covered unseen");
        }
        covered_before = covers;
        covered_before.insert(summary.id.clone());
    }
    // And together they cover the whole history before the compaction.
    for id in &before {
        assert!(covered_before.contains(id), "{id} was lost");
    }
}

#[tokio::test]
async fn a_kept_tail_over_the_threshold_causes_no_summary_step() {
    let model = FakeModel::new(vec![
        FakeStep::text("a fairly long first answer to make the history grow"),
        FakeStep::text("second answer"),
    ]);
    let store = memory();
    let agent = agent_with(
        &model,
        store.clone(),
        PartialContext {
            auto_compact_tokens: Some(10),
            compact_keep_tokens: Some(10_000),
            ..Default::default()
        },
    );
    run(&agent, RunOptions::new("s", "first question"))
        .outcome()
        .await;
    let handle = run(&agent, RunOptions::new("s", "second question"));
    let events = all_events(&handle).await;
    let outcome = handle.outcome().await;
    assert_eq!(outcome.status(), RunStatus::Completed);
    assert_eq!(outcome.steps, 1, "no summary step");
    assert!(!types(&events).contains(&"context.compacted"));
    assert_eq!(model.requests().len(), 2);
    let messages = store.list_messages("s", None).await.expect("m");
    assert!(messages.iter().all(|m| m.source != MessageSource::Summary));
}

#[tokio::test]
async fn one_oversized_batch_is_cut_to_fit_and_says_so() {
    let calls = vec![
        FakeCall::new("big", json!({})),
        FakeCall::new("big", json!({})),
        FakeCall::new("big", json!({})),
    ];
    let model = FakeModel::new(vec![FakeStep::tool_calls(calls), FakeStep::text("read it")]);
    let store = memory();
    let agent = agent_with(
        &model,
        store.clone(),
        PartialContext {
            max_tokens: Some(2_000),
            ..Default::default()
        },
    );
    let handle = run(&agent, RunOptions::new("s", "go"));
    assert_eq!(handle.outcome().await.status(), RunStatus::Completed);
    let request = model.requests().pop().expect("request");
    let budget = 2_000u64.saturating_sub(default_estimate(&request.instructions));
    assert!(estimate_messages(&request.messages, &default_estimate) <= budget);
    let results: Vec<&str> = request
        .messages
        .iter()
        .flat_map(|m| m.parts.iter())
        .filter_map(|p| match p {
            Part::ToolResult(r) => Some(r.content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 3);
    assert!(
        results
            .iter()
            .all(|r| r.contains("cut to fit the model's context"))
    );
    // The store keeps every result whole.
    let stored = store.list_messages("s", None).await.expect("m");
    assert!(stored.iter().any(|m| {
        m.parts
            .iter()
            .any(|p| matches!(p, Part::ToolResult(r) if r.content.len() == 12_000))
    }));
}
