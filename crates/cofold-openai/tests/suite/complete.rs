//! Non-streaming replies (runtime cases 234, 235, 238–240, docs/acceptance.md).

use std::sync::Arc;

use cofold_agents::error::ErrorCode;
use cofold_agents::message::{Part, ToolCall};
use cofold_agents::model::{
    FinishReason, ModelAdapter, ModelParams, ModelPricing, ModelSpec, Usage,
};
use cofold_openai::OpenAiProvider;
use serde_json::{Value, json};
use testkit::{Endpoint, Reply, chunk};

use super::support::{adapter, ask, options};

fn reply_with(message: Value, finish: &str) -> Reply {
    Reply::json(chunk::completion(message, finish))
}

#[tokio::test]
async fn item_240_text_reply_with_usage_and_raw() {
    let mut body = chunk::completion(json!({ "role": "assistant", "content": "hello" }), "stop");
    body["usage"] = json!({ "prompt_tokens": 20, "completion_tokens": 3, "prompt_tokens_details": { "cached_tokens": 8 } });
    let ep = Endpoint::with_replies([Reply::json(body.clone())]).unwrap();
    let r = adapter(&ep).complete(ask("hi")).await.unwrap();
    assert_eq!(r.message.parts, vec![Part::text("hello")]);
    assert_eq!(r.finish, FinishReason::Stop);
    assert_eq!(
        r.usage,
        Usage {
            input_tokens: 20,
            output_tokens: 3,
            cache_read_tokens: Some(8),
            ..Usage::default()
        }
    );
    assert_eq!(r.raw, Some(body));
    assert_eq!(r.message.id.len(), 36);
    assert_eq!(serde_json::to_value(r.message.source).unwrap(), "model");
}

#[tokio::test]
async fn item_240_tool_calls_parsed_and_forced_finish() {
    let message = json!({ "role": "assistant", "content": null, "tool_calls": [
        { "id": "call_a", "type": "function", "function": { "name": "echo", "arguments": "{\"text\":\"a\"}" } },
        { "id": "", "type": "function", "function": { "name": "echo", "arguments": "not json" } }
    ] });
    let mut body = chunk::completion(message, "stop");
    body.as_object_mut().unwrap().remove("usage");
    let ep = Endpoint::with_replies([Reply::json(body)]).unwrap();
    let r = adapter(&ep).complete(ask("hi")).await.unwrap();
    assert_eq!(r.finish, FinishReason::ToolCalls);
    assert_eq!(r.usage, Usage::default());
    assert_eq!(
        r.message.parts[0],
        Part::ToolCall(ToolCall::from_input(
            "call_a",
            "echo",
            json!({ "text": "a" })
        ))
        .clone()
    );
    let Part::ToolCall(bad) = &r.message.parts[1] else {
        panic!("a tool call")
    };
    assert_eq!((bad.raw.as_str(), bad.input.is_none()), ("not json", true));
    assert!(uuid_like(&bad.call_id), "minted id {}", bad.call_id);
}

fn uuid_like(s: &str) -> bool {
    s.len() == 36 && s.chars().filter(|c| *c == '-').count() == 4
}

#[tokio::test]
async fn item_240_array_content_and_finish_mapping() {
    let ep = Endpoint::with_replies([
        reply_with(json!({ "role": "assistant", "content": [{ "type": "text", "text": "a" }, { "type": "text", "text": "b" }] }), "length"),
        reply_with(json!({ "role": "assistant", "content": "x" }), "content_filter"),
        reply_with(json!({ "role": "assistant", "content": "x" }), "eos_token"),
    ])
    .unwrap();
    let a = adapter(&ep);
    let r = a.complete(ask("1")).await.unwrap();
    assert_eq!(
        (r.message.parts.clone(), r.finish),
        (vec![Part::text("ab")], FinishReason::Length)
    );
    assert_eq!(
        a.complete(ask("2")).await.unwrap().finish,
        FinishReason::ContentFilter
    );
    assert_eq!(
        a.complete(ask("3")).await.unwrap().finish,
        FinishReason::Other
    );
}

#[tokio::test]
async fn item_240_bad_bodies_are_invalid_response() {
    let ep = Endpoint::with_replies([
        Reply::json(json!({ "choices": [] })),
        Reply::status(200, "<html>not json</html>"),
    ])
    .unwrap();
    let a = OpenAiProvider::new(cofold_openai::ProviderOptions {
        retries: Some(0),
        ..options(&ep)
    })
    .unwrap()
    .adapter(ModelSpec::new("m"));
    let e = a.complete(ask("1")).await.unwrap_err();
    assert_eq!(
        (e.code, e.message.clone(), e.retryable),
        (
            ErrorCode::InvalidResponse,
            format!(
                "the answer from {} has no choices[0].message",
                ep.chat_url()
            ),
            true
        )
    );
    assert_eq!(e.detail, Some(json!({ "choices": [] })));
    let e = a.complete(ask("2")).await.unwrap_err();
    assert_eq!(
        (e.code, e.message.clone()),
        (
            ErrorCode::InvalidResponse,
            format!(
                "the answer from {} is not JSON: <html>not json</html>",
                ep.chat_url()
            )
        )
    );
}

