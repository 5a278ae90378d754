//! The request mapping (runtime cases 224–233, 244, docs/acceptance.md).

use std::collections::HashMap;

use cofold_agents::error::ErrorCode;
use cofold_agents::message::{Message, MessageSource, Part, Role, ToolCall, ToolResult};
use cofold_agents::model::{
    ModelAdapter, ModelFeatures, ModelParams, ModelRequest, ModelSpec, ModelToolDefinition,
    ReasoningEffort, ReasoningParams,
};
use cofold_openai::{DEFAULT_FEATURES, OpenAiProvider, ProviderOptions};
use serde_json::{Value, json};
use testkit::{Endpoint, Reply};

use super::support::{adapter, ask, options};

fn ok_endpoint(n: usize) -> Endpoint {
    Endpoint::with_replies((0..n).map(|_| Reply::completion_text("ok"))).unwrap()
}

fn echo_tool() -> ModelToolDefinition {
    ModelToolDefinition {
        name: "echo".into(),
        description: "says it back".into(),
        input: json!({ "type": "object", "properties": { "text": { "type": "string" } } }),
    }
}

fn history() -> Vec<Message> {
    vec![
        Message::user_text("hi"),
        Message::new(
            Role::Assistant,
            MessageSource::Model,
            vec![
                Part::reasoning("secret thoughts"),
                Part::text("calling"),
                Part::ToolCall(ToolCall::from_raw("call_1", "echo", "{\"text\":\"a\"}")),
            ],
        ),
        Message::new(
            Role::Tool,
            MessageSource::Tool,
            vec![Part::ToolResult(ToolResult {
                call_id: "call_1".into(),
                name: "echo".into(),
                content: "a".into(),
                is_error: false,
            })],
        ),
    ]
}

async fn body_of(adapter: &dyn ModelAdapter, ep: &Endpoint, request: ModelRequest) -> Value {
    adapter.complete(request).await.unwrap();
    ep.chat_bodies().pop().unwrap()
}

#[tokio::test]
async fn item_224_full_request_shape() {
    let ep = ok_endpoint(1);
    let mut opts = ProviderOptions::new(format!("{}/", ep.base_url())).with_key("sk-test");
    opts.headers = vec![("x-title".into(), "cofold".into())];
    let provider = OpenAiProvider::new(opts).unwrap();
    let spec = ModelSpec {
        params: Some(ModelParams {
            temperature: Some(0.5),
            seed: Some(7),
            ..ModelParams::default()
        }),
        ..ModelSpec::new("m")
    };
    let adapter = provider.adapter(spec);
    assert_eq!(adapter.id(), "openai-compat:m");
    assert_eq!(adapter.model_id(), "m");
    assert_eq!(
        adapter.features(),
        ModelFeatures {
            tools: true,
            streaming: true,
            ..ModelFeatures::default()
        }
    );
    assert_eq!(adapter.features(), DEFAULT_FEATURES);
    let request = ModelRequest {
        instructions: "be brief".into(),
        messages: history(),
        tools: vec![echo_tool()],
        params: ModelParams {
            max_output_tokens: Some(100),
            ..ModelParams::default()
        },
        cache_key: Some("session-1".into()),
        ..ModelRequest::default()
    };
    adapter.complete(request).await.unwrap();
    let reqs = ep.chat_requests();
    let r = &reqs[0];
    assert_eq!(r.path, "/v1/chat/completions");
    let content_types: Vec<&str> = r
        .headers
        .iter()
        .filter(|(k, _)| k == "content-type")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(content_types, ["application/json"]);
    assert_eq!(r.header("x-title"), Some("cofold"));
    assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
    assert_eq!(
        r.json,
        json!({
            "model": "m",
            "messages": [
                { "role": "system", "content": "be brief" },
                { "role": "user", "content": "hi" },
                { "role": "assistant", "content": "calling", "tool_calls": [
                    { "id": "call_1", "type": "function", "function": { "name": "echo", "arguments": "{\"text\":\"a\"}" } }
                ] },
                { "role": "tool", "tool_call_id": "call_1", "name": "echo", "content": "a" }
            ],
            "tools": [{ "type": "function", "function": { "name": "echo", "description": "says it back",
                "parameters": { "type": "object", "properties": { "text": { "type": "string" } } } } }],
            "tool_choice": "auto",
            "temperature": 0.5,
            "max_tokens": 100,
            "seed": 7,
            "prompt_cache_key": "session-1",
            "stream": false
        })
    );
}

