//! The recorded-shape transcripts of `tests/corpus/`, one per server dialect, replayed through
//! the scripted endpoint one event per write: the decoded reply, and the next request the adapter
//! builds in that dialect (reasoning sent back where the server requires it, fields left out
//! where the server refuses them).

use cofold_agents::message::{Message, MessageSource, Part, Role, ToolResult};
use cofold_agents::model::{
    FinishReason, ModelParams, ModelReply, ModelRequest, ModelSpec, ModelToolDefinition,
    ReasoningEffort, ReasoningParams, Usage,
};
use cofold_openai::{Dialect, OpenAiAdapter, OpenAiProvider, ProviderOptions};
use serde_json::{Value, json};
use testkit::{Endpoint, Frame, Reply};

use super::support::{Events, deltas, done, options, stream_all, stream_error};

fn frames(name: &str) -> Vec<Frame> {
    let path = format!("{}/tests/corpus/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    text.split_inclusive("\n\n").map(Frame::raw).collect()
}

fn tools() -> Vec<ModelToolDefinition> {
    ["read_file", "list_files", "get_weather", "shell_exec"]
        .into_iter()
        .map(|name| ModelToolDefinition {
            name: name.into(),
            description: format!("{name} tool"),
            input: json!({ "type": "object" }),
        })
        .collect()
}

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        instructions: "be brief".into(),
        messages,
        tools: tools(),
        params: ModelParams {
            max_output_tokens: Some(256),
            ..ModelParams::default()
        },
        cache_key: Some("session-1".into()),
        ..ModelRequest::default()
    }
}

struct Replayed {
    events: Events,
    ep: Endpoint,
    adapter: OpenAiAdapter,
}

/// Replays `file` in `dialect` (with these quirks over it); the endpoint then answers `ok`.
async fn replay_with(file: &str, dialect: &str, quirks: Value) -> Replayed {
    let ep = Endpoint::with_replies([Reply::stream_exact(frames(file)), Reply::text_stream("ok")])
        .unwrap();
    let mut d = Dialect::preset(dialect).unwrap();
    cofold_openai::settings::apply_quirks(&mut d, quirks.as_object().unwrap()).unwrap();
    let adapter = OpenAiProvider::new(ProviderOptions {
        dialect: Some(d),
        retries: Some(0),
        ..options(&ep)
    })
    .unwrap()
    .adapter(ModelSpec {
        params: Some(ModelParams {
            reasoning: Some(ReasoningParams {
                effort: Some(ReasoningEffort::High),
                max_tokens: None,
            }),
            ..ModelParams::default()
        }),
        ..ModelSpec::new("m")
    });
    let events = stream_all(&adapter, request(vec![Message::user_text("go")])).await;
    Replayed {
        events,
        ep,
        adapter,
    }
}

async fn replay(file: &str, dialect: &str) -> Replayed {
    replay_with(file, dialect, json!({})).await
}

/// The tool loop after `reply`: its calls answered, then the next request's body.
async fn next_body(r: &Replayed, reply: &ModelReply) -> Value {
    let results: Vec<Part> = reply
        .message
        .parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall(c) => Some(Part::ToolResult(ToolResult {
                call_id: c.call_id.clone(),
                name: c.name.clone(),
                content: "done".into(),
                is_error: false,
            })),
            _ => None,
        })
        .collect();
    let messages = vec![
        Message::user_text("go"),
        reply.message.clone(),
        Message::new(Role::Tool, MessageSource::Tool, results),
    ];
    done(&stream_all(&r.adapter, request(messages)).await);
    r.ep.chat_bodies()[1].clone()
}

fn assistant(body: &Value) -> &Value {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap()
}

fn calls(reply: &ModelReply) -> Vec<(String, String, Value)> {
    reply
        .message
        .parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall(c) => Some((
                c.call_id.clone(),
                c.name.clone(),
                c.input.clone().unwrap_or(Value::Null),
            )),
            _ => None,
        })
        .collect()
}

fn reasoning_of(reply: &ModelReply) -> Option<&str> {
    reply.message.parts.iter().find_map(|p| match p {
        Part::Reasoning { text } => Some(text.as_str()),
        _ => None,
    })
}

