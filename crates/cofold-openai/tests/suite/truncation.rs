//! Truncation is an error: a stream without a finish reason, a 200 that is not an event stream,
//! a body that is an error object, a connection reset mid-stream. Each is retried; what clients
//! were shown is never shown twice, and only a whole answer is stored. Run through the runtime
//! with its in-memory store, on a paused clock.

use std::sync::Arc;

use cofold_agents::agent::Agent;
use cofold_agents::error::ErrorCode;
use cofold_agents::event::{EventBody, OutcomeKind, RunOutcome};
use cofold_agents::message::{Message, Part, Role};
use cofold_agents::model::{ModelAdapter, ModelSpec, ModelToolDefinition};
use cofold_agents::run::{RunOptions, run};
use cofold_agents::store::{MemoryStore, Store};
use cofold_openai::{OpenAiProvider, ProviderOptions};
use futures::StreamExt;
use serde_json::json;
use testkit::{Endpoint, Frame, Reply, chunk};

use super::support::{ask, deltas, done, options, stream_all};

/// Runs one turn of an agent on `ep`; returns the outcome, the text deltas the run emitted (as
/// clients would see them) and the stored transcript.
async fn turn(opts: ProviderOptions) -> (RunOutcome, String, Vec<Message>) {
    let adapter = OpenAiProvider::new(opts)
        .unwrap()
        .adapter(ModelSpec::new("m"));
    let store = Arc::new(MemoryStore::new());
    let agent = Agent::builder("a", "be brief", Arc::new(adapter) as Arc<dyn ModelAdapter>)
        .store(store.clone())
        .build()
        .unwrap();
    let handle = run(&agent, RunOptions::new("s", "hi"));
    let shown: String = handle
        .events()
        .filter_map(|e| async move {
            match e.body {
                EventBody::ModelDelta { text, .. } => Some(text),
                _ => None,
            }
        })
        .collect::<Vec<_>>()
        .await
        .concat();
    let outcome = handle.outcome().await;
    let messages = store.list_messages("s", None).await.unwrap();
    (outcome, shown, messages)
}

