//! Shared helpers for the adapter's tests.

use cofold_agents::error::AgentError;
use cofold_agents::message::Message;
use cofold_agents::model::{ModelAdapter, ModelReply, ModelRequest, ModelSpec, ModelStreamEvent};
use cofold_openai::{OpenAiAdapter, OpenAiProvider, ProviderOptions, TimeLimits};
use futures::StreamExt;
use testkit::Endpoint;

/// Options for the endpoint with key `sk-test`, the default retries, and no time limits: many
/// of these tests run on a paused clock, where a pending limit would expire as soon as the test's
/// runtime waits for the endpoint's thread.
pub fn options(ep: &Endpoint) -> ProviderOptions {
    ProviderOptions {
        limits: TimeLimits::NONE,
        ..ProviderOptions::new(ep.base_url()).with_key("sk-test")
    }
}

pub fn adapter(ep: &Endpoint) -> OpenAiAdapter {
    OpenAiProvider::new(options(ep))
        .unwrap()
        .adapter(ModelSpec::new("m"))
}

pub fn ask(text: &str) -> ModelRequest {
    ModelRequest {
        instructions: "be brief".into(),
        messages: vec![Message::user_text(text)],
        ..ModelRequest::default()
    }
}

pub type Events = Vec<Result<ModelStreamEvent, AgentError>>;

pub async fn stream_all(adapter: &dyn ModelAdapter, request: ModelRequest) -> Events {
    adapter
        .stream(request)
        .expect("the adapter streams")
        .collect()
        .await
}

/// The `Done` reply of a stream that must have succeeded.
pub fn done(events: &Events) -> ModelReply {
    match events.last() {
        Some(Ok(ModelStreamEvent::Done { reply })) => reply.clone(),
        other => panic!("the stream must end with Done, got {other:?}"),
    }
}

/// Every delta of a stream, as short strings: `t:<text>`, `r:<text>`, `c<index>:<id>:<name>:<args>`.
pub fn deltas(events: &Events) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Ok(ModelStreamEvent::TextDelta { text }) => Some(format!("t:{text}")),
            Ok(ModelStreamEvent::ReasoningDelta { text }) => Some(format!("r:{text}")),
            Ok(ModelStreamEvent::ToolCallDelta {
                index,
                call_id,
                name,
                arguments,
            }) => Some(format!(
                "c{index}:{}:{}:{arguments}",
                call_id.clone().unwrap_or_default(),
                name.clone().unwrap_or_default()
            )),
            _ => None,
        })
        .collect()
}

/// The error a stream ended with.
pub fn stream_error(events: &Events) -> AgentError {
    match events.last() {
        Some(Err(e)) => e.clone(),
        other => panic!("the stream must end with an error, got {other:?}"),
    }
}
