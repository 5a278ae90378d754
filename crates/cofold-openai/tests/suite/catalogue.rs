//! The catalogue (runtime cases 236, 237, docs/acceptance.md) and `list_all`.

use std::time::Duration;

use cofold_agents::error::ErrorCode;
use cofold_agents::model::{ListOptions, ModelFeatures, ModelProvider};
use cofold_agents::provider::ProviderConfig;
use cofold_openai::{DEFAULT_FEATURES, OpenAiProvider, ProviderOptions, list_all, providers_of};
use serde_json::json;
use testkit::{Endpoint, Gate, Reply};

use super::support::options;

#[tokio::test]
async fn item_236_provider_ids() {
    let named = OpenAiProvider::new(ProviderOptions {
        name: Some("ds".into()),
        ..ProviderOptions::new("https://api.deepseek.com/v1/")
    })
    .unwrap();
    assert_eq!(named.id(), "openai-compat:ds");
    assert_eq!(named.base_url(), "https://api.deepseek.com/v1");
    let from_host = OpenAiProvider::new(ProviderOptions::new("http://localhost:1234/v1")).unwrap();
    assert_eq!(from_host.id(), "openai-compat:localhost:1234");
    let e = OpenAiProvider::new(ProviderOptions::new("not a url")).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidOptions);
}

#[tokio::test]
async fn item_236_catalogue_entries_are_mapped() {
    let ep = Endpoint::builder()
        .models_body(json!({ "data": [
            { "id": "plain" },
            { "id": "moonshotai/kimi", "name": "Kimi", "context_length": 131072,
              "supported_parameters": ["tools", "reasoning", "response_format"],
              "architecture": { "input_modalities": ["text", "image"] },
              "top_provider": { "max_completion_tokens": null },
              "pricing": { "prompt": "0.000003", "completion": "0.000015", "input_cache_read": "0.0000003", "input_cache_write": "NaN" } },
            { "id": "capped", "supported_parameters": [], "top_provider": { "max_completion_tokens": 4096 }, "context_length": 0 },
            { "name": "no id" }
        ] }))
        .start()
        .unwrap();
    let p = OpenAiProvider::new(options(&ep)).unwrap();
    let models = p.list_models(ListOptions::default()).await.unwrap();
    assert_eq!(models.len(), 3);
    assert_eq!(
        (models[0].name.as_str(), models[0].features),
        ("plain", DEFAULT_FEATURES)
    );
    assert_eq!(models[0].pricing, None);
    let k = &models[1];
    assert_eq!(k.name, "Kimi");
    assert_eq!(
        k.features,
        ModelFeatures {
            tools: true,
            streaming: true,
            images: true,
            structured_output: true,
            reasoning: true
        }
    );
    assert_eq!(
        (k.context_tokens, k.max_output_tokens),
        (Some(131072), None)
    );
    let pr = k.pricing.clone().unwrap();
    assert_eq!(
        (
            pr.input_per_million,
            pr.output_per_million,
            pr.cache_read_per_million,
            pr.cache_write_per_million
        ),
        (3.0, 15.0, Some(0.3), None)
    );
    assert_eq!(
        models[2].features,
        ModelFeatures {
            streaming: true,
            ..ModelFeatures::default()
        }
    );
    assert_eq!(
        (models[2].max_output_tokens, models[2].context_tokens),
        (Some(4096), None)
    );
    let r = &ep.requests()[0];
    assert_eq!((r.method.as_str(), r.path.as_str()), ("GET", "/v1/models"));
    assert_eq!(r.header("authorization"), Some("Bearer sk-test"));
}

