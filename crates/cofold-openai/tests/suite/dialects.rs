//! Wire fidelity: streams in the shapes OpenAI, llama.cpp's server and DeepSeek send, and a
//! stream cut in the middle of a tool call's arguments.

use cofold_agents::error::ErrorCode;
use cofold_agents::message::{Part, ToolCall};
use cofold_agents::model::{FinishReason, ModelStreamEvent, Usage};
use serde_json::json;
use testkit::{Endpoint, Reply, dialect};

use super::support::{adapter, ask, deltas, done, stream_all, stream_error};

#[tokio::test]
async fn openai_text_then_tool_call() {
    let ep = Endpoint::with_replies([Reply::stream_exact(dialect::openai_text_and_tool_call())])
        .unwrap();
    let events = stream_all(&adapter(&ep), ask("weather?")).await;
    let d = deltas(&events);
    assert_eq!(d[..2], ["t:Let me".to_owned(), "t: check.".to_owned()]);
    assert_eq!(d[2], "c0:call_DdmO9pD3xa9XTPNJ32zg2hcA:get_weather:");
    assert_eq!(d.len(), 8);
    let reply = done(&events);
    assert_eq!(
        reply.message.parts,
        vec![
            Part::text("Let me check."),
            Part::ToolCall(ToolCall::from_input(
                "call_DdmO9pD3xa9XTPNJ32zg2hcA",
                "get_weather",
                json!({ "location": "Paris, France" })
            ))
        ]
    );
    assert_eq!(reply.finish, FinishReason::ToolCalls);
    assert_eq!(
        reply.usage,
        Usage {
            input_tokens: 21,
            output_tokens: 18,
            cache_read_tokens: Some(5),
            reasoning_tokens: Some(0),
            ..Usage::default()
        }
    );
}

#[tokio::test]
async fn llama_cpp_think_tags_in_content() {
    let ep =
        Endpoint::with_replies([Reply::stream_exact(dialect::llama_cpp_think_stream())]).unwrap();
    let events = stream_all(&adapter(&ep), ask("hi")).await;
    assert_eq!(
        deltas(&events),
        ["r:The user", "r: greets me.", "t:Hello", "t: there!"]
    );
    let reply = done(&events);
    assert_eq!(
        reply.message.parts,
        vec![
            Part::reasoning("The user greets me."),
            Part::text("Hello there!")
        ]
    );
    assert_eq!(
        (reply.finish, reply.usage),
        (FinishReason::Stop, Usage::new(12, 9))
    );
}

#[tokio::test]
async fn llama_cpp_tool_call() {
    let ep = Endpoint::with_replies([Reply::stream_exact(dialect::llama_cpp_tool_call_stream())])
        .unwrap();
    let reply = done(&stream_all(&adapter(&ep), ask("read")).await);
    assert_eq!(
        reply.message.parts,
        vec![Part::ToolCall(ToolCall::from_input(
            "call_llama_0",
            "read_file",
            json!({ "path": "src/main.rs" })
        ))]
    );
    assert_eq!(
        (reply.finish, reply.usage),
        (FinishReason::ToolCalls, Usage::new(40, 14))
    );
}

#[tokio::test]
async fn deepseek_reasoning_content_with_nulls_and_keep_alive() {
    let ep = Endpoint::with_replies([Reply::stream_exact(dialect::deepseek_reasoning_stream())])
        .unwrap();
    let events = stream_all(&adapter(&ep), ask("which is larger")).await;
    assert_eq!(
        deltas(&events),
        [
            "r:9.11 vs 9.9",
            "r:: compare",
            "r: tenths.",
            "t:9.9 is",
            "t: larger."
        ]
    );
    let reply = done(&events);
    assert_eq!(
        reply.message.parts,
        vec![
            Part::reasoning("9.11 vs 9.9: compare tenths."),
            Part::text("9.9 is larger.")
        ]
    );
    assert_eq!(reply.finish, FinishReason::Stop);
    assert_eq!(
        reply.usage,
        Usage {
            input_tokens: 16,
            output_tokens: 30,
            cache_read_tokens: Some(0),
            reasoning_tokens: Some(21),
            ..Usage::default()
        }
    );
}

#[tokio::test]
async fn cut_in_the_middle_of_tool_call_arguments() {
    let ep = Endpoint::with_replies([Reply::stream_exact(dialect::cut_mid_tool_call())]).unwrap();
    let once = cofold_openai::OpenAiProvider::new(cofold_openai::ProviderOptions {
        retries: Some(0),
        ..super::support::options(&ep)
    })
    .unwrap()
    .adapter(cofold_agents::model::ModelSpec::new("m"));
    let events = stream_all(&once, ask("write")).await;
    assert_eq!(
        deltas(&events),
        ["c0:call_cut:write_file:", "c0:::{\"path\":\"a.txt\",\"con"]
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Ok(ModelStreamEvent::Done { .. }))),
        "no partial call may come out"
    );
    assert_eq!(stream_error(&events).code, ErrorCode::Network);
    assert_eq!(ep.chat_requests().len(), 1);
}
