//! Usage counters in the shapes servers report them, and the cost they give at the catalogue's
//! prices.

use cofold_agents::model::{ListOptions, ModelPricing, ModelProvider, ModelSpec, Usage};
use cofold_agents::usage::cost_of;
use cofold_openai::OpenAiProvider;
use serde_json::json;
use testkit::{Endpoint, Reply, chunk};

use super::support::{ask, done, options, stream_all};

/// OpenRouter: cache writes under `prompt_tokens_details.cache_write_tokens`, priced by the
/// catalogue's `input_cache_write`.
#[tokio::test]
async fn openrouter_cache_writes_are_counted_and_priced() {
    let mut body = chunk::completion(json!({ "role": "assistant", "content": "ok" }), "stop");
    body["usage"] = json!({
        "prompt_tokens": 10_000, "completion_tokens": 1_000, "total_tokens": 11_000,
        "prompt_tokens_details": { "cached_tokens": 4_000, "cache_write_tokens": 2_000, "audio_tokens": 0 },
        "completion_tokens_details": { "reasoning_tokens": 200 },
        "cost": 0.0357
    });
    let ep = Endpoint::builder()
        .models_body(json!({ "data": [{
            "id": "anthropic/claude-x",
            "supported_parameters": ["tools"],
            "pricing": { "prompt": "0.000003", "completion": "0.000015",
                         "input_cache_read": "0.0000003", "input_cache_write": "0.00000375" }
        }] }))
        .reply(Reply::json(body))
        .start()
        .unwrap();
    let provider = OpenAiProvider::new(options(&ep)).unwrap();
    let info = provider
        .list_models(ListOptions::default())
        .await
        .unwrap()
        .remove(0);
    let adapter = provider.model(ModelSpec {
        pricing: info.pricing,
        ..ModelSpec::new(info.id)
    });
    let reply = adapter.complete(ask("hi")).await.unwrap();
    assert_eq!(
        reply.usage,
        Usage {
            input_tokens: 10_000,
            output_tokens: 1_000,
            cache_read_tokens: Some(4_000),
            cache_write_tokens: Some(2_000),
            reasoning_tokens: Some(200),
        }
    );
    // 4,000 plain × 3 + 4,000 read × 0.3 + 2,000 written × 3.75 + 1,000 out × 15 micro-dollars.
    let pricing = adapter.pricing().expect("priced from the catalogue");
    assert_eq!(
        cost_of(&reply.usage, &pricing),
        12_000 + 1_200 + 7_500 + 15_000
    );
}

/// DeepSeek: cache hits as `prompt_cache_hit_tokens` in the stream's usage chunk, priced at the
/// cache-read rate given with the model.
#[tokio::test]
async fn deepseek_cache_hits_in_a_stream_are_counted_and_priced() {
    let ep = Endpoint::with_replies([Reply::stream([
        chunk::role(),
        chunk::text("hello"),
        chunk::finish("stop"),
        chunk::usage_value(json!({
            "prompt_tokens": 1_000_000, "completion_tokens": 100_000, "total_tokens": 1_100_000,
            "prompt_cache_hit_tokens": 800_000, "prompt_cache_miss_tokens": 200_000,
            "completion_tokens_details": { "reasoning_tokens": 30_000 }
        })),
    ])])
    .unwrap();
    let adapter = OpenAiProvider::new(options(&ep)).unwrap().model(ModelSpec {
        pricing: Some(ModelPricing {
            cache_read_per_million: Some(0.07),
            ..ModelPricing::usd(0.27, 1.10)
        }),
        ..ModelSpec::new("deepseek-chat")
    });
    let reply = done(&stream_all(adapter.as_ref(), ask("hi")).await);
    assert_eq!(
        reply.usage,
        Usage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            cache_read_tokens: Some(800_000),
            cache_write_tokens: None,
            reasoning_tokens: Some(30_000),
        }
    );
    // 200,000 plain × 0.27 + 800,000 read × 0.07 + 100,000 out × 1.10 micro-dollars.
    let pricing = adapter.pricing().expect("priced");
    assert_eq!(cost_of(&reply.usage, &pricing), 54_000 + 56_000 + 110_000);
}

/// Anthropic's names as proxies pass them through an OpenAI-shaped usage object.
#[tokio::test]
async fn anthropic_named_cache_counters_are_read() {
    let mut body = chunk::completion(json!({ "role": "assistant", "content": "ok" }), "stop");
    body["usage"] = json!({
        "prompt_tokens": 900, "completion_tokens": 10, "total_tokens": 910,
        "cache_read_input_tokens": 500, "cache_creation_input_tokens": 300
    });
    let ep = Endpoint::with_replies([Reply::json(body)]).unwrap();
    let adapter = OpenAiProvider::new(options(&ep))
        .unwrap()
        .model(ModelSpec::new("claude"));
    let usage = adapter.complete(ask("hi")).await.unwrap().usage;
    assert_eq!(
        (
            usage.input_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens
        ),
        (900, Some(500), Some(300))
    );
}

/// Moonshot: the last chunk carries its usage inside `choices[0]` (with the top-level
/// `cached_tokens` of its cache accounting).
#[tokio::test]
async fn usage_inside_the_choice_is_read_from_a_stream() {
    let mut last = chunk::with_choice(json!({}), Some("stop"));
    last["choices"][0]["usage"] = json!({ "prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34, "cached_tokens": 24 });
    let ep =
        Endpoint::with_replies([Reply::stream([chunk::role(), chunk::text("hi"), last])]).unwrap();
    let adapter = OpenAiProvider::new(options(&ep))
        .unwrap()
        .model(ModelSpec::new("kimi-k2.6"));
    let reply = done(&stream_all(adapter.as_ref(), ask("hi")).await);
    assert_eq!(
        reply.usage,
        Usage {
            cache_read_tokens: Some(24),
            ..Usage::new(30, 4)
        }
    );
}