/// Image input is read from the entry's modalities whether or not it lists
/// `supported_parameters`; the other features keep their defaults without that list.
#[tokio::test]
async fn image_input_is_read_without_supported_parameters() {
    let ep = Endpoint::builder()
        .models_body(json!({ "data": [
            { "id": "vision", "architecture": { "input_modalities": ["text", "image"] } },
            { "id": "text-only", "architecture": { "input_modalities": ["text"] } },
            { "id": "old-shape", "architecture": { "modality": "text+image->text" } },
            { "id": "makes-images", "architecture": { "modality": "text->image" } },
            { "id": "listed", "supported_parameters": ["tools"],
              "architecture": { "input_modalities": ["image", "text"], "modality": "text->text" } }
        ] }))
        .start()
        .unwrap();
    let models = OpenAiProvider::new(options(&ep))
        .unwrap()
        .list_models(ListOptions::default())
        .await
        .unwrap();
    let images: Vec<(&str, bool)> = models
        .iter()
        .map(|m| (m.id.as_str(), m.features.images))
        .collect();
    assert_eq!(
        images,
        [
            ("vision", true),
            ("text-only", false),
            ("old-shape", true),
            ("makes-images", false),
            ("listed", true)
        ]
    );
    assert_eq!(
        models[0].features,
        ModelFeatures {
            images: true,
            ..DEFAULT_FEATURES
        }
    );
    assert_eq!(models[1].features, DEFAULT_FEATURES);
    assert_eq!(
        models[4].features,
        ModelFeatures {
            tools: true,
            streaming: true,
            images: true,
            ..ModelFeatures::default()
        }
    );
}

#[tokio::test]
async fn item_237_list_without_data_is_invalid_response() {
    let ep = Endpoint::builder()
        .models_body(json!({ "models": [] }))
        .start()
        .unwrap();
    let e = OpenAiProvider::new(options(&ep))
        .unwrap()
        .list_models(ListOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (ErrorCode::InvalidResponse, "model list has no data[]")
    );
}

#[tokio::test]
async fn catalogue_errors_follow_the_http_rules() {
    let ep = Endpoint::builder()
        .models_reply(Reply::status(401, "who are you"))
        .start()
        .unwrap();
    let e = OpenAiProvider::new(options(&ep))
        .unwrap()
        .list_models(ListOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Auth);
    assert_eq!(
        e.message,
        format!("401 from {}/models: who are you", ep.base_url())
    );
}

#[tokio::test(start_paused = true)]
async fn catalogue_timeout_is_network_no_answer_in_time() {
    let gate = Gate::new();
    let ep = Endpoint::builder()
        .models_reply(Reply::json(json!({ "data": [] })).held(&gate))
        .start()
        .unwrap();
    let p = OpenAiProvider::new(options(&ep)).unwrap();
    let e = p
        .list_models(ListOptions {
            signal: None,
            timeout: Some(Duration::from_secs(15)),
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code, e.message.clone()),
        (
            ErrorCode::Network,
            format!("cannot reach {}/models: no answer in time", ep.base_url())
        )
    );
    gate.open();
}

#[tokio::test]
async fn list_all_asks_every_provider_and_skips_failures() {
    let a = Endpoint::builder()
        .models(["m1", "org/m2"])
        .start()
        .unwrap();
    let b = Endpoint::builder()
        .models_reply(Reply::status(500, "down"))
        .start()
        .unwrap();
    let c = Endpoint::builder().models(["m3"]).start().unwrap();
    let configs = vec![
        ProviderConfig {
            api_key: Some("key-a".into()),
            ..ProviderConfig::new("a", a.base_url())
        },
        ProviderConfig::new("b", b.base_url()),
        ProviderConfig {
            api_key: Some("key-c".into()),
            ..ProviderConfig::new("c", c.base_url())
        },
    ];
    let mut providers = providers_of(&configs).unwrap();
    // No retries wait on a failing catalogue here: rebuild b with retries 0.
    let mut opts = ProviderOptions::from_config(&configs[1]);
    opts.retries = Some(0);
    providers.insert(
        "b".into(),
        std::sync::Arc::new(OpenAiProvider::new(opts).unwrap()),
    );
    // A bound no loaded machine reaches: the providers answer or fail on their own.
    let all = list_all(&providers, Duration::from_secs(3600)).await;
    let ids: Vec<String> = all.iter().map(|(p, m)| format!("{p}/{}", m.id)).collect();
    assert_eq!(ids, ["a/m1", "a/org/m2", "c/m3"]);
    assert_eq!(
        a.requests()[0].header("authorization"),
        Some("Bearer key-a")
    );
    assert_eq!(
        c.requests()[0].header("authorization"),
        Some("Bearer key-c")
    );
    assert_eq!(b.requests()[0].header("authorization"), None);
}