#[tokio::test]
async fn openai_reasoning_model() {
    let r = replay("openai.sse", "openai").await;
    let reply = done(&r.events);
    assert_eq!(
        calls(&reply),
        [(
            "call_Xw3sVq1mP8tR2yL6".into(),
            "read_file".into(),
            json!({ "path": "Cargo.toml" })
        )]
    );
    assert_eq!(reply.finish, FinishReason::ToolCalls);
    assert_eq!(
        reply.usage,
        Usage {
            input_tokens: 412,
            output_tokens: 86,
            cache_read_tokens: Some(384),
            reasoning_tokens: Some(64),
            ..Usage::default()
        }
    );
    let body = next_body(&r, &reply).await;
    assert_eq!(body["max_completion_tokens"], 256);
    assert!(
        body.get("max_tokens").is_none(),
        "OpenAI's reasoning models refuse max_tokens"
    );
    assert_eq!(body["reasoning_effort"], "high");
    assert_eq!(body["prompt_cache_key"], "session-1");
    assert_eq!(body["stream_options"], json!({ "include_usage": true }));
    assert!(assistant(&body).get("reasoning_content").is_none());
}

#[tokio::test]
async fn deepseek_thinking_with_a_tool_call() {
    let r = replay("deepseek.sse", "deepseek").await;
    let reply = done(&r.events);
    assert_eq!(
        reasoning_of(&reply),
        Some("The user wants the files listed.")
    );
    assert!(reply.message.parts.contains(&Part::text("Let me look.")));
    assert_eq!(
        calls(&reply),
        [(
            "call_00_kP3vJ8qWn2LxR5tY7uZa".into(),
            "list_files".into(),
            json!({ "pattern": "*" })
        )]
    );
    assert_eq!(
        (
            reply.usage.input_tokens,
            reply.usage.cache_read_tokens,
            reply.usage.reasoning_tokens
        ),
        (980, Some(896), Some(31))
    );
    // The runtime keeps the reasoning on the tool loop's messages; the dialect sends it back.
    let body = next_body(&r, &reply).await;
    let a = assistant(&body);
    assert_eq!(a["reasoning_content"], "The user wants the files listed.");
    assert_eq!(a["tool_calls"][0]["id"], "call_00_kP3vJ8qWn2LxR5tY7uZa");
    assert!(body.get("prompt_cache_key").is_none());
    assert!(body.get("reasoning_effort").is_none());
    assert_eq!(body["max_tokens"], 256);
}

#[tokio::test]
async fn openrouter_reasoning_then_its_mid_stream_error() {
    let r = replay("openrouter.sse", "openrouter").await;
    assert_eq!(
        deltas(&r.events),
        ["r:Plan the", "r: answer.", "t:The answer"]
    );
    let e = stream_error(&r.events);
    assert_eq!(e.code, cofold_agents::error::ErrorCode::Server);
    assert!(e.retryable);
    assert!(
        e.message
            .ends_with("reported an error: Provider disconnected unexpectedly"),
        "{}",
        e.message
    );
    // The next request of a tool loop sends reasoning back in OpenRouter's own field.
    let mut call = Message::new(
        Role::Assistant,
        MessageSource::Model,
        vec![
            Part::reasoning("Plan the answer."),
            Part::ToolCall(cofold_agents::message::ToolCall::from_raw(
                "c1",
                "read_file",
                "{}",
            )),
        ],
    );
    call.id = "m1".into();
    let reply = ModelReply {
        message: call,
        usage: Usage::default(),
        finish: FinishReason::ToolCalls,
        raw: None,
    };
    let body = next_body(&r, &reply).await;
    assert_eq!(assistant(&body)["reasoning"], "Plan the answer.");
    assert!(assistant(&body).get("reasoning_content").is_none());
    assert_eq!(body["reasoning"], json!({ "effort": "high" }));
    assert!(body.get("reasoning_effort").is_none());
}

#[tokio::test]
async fn moonshot_usage_inside_the_choice() {
    let r = replay("moonshot.sse", "moonshot").await;
    let reply = done(&r.events);
    assert_eq!(reasoning_of(&reply), Some("I should check the weather."));
    assert_eq!(
        calls(&reply),
        [(
            "get_weather:0".into(),
            "get_weather".into(),
            json!({ "city": "Beijing" })
        )]
    );
    assert_eq!(
        (
            reply.usage.input_tokens,
            reply.usage.output_tokens,
            reply.usage.cache_read_tokens
        ),
        (155, 42, Some(128))
    );
    let body = next_body(&r, &reply).await;
    assert_eq!(
        assistant(&body)["reasoning_content"],
        "I should check the weather."
    );
    assert!(body.get("stream_options").is_none());
    assert!(body.get("prompt_cache_key").is_none());
}