#[tokio::test]
async fn item_225_226_cache_key_no_tools_no_key() {
    let ep = ok_endpoint(2);
    let a = adapter(&ep);
    let body = body_of(
        &a,
        &ep,
        ModelRequest {
            cache_key: Some("k".into()),
            ..ask("x")
        },
    )
    .await;
    assert_eq!(body["prompt_cache_key"], "k");
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());

    let keyless = OpenAiProvider::new(ProviderOptions::new(ep.base_url()).with_key("")).unwrap();
    keyless
        .adapter(ModelSpec::new("m"))
        .complete(ask("x"))
        .await
        .unwrap();
    let reqs = ep.chat_requests();
    assert_eq!(reqs[1].header("authorization"), None);
}

#[tokio::test]
async fn item_226_no_key_at_all_sends_no_authorization() {
    let ep = ok_endpoint(1);
    let p = OpenAiProvider::new(ProviderOptions::new(ep.base_url())).unwrap();
    p.adapter(ModelSpec::new("m"))
        .complete(ask("x"))
        .await
        .unwrap();
    assert_eq!(ep.chat_requests()[0].header("authorization"), None);
}

#[tokio::test]
async fn item_227_assistant_with_only_tool_calls_has_null_content() {
    let ep = ok_endpoint(1);
    let a = adapter(&ep);
    let only_call = Message::new(
        Role::Assistant,
        MessageSource::Model,
        vec![Part::ToolCall(ToolCall::from_raw("c", "echo", "{}"))],
    );
    let body = body_of(
        &a,
        &ep,
        ModelRequest {
            messages: vec![only_call],
            ..ask("x")
        },
    )
    .await;
    assert_eq!(body["messages"][1]["content"], Value::Null);
    assert_eq!(body["messages"][1]["tool_calls"][0]["id"], "c");
}

#[tokio::test]
async fn item_228_image_with_images_enabled() {
    let ep = ok_endpoint(1);
    let provider = OpenAiProvider::new(options(&ep)).unwrap();
    let a = provider.adapter(ModelSpec {
        features: Some(ModelFeatures {
            images: true,
            ..DEFAULT_FEATURES
        }),
        ..ModelSpec::new("m")
    });
    let msg = Message::new(
        Role::User,
        MessageSource::Input,
        vec![
            Part::text("what is this"),
            Part::image_data("image/png", "iVBORw0KGgo="),
        ],
    );
    let body = body_of(
        &a,
        &ep,
        ModelRequest {
            messages: vec![msg],
            ..ask("x")
        },
    )
    .await;
    assert_eq!(
        body["messages"][1]["content"],
        json!([
            { "type": "text", "text": "what is this" },
            { "type": "image_url", "image_url": { "url": "data:image/png;base64,iVBORw0KGgo=" } }
        ])
    );
}

fn effort_params(effort: ReasoningEffort) -> ModelParams {
    ModelParams {
        reasoning: Some(ReasoningParams {
            effort: Some(effort),
            max_tokens: None,
        }),
        ..ModelParams::default()
    }
}

#[tokio::test]
async fn item_229_reasoning_param_turns_the_feature_on() {
    let ep = ok_endpoint(3);
    let provider = OpenAiProvider::new(options(&ep)).unwrap();
    let on = provider.adapter(ModelSpec {
        params: Some(effort_params(ReasoningEffort::High)),
        ..ModelSpec::new("m")
    });
    assert!(on.features().reasoning);
    let body = body_of(&on, &ep, ask("x")).await;
    assert_eq!(body["reasoning_effort"], "high");

    let off = provider.adapter(ModelSpec {
        params: Some(effort_params(ReasoningEffort::High)),
        features: Some(ModelFeatures {
            reasoning: false,
            ..DEFAULT_FEATURES
        }),
        ..ModelSpec::new("m")
    });
    let body = body_of(&off, &ep, ask("x")).await;
    assert!(body.get("reasoning_effort").is_none() && body.get("reasoning").is_none());

    let plain = provider.adapter(ModelSpec::new("m"));
    assert!(!plain.features().reasoning);
    let body = body_of(
        &plain,
        &ep,
        ModelRequest {
            params: effort_params(ReasoningEffort::High),
            ..ask("x")
        },
    )
    .await;
    assert!(
        body.get("reasoning_effort").is_none(),
        "item 233: no reasoning without the feature"
    );
}

#[tokio::test]
async fn item_230_effort_and_max_tokens() {
    let ep = ok_endpoint(2);
    let provider = OpenAiProvider::new(options(&ep)).unwrap();
    let a = provider.adapter(ModelSpec {
        params: Some(effort_params(ReasoningEffort::Low)),
        ..ModelSpec::new("m")
    });
    let body = body_of(&a, &ep, ask("x")).await;
    assert_eq!(body["reasoning_effort"], "low");
    let with_max = ModelParams {
        reasoning: Some(ReasoningParams {
            effort: Some(ReasoningEffort::Medium),
            max_tokens: Some(2048),
        }),
        ..ModelParams::default()
    };
    let body = body_of(
        &a,
        &ep,
        ModelRequest {
            params: with_max,
            ..ask("x")
        },
    )
    .await;
    assert_eq!(
        body["reasoning"],
        json!({ "effort": "medium", "max_tokens": 2048 })
    );
    assert!(body.get("reasoning_effort").is_none());
}