#[tokio::test]
async fn item_234_reasoning_fields_and_think_block() {
    let ep = Endpoint::with_replies([
        reply_with(
            json!({ "role": "assistant", "content": "42", "reasoning": "thinking" }),
            "stop",
        ),
        reply_with(
            json!({ "role": "assistant", "content": "42", "reasoning_content": "deep" }),
            "stop",
        ),
        reply_with(
            json!({ "role": "assistant", "content": "\n <think>ponder</think>\n\n42" }),
            "stop",
        ),
        reply_with(
            json!({ "role": "assistant", "content": "<think>never closed" }),
            "stop",
        ),
    ])
    .unwrap();
    let a = adapter(&ep);
    let parts = |p: Vec<Part>| p;
    assert_eq!(
        parts(a.complete(ask("1")).await.unwrap().message.parts),
        vec![Part::reasoning("thinking"), Part::text("42")]
    );
    assert_eq!(
        a.complete(ask("2")).await.unwrap().message.parts,
        vec![Part::reasoning("deep"), Part::text("42")]
    );
    assert_eq!(
        a.complete(ask("3")).await.unwrap().message.parts,
        vec![Part::reasoning("ponder"), Part::text("42")]
    );
    assert_eq!(
        a.complete(ask("4")).await.unwrap().message.parts,
        vec![Part::text("<think>never closed")]
    );
}

#[tokio::test]
async fn item_235_reasoning_tokens() {
    let mut body = chunk::completion(json!({ "role": "assistant", "content": "x" }), "stop");
    body["usage"] = json!({ "prompt_tokens": 1, "completion_tokens": 9, "completion_tokens_details": { "reasoning_tokens": 7 } });
    let ep = Endpoint::with_replies([Reply::json(body)]).unwrap();
    let r = adapter(&ep).complete(ask("x")).await.unwrap();
    assert_eq!(r.usage.reasoning_tokens, Some(7));
    assert_eq!(r.usage.cache_read_tokens, None);
}

#[tokio::test]
async fn item_238_pricing_only_when_passed() {
    let ep = Endpoint::builder().start().unwrap();
    let p = OpenAiProvider::new(options(&ep)).unwrap();
    assert_eq!(p.adapter(ModelSpec::new("m")).pricing(), None);
    let priced = p.adapter(ModelSpec {
        pricing: Some(ModelPricing::usd(3.0, 15.0)),
        ..ModelSpec::new("m")
    });
    assert_eq!(priced.pricing(), Some(ModelPricing::usd(3.0, 15.0)));
}

#[tokio::test]
async fn item_239_adapters_of_one_provider_share_endpoint_and_client() {
    let ep =
        Endpoint::with_replies([Reply::completion_text("a"), Reply::completion_text("b")]).unwrap();
    let p = Arc::new(OpenAiProvider::new(options(&ep)).unwrap());
    let a = p.adapter(ModelSpec {
        params: Some(ModelParams {
            temperature: Some(0.2),
            ..ModelParams::default()
        }),
        ..ModelSpec::new("one")
    });
    let b = p.adapter(ModelSpec {
        params: Some(ModelParams {
            seed: Some(1),
            ..ModelParams::default()
        }),
        ..ModelSpec::new("two")
    });
    assert!(a.shares_endpoint_with(&b));
    assert_ne!(a.id(), b.id());
    a.complete(ask("x")).await.unwrap();
    b.complete(ask("x")).await.unwrap();
    let bodies = ep.chat_bodies();
    assert_eq!(
        (
            bodies[0]["model"].clone(),
            bodies[0]["temperature"].clone(),
            bodies[0].get("seed").is_none()
        ),
        (json!("one"), json!(0.2), true)
    );
    assert_eq!(
        (
            bodies[1]["model"].clone(),
            bodies[1]["seed"].clone(),
            bodies[1].get("temperature").is_none()
        ),
        (json!("two"), json!(1), true)
    );
    let reqs = ep.chat_requests();
    assert!(
        reqs.iter()
            .all(|r| r.header("authorization") == Some("Bearer sk-test"))
    );
}

/// Whitespace a server writes ahead of the JSON while it works (to keep a connection alive) is
/// not an error.
#[tokio::test]
async fn leading_keep_alive_whitespace_is_accepted() {
    let body = chunk::completion(json!({ "role": "assistant", "content": "done" }), "stop");
    let ep = Endpoint::with_replies([Reply::Body {
        status: 200,
        content_type: "application/json".into(),
        body: format!("\n\n \n{body}").into(),
        headers: Vec::new(),
    }])
    .unwrap();
    let reply = adapter(&ep).complete(ask("hi")).await.unwrap();
    assert_eq!(reply.message.parts, vec![Part::text("done")]);
}
