//! The scripted fake model.

use cofold_agents::error::ErrorCode;
use cofold_agents::message::{Message, Part, Role, text_of, tool_calls_of};
use cofold_agents::model::{
    FinishReason, ModelAdapter, ModelPricing, ModelRequest, ModelStreamEvent, Usage,
};
use cofold_agents::testing::{FakeCall, FakeModel, FakeOptions, FakeStep};
use cofold_agents::tool::{AbortController, AbortReason};
use futures::StreamExt;
use serde_json::json;
use std::sync::Arc;
use tokio::sync::Notify;

fn request(text: &str) -> ModelRequest {
    ModelRequest {
        instructions: "be brief".into(),
        messages: vec![Message::user_text(text)],
        ..ModelRequest::default()
    }
}

async fn collect(
    model: &FakeModel,
    request: ModelRequest,
) -> Vec<Result<ModelStreamEvent, ErrorCode>> {
    let stream = model.stream(request).expect("a streaming model streams");
    stream
        .map(|event| event.map_err(|error| error.code))
        .collect()
        .await
}

#[tokio::test]
async fn text_steps_answer_in_order_with_one_one_usage() {
    let model = FakeModel::new(vec![
        FakeStep::text("hello").with_reasoning("thinking"),
        FakeStep::text("again").with_usage(Usage::new(5, 7)),
    ]);
    assert_eq!(model.remaining(), 2);
    let reply = model.complete(request("hi")).await.expect("reply");
    assert_eq!(reply.message.role, Role::Assistant);
    assert_eq!(
        reply.message.parts,
        vec![Part::reasoning("thinking"), Part::text("hello")]
    );
    assert_eq!(reply.usage, Usage::new(1, 1));
    assert_eq!(reply.finish, FinishReason::Stop);
    let reply = model.complete(request("more")).await.expect("reply");
    assert_eq!(text_of(&reply.message), "again");
    assert_eq!(reply.usage, Usage::new(5, 7));
    assert_eq!(model.remaining(), 0);
    let error = model
        .complete(request("extra"))
        .await
        .expect_err("exhausted");
    assert_eq!(error.code, ErrorCode::InvalidResponse);
    assert_eq!(error.message, "fake model script exhausted");
    let recorded = model.requests();
    assert_eq!(recorded.len(), 3);
    assert_eq!(text_of(&recorded[1].messages[0]), "more");
    assert_eq!(recorded[0], request("hi").clone_with_messages(&recorded[0]));
}

trait SameMessages {
    fn clone_with_messages(self, other: &ModelRequest) -> ModelRequest;
}

impl SameMessages for ModelRequest {
    /// The request with the other's messages (message ids and times are minted per call).
    fn clone_with_messages(mut self, other: &ModelRequest) -> ModelRequest {
        self.messages = other.messages.clone();
        self
    }
}

#[tokio::test]
async fn tool_call_steps_mint_missing_ids_and_keep_raw() {
    let model = FakeModel::new(vec![
        FakeStep::tool_calls(vec![
            FakeCall::new("echo", json!({ "text": "hi" })).with_id("c1"),
            FakeCall::new("echo", json!({ "text": "yo" })),
        ])
        .with_text("calling")
        .with_reasoning("plan"),
        FakeStep::raw_tool_call("echo", "{not json"),
    ]);
    let reply = model.complete(request("go")).await.expect("reply");
    assert_eq!(reply.finish, FinishReason::ToolCalls);
    assert_eq!(reply.message.parts[0], Part::reasoning("plan"));
    assert_eq!(reply.message.parts[1], Part::text("calling"));
    let calls = tool_calls_of(&reply.message);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].call_id, "c1");
    assert_eq!(calls[0].raw, "{\"text\":\"hi\"}");
    assert_eq!(calls[0].input, Some(json!({ "text": "hi" })));
    assert_eq!(calls[1].call_id.len(), 36, "a minted UUID");
    let reply = model.complete(request("go")).await.expect("reply");
    let calls = tool_calls_of(&reply.message);
    assert_eq!(calls[0].raw, "{not json");
    assert_eq!(calls[0].input, None);
}

#[tokio::test]
async fn error_steps_fail_with_their_code() {
    let model = FakeModel::new(vec![
        FakeStep::error(ErrorCode::RateLimit, "slow down").retryable(),
    ]);
    let error = model.complete(request("x")).await.expect_err("fails");
    assert_eq!(
        (error.code, error.message.as_str(), error.retryable),
        (ErrorCode::RateLimit, "slow down", true)
    );
}

#[tokio::test]
async fn a_gate_holds_a_step_until_opened() {
    let gate = Arc::new(Notify::new());
    let model = FakeModel::new(vec![FakeStep::text("late").gated(gate.clone())]);
    let pending = tokio::spawn({
        let model = model.clone();
        async move { model.complete(request("x")).await }
    });
    // The request is recorded before the gate opens.
    while model.requests().is_empty() {
        tokio::task::yield_now().await;
    }
    assert!(!pending.is_finished());
    gate.notify_one();
    let reply = pending.await.expect("joins").expect("reply");
    assert_eq!(text_of(&reply.message), "late");
}

