//! Streaming (runtime cases, section F of docs/acceptance.md): deltas are stored one per fragment and replay like live.

use serde_json::json;

use super::run_support::*;
use cofold_agents::error::ErrorCode;
use cofold_agents::event::{DeltaKind, EventBody, OutcomeKind};
use cofold_agents::message::Part;
use cofold_agents::model::ModelFeatures;
use cofold_agents::run::{CompactOptions, ResumeOptions, RunOptions, compact, resume, run};
use cofold_agents::store::{RunRef, StepRecord, StepStatus, Store};
use cofold_agents::testing::{FakeModel, FakeOptions, FakeStep};

fn deltas(events: &[cofold_agents::event::Event]) -> Vec<(u32, DeltaKind, String)> {
    events
        .iter()
        .filter_map(|e| match &e.body {
            EventBody::ModelDelta { step, kind, text } => Some((*step, *kind, text.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn streamed_text_is_stored_one_delta_per_chunk() {
    let chunks = vec!["Hel".to_owned(), "lo ".to_owned(), "there".to_owned()];
    let model = FakeModel::streaming(vec![
        FakeStep::text("Hello there").with_chunks(chunks.clone()),
    ]);
    let store = memory();
    let handle = run(
        &echo_agent(&model, store.clone()),
        RunOptions::new("s", "x"),
    );
    let events = all_events(&handle).await;
    assert_eq!(
        types(&events),
        [
            "run.started",
            "model.started",
            "model.delta",
            "model.delta",
            "model.delta",
            "model.completed",
            "run.finished"
        ]
    );
    let found = deltas(&events);
    assert!(
        found
            .iter()
            .all(|(step, kind, _)| *step == 1 && *kind == DeltaKind::Text)
    );
    assert_eq!(
        found.iter().map(|d| d.2.as_str()).collect::<String>(),
        "Hello there"
    );
    let run_ref = RunRef::new("s", handle.run_id());
    assert_eq!(
        store.list_events(&run_ref, None).await.expect("events"),
        events
    );
    let steps = store.list_steps(&run_ref).await.expect("steps");
    let StepRecord::Model(step) = &steps[0] else {
        panic!()
    };
    assert_eq!(
        step.reply.as_ref().expect("reply")["message"]["parts"][0]["text"],
        "Hello there"
    );

    // Item 109: a resume of the finished run replays the same events and outcome.
    let agent = echo_agent(&model, store.clone());
    let again = resume(
        &agent,
        ResumeOptions {
            session_id: "s".into(),
            run_id: handle.run_id().into(),
            after_seq: None,
        },
    );
    assert_eq!(all_events(&again).await, events);
    assert_eq!(again.outcome().await, handle.outcome().await);
}

#[tokio::test]
async fn a_tool_step_has_no_deltas_and_the_next_step_is_numbered_two() {
    let model = FakeModel::streaming(vec![echo_call("a"), FakeStep::text("all done")]);
    let handle = run(&echo_agent(&model, memory()), RunOptions::new("s", "x"));
    let found = deltas(&all_events(&handle).await);
    assert!(!found.is_empty());
    assert!(found.iter().all(|(step, _, _)| *step == 2));
}

#[tokio::test]
async fn reasoning_streams_first_and_stays_on_the_message() {
    let model = FakeModel::streaming(vec![FakeStep::text("answer").with_reasoning("thinking")]);
    let handle = run(&echo_agent(&model, memory()), RunOptions::new("s", "x"));
    let found = deltas(&all_events(&handle).await);
    assert_eq!(found[0], (1, DeltaKind::Reasoning, "thinking".to_owned()));
    assert!(
        found[1..]
            .iter()
            .all(|(_, kind, _)| *kind == DeltaKind::Text)
    );
    let OutcomeKind::Completed { message } = handle.outcome().await.kind else {
        panic!()
    };
    assert!(matches!(
        &message.parts[..],
        [Part::Reasoning { .. }, Part::Text { .. }]
    ));
}

#[tokio::test]
async fn a_stream_without_done_fails_and_a_later_run_reads_a_valid_history() {
    let chunks = vec!["a ".to_owned(), "b".to_owned()];
    let model = FakeModel::streaming(vec![
        FakeStep::text("a b").with_chunks(chunks).interrupted(),
        FakeStep::text("fine"),
    ]);
    let store = memory();
    let agent = echo_agent(&model, store.clone());
    let handle = run(&agent, RunOptions::new("s", "one"));
    assert_eq!(
        types(&all_events(&handle).await),
        [
            "run.started",
            "model.started",
            "model.delta",
            "model.delta",
            "run.finished"
        ]
    );
    let OutcomeKind::Failed { error } = handle.outcome().await.kind else {
        panic!()
    };
    assert_eq!(
        (error.code, error.message.as_str()),
        (
            ErrorCode::InvalidResponse,
            "the stream ended before the reply was complete"
        )
    );
    let steps = store
        .list_steps(&RunRef::new("s", handle.run_id()))
        .await
        .expect("steps");
    assert!(matches!(&steps[0], StepRecord::Model(m) if m.status == StepStatus::Failed));
    assert_eq!(store.list_messages("s", None).await.expect("m").len(), 1);
    run(&agent, RunOptions::new("s", "two")).outcome().await;
    let request = model.requests().last().cloned().expect("request");
    assert_eq!(
        request.messages.iter().map(text).collect::<Vec<_>>(),
        ["one", "two"]
    );
}

#[tokio::test]
async fn without_streaming_the_model_is_asked_to_complete() {
    // Item 106: an adapter that does not stream.
    let model = FakeModel::new(vec![FakeStep::text("plain answer")]);
    let handle = run(&echo_agent(&model, memory()), RunOptions::new("s", "x"));
    assert!(deltas(&all_events(&handle).await).is_empty());
    // Item 107: a streaming adapter whose features say no.
    let features = ModelFeatures {
        tools: true,
        streaming: false,
        images: true,
        structured_output: false,
        reasoning: true,
    };
    let model = FakeModel::with_options(FakeOptions {
        script: vec![FakeStep::text("plain answer")],
        stream: true,
        features: Some(features),
        ..FakeOptions::default()
    });
    let handle = run(&echo_agent(&model, memory()), RunOptions::new("s", "x"));
    assert!(deltas(&all_events(&handle).await).is_empty());
    // Item 108: compact never streams.
    let model = FakeModel::streaming(vec![
        FakeStep::text("hello world"),
        FakeStep::text("the summary"),
    ]);
    let store = memory();
    let agent = echo_agent(&model, store.clone());
    run(&agent, RunOptions::new("s", "x")).outcome().await;
    let handle = compact(
        &agent,
        CompactOptions {
            session_id: "s".into(),
            ..CompactOptions::default()
        },
    );
    assert!(deltas(&all_events(&handle).await).is_empty());
    let _ = json!(null);
}