#[tokio::test]
async fn item_231_every_effort_is_sent_as_given() {
    let ep = ok_endpoint(6);
    let provider = OpenAiProvider::new(options(&ep)).unwrap();
    for effort in ReasoningEffort::ALL {
        let a = provider.adapter(ModelSpec {
            params: Some(effort_params(effort)),
            ..ModelSpec::new("m")
        });
        let body = body_of(&a, &ep, ask("x")).await;
        assert_eq!(body["reasoning_effort"], effort.as_str());
    }
}

#[tokio::test]
async fn item_232_reasoning_budgets() {
    let ep = ok_endpoint(3);
    let mut opts = options(&ep);
    opts.reasoning_budgets = HashMap::from([(ReasoningEffort::High, 8000)]);
    let provider = OpenAiProvider::new(opts).unwrap();
    let a = provider.adapter(ModelSpec {
        params: Some(effort_params(ReasoningEffort::Low)),
        ..ModelSpec::new("m")
    });
    let high = body_of(
        &a,
        &ep,
        ModelRequest {
            params: effort_params(ReasoningEffort::High),
            ..ask("x")
        },
    )
    .await;
    assert_eq!(high["reasoning"], json!({ "max_tokens": 8000 }));
    assert!(high.get("reasoning_effort").is_none());
    let low = body_of(&a, &ep, ask("x")).await;
    assert_eq!(low["reasoning_effort"], "low");
    let explicit = ModelParams {
        reasoning: Some(ReasoningParams {
            effort: Some(ReasoningEffort::High),
            max_tokens: Some(100),
        }),
        ..ModelParams::default()
    };
    let body = body_of(
        &a,
        &ep,
        ModelRequest {
            params: explicit,
            ..ask("x")
        },
    )
    .await;
    assert_eq!(
        body["reasoning"],
        json!({ "effort": "high", "max_tokens": 100 })
    );
}

#[tokio::test]
async fn item_233_reasoning_parts_are_never_sent() {
    let ep = ok_endpoint(1);
    let a = adapter(&ep);
    let body = body_of(
        &a,
        &ep,
        ModelRequest {
            messages: history(),
            ..ask("x")
        },
    )
    .await;
    assert!(!body.to_string().contains("secret thoughts"));
}

#[tokio::test]
async fn request_params_override_model_params_key_by_key() {
    let ep = ok_endpoint(1);
    let provider = OpenAiProvider::new(options(&ep)).unwrap();
    let a = provider.adapter(ModelSpec {
        params: Some(ModelParams {
            temperature: Some(0.1),
            top_p: Some(0.9),
            ..ModelParams::default()
        }),
        ..ModelSpec::new("m")
    });
    let params = ModelParams {
        temperature: Some(1.0),
        stop: Some(vec!["END".into()]),
        ..ModelParams::default()
    };
    let body = body_of(&a, &ep, ModelRequest { params, ..ask("x") }).await;
    assert_eq!(
        (
            body["temperature"].clone(),
            body["top_p"].clone(),
            body["stop"].clone()
        ),
        (json!(1.0), json!(0.9), json!(["END"]))
    );
}

#[tokio::test]
async fn item_244_feature_gates_before_any_request() {
    let ep = ok_endpoint(1);
    let provider = OpenAiProvider::new(options(&ep)).unwrap();
    let no_tools = provider.adapter(ModelSpec {
        features: Some(ModelFeatures {
            tools: false,
            ..DEFAULT_FEATURES
        }),
        ..ModelSpec::new("m")
    });
    let err = no_tools
        .complete(ModelRequest {
            tools: vec![echo_tool()],
            ..ask("x")
        })
        .await
        .unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (ErrorCode::UnsupportedFeature, "m does not support tools")
    );
    let image = Message::new(
        Role::User,
        MessageSource::Input,
        vec![Part::image_url("image/png", "https://x/y.png")],
    );
    let err = adapter(&ep)
        .complete(ModelRequest {
            messages: vec![image],
            ..ask("x")
        })
        .await
        .unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (ErrorCode::UnsupportedFeature, "m does not support images")
    );
    assert_eq!(ep.request_count(), 0);
    no_tools.complete(ask("x")).await.unwrap();
    assert_eq!(ep.request_count(), 1);
}