#[tokio::test]
async fn gemini_parallel_calls_without_an_index() {
    let r = replay("gemini.sse", "gemini").await;
    let reply = done(&r.events);
    assert_eq!(
        calls(&reply),
        [
            (
                "function-call-14926524738475891712".into(),
                "get_weather".into(),
                json!({ "city": "Paris" })
            ),
            (
                "function-call-14926524738475891713".into(),
                "get_weather".into(),
                json!({ "city": "London" })
            )
        ]
    );
    assert_eq!(reply.usage.reasoning_tokens, Some(59));
    let body = next_body(&r, &reply).await;
    assert_eq!(assistant(&body)["tool_calls"].as_array().unwrap().len(), 2);
    assert!(body.get("stream_options").is_none());
    assert!(body.get("prompt_cache_key").is_none());
    assert_eq!(body["reasoning_effort"], "high");

    // Without the repair both calls land on index 0 and merge into one broken call.
    let r = replay_with("gemini.sse", "gemini", json!({ "repairToolIndex": false })).await;
    let merged = calls(&done(&r.events));
    assert_eq!(merged.len(), 1);
    assert_eq!(
        merged[0].2,
        Value::Null,
        "the merged arguments are not JSON"
    );
}

#[tokio::test]
async fn mistral_refuses_unknown_fields() {
    let r = replay("mistral.sse", "mistral").await;
    let reply = done(&r.events);
    assert_eq!(
        calls(&reply),
        [(
            "D681PevKs".into(),
            "read_file".into(),
            json!({ "path": "README.md" })
        )]
    );
    assert_eq!(
        (reply.usage.input_tokens, reply.usage.output_tokens),
        (120, 24)
    );
    let body = next_body(&r, &reply).await;
    for refused in [
        "stream_options",
        "prompt_cache_key",
        "reasoning_effort",
        "parallel_tool_calls",
    ] {
        assert!(body.get(refused).is_none(), "{refused} is sent to Mistral");
    }
    assert_eq!(body["max_tokens"], 256);
}

#[tokio::test]
async fn vllm_reasoning_parser_output_is_sent_back_as_it_came() {
    let r = replay("vllm.sse", "vllm").await;
    let reply = done(&r.events);
    assert_eq!(reasoning_of(&reply), Some("Need the time."));
    assert_eq!(
        calls(&reply),
        [(
            "chatcmpl-tool-5f8e2a1b9c3d4e6f".into(),
            "shell_exec".into(),
            json!({ "command": "date" })
        )]
    );
    assert_eq!(
        (reply.usage.input_tokens, reply.usage.output_tokens),
        (311, 51)
    );
    let body = next_body(&r, &reply).await;
    assert_eq!(assistant(&body)["reasoning_content"], "Need the time.");
    assert!(body.get("prompt_cache_key").is_none());
}

#[tokio::test]
async fn llama_cpp_reasoning_of_an_earlier_turn_is_not_sent_back() {
    let r = replay("llama.cpp.sse", "llama.cpp").await;
    let reply = done(&r.events);
    assert_eq!(
        reply.message.parts,
        vec![
            Part::reasoning("Short greeting needed."),
            Part::text("Hello!")
        ]
    );
    assert_eq!(
        (reply.finish, reply.usage),
        (FinishReason::Stop, Usage::new(21, 9))
    );
    let messages = vec![
        Message::user_text("go"),
        reply.message.clone(),
        Message::user_text("again"),
    ];
    done(&stream_all(&r.adapter, request(messages)).await);
    let body = &r.ep.chat_bodies()[1];
    let a = assistant(body);
    assert_eq!(a["content"], "Hello!");
    assert!(a.get("reasoning_content").is_none(), "outside a tool loop");
}

#[tokio::test]
async fn ollama_reasoning_field_is_learned_and_sent_back() {
    let r = replay("ollama.sse", "ollama").await;
    let reply = done(&r.events);
    assert_eq!(reasoning_of(&reply), Some("The user wants files."));
    assert_eq!(
        calls(&reply),
        [(
            "call_h3k9x2wq".into(),
            "list_files".into(),
            json!({ "pattern": "src/*" })
        )]
    );
    assert_eq!(
        (reply.usage.input_tokens, reply.usage.output_tokens),
        (143, 38)
    );
    let body = next_body(&r, &reply).await;
    assert_eq!(assistant(&body)["reasoning"], "The user wants files.");
    assert!(assistant(&body).get("reasoning_content").is_none());
}

#[tokio::test]
async fn object_arguments_are_serialized() {
    let ep = Endpoint::with_replies([Reply::stream([testkit::chunk::with_choice(
        json!({ "tool_calls": [{ "index": 0, "id": "c1", "type": "function",
                "function": { "name": "read_file", "arguments": { "path": "a.txt" } } }] }),
        Some("tool_calls"),
    )])])
    .unwrap();
    let reply = done(
        &stream_all(
            &super::support::adapter(&ep),
            request(vec![Message::user_text("go")]),
        )
        .await,
    );
    let Part::ToolCall(c) = &reply.message.parts[0] else {
        panic!("a call")
    };
    assert_eq!(
        (c.raw.as_str(), c.input.clone()),
        ("{\"path\":\"a.txt\"}", Some(json!({ "path": "a.txt" })))
    );
}