#[tokio::test]
async fn a_gated_or_blocked_step_fails_aborted_when_the_signal_fires() {
    let model = FakeModel::new(vec![
        FakeStep::text("never").gated(Arc::new(Notify::new())),
        FakeStep::block(),
    ]);
    for round in 1..=2 {
        let controller = AbortController::new();
        let mut req = request("x");
        req.signal = controller.signal();
        let pending = tokio::spawn({
            let model = model.clone();
            async move { model.complete(req).await }
        });
        // Abort only once the step is taken, so it is the step (not the early check) that fails.
        while model.requests().len() < round {
            tokio::task::yield_now().await;
        }
        controller.abort(AbortReason::Cancel { reason: None });
        let error = pending.await.expect("joins").expect_err("aborted");
        assert_eq!(error.code, ErrorCode::Aborted);
    }
    assert_eq!(model.remaining(), 0);
}

#[tokio::test]
async fn a_request_whose_signal_already_fired_is_aborted_without_using_a_step() {
    let model = FakeModel::new(vec![FakeStep::text("kept")]);
    let controller = AbortController::new();
    controller.abort(AbortReason::Timeout);
    let mut req = request("x");
    req.signal = controller.signal();
    assert_eq!(
        model.complete(req).await.expect_err("aborted").code,
        ErrorCode::Aborted
    );
    assert_eq!(model.remaining(), 1);
    assert_eq!(model.requests().len(), 1, "still recorded");
    assert!(
        !model.requests()[0].signal.is_aborted(),
        "recorded without the signal"
    );
}

#[tokio::test]
async fn streaming_yields_reasoning_then_word_deltas_then_done() {
    let model = FakeModel::streaming(vec![
        FakeStep::text("hello big world").with_reasoning("hmm"),
    ]);
    assert!(model.features().streaming);
    let events = collect(&model, request("x")).await;
    let deltas: Vec<&ModelStreamEvent> = events.iter().map(|e| e.as_ref().expect("ok")).collect();
    assert_eq!(
        deltas[0],
        &ModelStreamEvent::ReasoningDelta { text: "hmm".into() }
    );
    assert_eq!(
        deltas[1],
        &ModelStreamEvent::TextDelta {
            text: "hello ".into()
        }
    );
    assert_eq!(
        deltas[2],
        &ModelStreamEvent::TextDelta {
            text: "big ".into()
        }
    );
    assert_eq!(
        deltas[3],
        &ModelStreamEvent::TextDelta {
            text: "world".into()
        }
    );
    match deltas[4] {
        ModelStreamEvent::Done { reply } => assert_eq!(text_of(&reply.message), "hello big world"),
        other => panic!("expected Done, got {other:?}"),
    }
    assert_eq!(deltas.len(), 5);
}

#[tokio::test]
async fn streaming_honours_chunks_interrupts_and_tool_steps() {
    let model = FakeModel::streaming(vec![
        FakeStep::text("abc").with_chunks(vec!["a".into(), "bc".into()]),
        FakeStep::text("cut short").interrupted(),
        FakeStep::tool_call("echo", json!({})),
        FakeStep::error(ErrorCode::Server, "boom"),
    ]);
    let chunks = collect(&model, request("1")).await;
    assert_eq!(chunks.len(), 3);
    assert_eq!(
        chunks[0],
        Ok(ModelStreamEvent::TextDelta { text: "a".into() })
    );
    assert_eq!(
        chunks[1],
        Ok(ModelStreamEvent::TextDelta { text: "bc".into() })
    );
    let cut = collect(&model, request("2")).await;
    assert_eq!(cut.len(), 2, "no Done after an interrupt");
    assert!(
        cut.iter()
            .all(|e| matches!(e, Ok(ModelStreamEvent::TextDelta { .. })))
    );
    let tool = collect(&model, request("3")).await;
    assert_eq!(tool.len(), 1);
    assert!(
        matches!(&tool[0], Ok(ModelStreamEvent::Done { reply }) if reply.finish == FinishReason::ToolCalls)
    );
    assert_eq!(
        collect(&model, request("4")).await,
        vec![Err(ErrorCode::Server)]
    );
    assert_eq!(
        collect(&model, request("5")).await,
        vec![Err(ErrorCode::InvalidResponse)]
    );
}

#[test]
fn a_model_that_does_not_stream_returns_no_stream() {
    let model = FakeModel::new(vec![FakeStep::text("x")]);
    assert!(!model.features().streaming);
    assert!(model.stream(request("x")).is_none());
    assert_eq!(model.remaining(), 1, "asking for a stream uses no step");
}

#[test]
fn options_set_the_identity_features_and_pricing() {
    let model = FakeModel::with_options(FakeOptions {
        model_id: Some("m1".into()),
        pricing: Some(ModelPricing::usd(1.0, 2.0)),
        ..FakeOptions::default()
    });
    assert_eq!(model.model_id(), "m1");
    assert_eq!(model.id(), "fake:m1");
    assert_eq!(model.pricing(), Some(ModelPricing::usd(1.0, 2.0)));
    assert!(model.features().tools);
    model.push([FakeStep::text("added")]);
    assert_eq!(model.remaining(), 1);
}