fn texts(messages: &[Message]) -> Vec<(Role, String)> {
    messages
        .iter()
        .map(|m| {
            let t: String = m
                .parts
                .iter()
                .filter_map(|p| match p {
                    Part::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            (m.role, t)
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_truncated_stream_is_retried_and_the_conversation_holds_one_answer() {
    let ep = Endpoint::with_replies([
        // No finish reason and no [DONE]: the body just ends.
        Reply::stream_exact([chunk::role(), chunk::text("Hel"), chunk::text("lo")]),
        Reply::stream([
            chunk::role(),
            chunk::text("Hel"),
            chunk::text("lo wor"),
            chunk::text("ld"),
            chunk::finish("stop"),
        ]),
    ])
    .unwrap();
    let (outcome, shown, messages) = turn(options(&ep)).await;
    assert!(
        matches!(outcome.kind, OutcomeKind::Completed { .. }),
        "{outcome:?}"
    );
    assert_eq!(shown, "Hello world", "nothing was shown twice");
    assert_eq!(
        texts(&messages),
        [
            (Role::User, "hi".into()),
            (Role::Assistant, "Hello world".into())
        ]
    );
    assert_eq!(ep.chat_requests().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_turn_whose_every_attempt_is_cut_fails_naming_the_cause() {
    let ep = Endpoint::builder()
        .respond_with(|_| Reply::stream([chunk::role(), chunk::text("partial")]))
        .start()
        .unwrap();
    let (outcome, shown, messages) = turn(options(&ep)).await;
    let OutcomeKind::Failed { error } = &outcome.kind else {
        panic!("the turn must fail, got {outcome:?}");
    };
    assert_eq!(error.code, ErrorCode::Network);
    assert!(
        error
            .message
            .contains("with no finish reason: it was cut short"),
        "{}",
        error.message
    );
    assert_eq!(shown, "partial", "the partial text was shown once");
    assert_eq!(
        texts(&messages),
        [(Role::User, "hi".into())],
        "no answer is stored"
    );
    assert_eq!(ep.chat_requests().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_reset_mid_stream_is_retried() {
    let ep = Endpoint::with_replies([
        Reply::stream_exact([Frame::from(chunk::text("on")), Frame::Cut]),
        Reply::stream([chunk::text("one"), chunk::finish("stop")]),
    ])
    .unwrap();
    let (outcome, shown, messages) = turn(options(&ep)).await;
    assert!(matches!(outcome.kind, OutcomeKind::Completed { .. }));
    assert_eq!(shown, "one");
    assert_eq!(texts(&messages)[1], (Role::Assistant, "one".into()));
}

#[tokio::test(start_paused = true)]
async fn a_200_that_is_not_an_event_stream_or_is_an_error_object_is_retried() {
    let ep = Endpoint::with_replies([
        Reply::status(200, "<html>gateway</html>"),
        Reply::json(json!({ "error": { "message": "overloaded", "code": 529 } })),
        Reply::text_stream("fine"),
    ])
    .unwrap();
    let events = stream_all(&super::support::adapter(&ep), ask("x")).await;
    assert_eq!(deltas(&events), ["t:fine"]);
    assert_eq!(ep.chat_requests().len(), 3);

    // A whole completion sent to a streamed request is still the answer.
    let ep = Endpoint::with_replies([Reply::completion_text("whole")]).unwrap();
    let events = stream_all(&super::support::adapter(&ep), ask("x")).await;
    assert_eq!(deltas(&events), ["t:whole"]);
    assert_eq!(done(&events).message.parts, vec![Part::text("whole")]);
}

fn with_tool() -> cofold_agents::model::ModelRequest {
    let mut r = ask("list");
    r.tools = vec![ModelToolDefinition {
        name: "list_files".into(),
        description: "Lists files.".into(),
        input: json!({ "type": "object" }),
    }];
    r
}

/// llama-cpp-python's server answers a streamed request that offers tools with an empty stream;
/// the adapter then asks whole, passes the reply on as one delta, and asks such requests whole
/// from then on.
#[tokio::test(start_paused = true)]
async fn an_empty_stream_for_a_tool_request_falls_back_to_a_whole_answer() {
    let call = chunk::completion(
        json!({ "role": "assistant", "content": null, "tool_calls": [{ "id": "call_0",
            "type": "function", "function": { "name": "list_files", "arguments": "{\"pattern\":\"*\"}" } }] }),
        "tool_calls",
    );
    let ep = Endpoint::with_replies([
        Reply::stream_exact(Vec::<Frame>::new()),
        Reply::json(call.clone()),
        Reply::json(call),
    ])
    .unwrap();
    let a = super::support::adapter(&ep);
    for _ in 0..2 {
        let events = stream_all(&a, with_tool()).await;
        assert_eq!(
            deltas(&events),
            ["c0:call_0:list_files:{\"pattern\":\"*\"}"]
        );
        let Part::ToolCall(c) = &done(&events).message.parts[0] else {
            panic!("a call")
        };
        assert_eq!(c.input, Some(json!({ "pattern": "*" })));
    }
    let streamed: Vec<bool> = ep
        .chat_bodies()
        .iter()
        .map(|b| b["stream"].as_bool().unwrap())
        .collect();
    assert_eq!(streamed, [true, false, false]);
}

#[tokio::test(start_paused = true)]
async fn the_llama_cpp_python_dialect_never_streams_tool_requests() {
    let ep = Endpoint::with_replies([
        Reply::completion_text("no tools needed"),
        Reply::text_stream("streamed"),
    ])
    .unwrap();
    let a = OpenAiProvider::new(ProviderOptions {
        dialect: cofold_openai::Dialect::preset("llama-cpp-python"),
        ..options(&ep)
    })
    .unwrap()
    .adapter(ModelSpec::new("m"));
    let events = stream_all(&a, with_tool()).await;
    assert_eq!(deltas(&events), ["t:no tools needed"]);
    let events = stream_all(&a, ask("x")).await;
    assert_eq!(deltas(&events), ["t:streamed"]);
    let bodies = ep.chat_bodies();
    assert_eq!(bodies[0]["stream"], false);
    assert!(bodies[0].get("stream_options").is_none());
    assert_eq!(bodies[1]["stream"], true);
}
