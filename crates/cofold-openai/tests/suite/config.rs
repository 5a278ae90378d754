//! Providers from configuration (runtime cases 252–255, docs/acceptance.md).

use cofold_agents::error::ErrorCode;
use cofold_agents::model::{ModelProvider, ModelSpec};
use cofold_agents::provider::{ProviderConfig, split_model};
use cofold_openai::{provider_for, providers_of};
use serde_json::json;
use testkit::{Endpoint, Reply};

use super::support::ask;

#[test]
fn item_252_split_model() {
    let r = split_model("or/qwen/qwen3-8b").unwrap();
    assert_eq!(
        (r.provider.as_str(), r.model.as_str()),
        ("or", "qwen/qwen3-8b")
    );
    for bad in ["qwen", "or/", "/m", ""] {
        assert!(split_model(bad).is_none(), "{bad:?}");
    }
}

fn configs() -> Vec<ProviderConfig> {
    vec![
        ProviderConfig::new("a", "http://127.0.0.1:9/v1"),
        ProviderConfig::new("b", "http://127.0.0.1:9/v2"),
    ]
}

#[test]
fn item_253_providers_of_keeps_order_and_ids() {
    let p = providers_of(&configs()).unwrap();
    let keys: Vec<&str> = p.keys().map(String::as_str).collect();
    assert_eq!(keys, ["a", "b"]);
    assert_eq!(p["a"].id(), "openai-compat:a");
    assert_eq!(p["b"].base_url(), "http://127.0.0.1:9/v2");
}

#[test]
fn item_254_provider_for() {
    let p = providers_of(&configs()).unwrap();
    let (provider, model) = provider_for(&p, "b/org/model-1").unwrap();
    assert_eq!(
        (provider.id(), model.as_str()),
        ("openai-compat:b", "org/model-1")
    );
    let e = provider_for(&p, "c/m").unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            ErrorCode::InvalidOptions,
            "model \"c/m\" names provider \"c\", which is not configured (configured: a, b); \
             if \"c/m\" is a model id, write \"a/c/m\""
        )
    );
    let e = provider_for(&providers_of(&[]).unwrap(), "a/m").unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (ErrorCode::InvalidOptions, "no provider is configured")
    );
    let e = provider_for(&p, "m").unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            ErrorCode::InvalidOptions,
            "model \"m\" must be written <provider>/<model>"
        )
    );
}

#[test]
fn item_255_provider_schema() {
    assert!(ProviderConfig::from_value(&json!({ "id": "a", "baseUrl": "u" })).is_ok());
    assert!(
        ProviderConfig::from_value(
            &json!({ "id": "a", "baseUrl": "u", "apiKey": "", "headers": { "x": "y" } })
        )
        .is_ok()
    );
    for bad in [
        json!({ "baseUrl": "u" }),
        json!({ "id": "a" }),
        json!({ "id": "a/b", "baseUrl": "u" }),
        json!({ "id": "a b", "baseUrl": "u" }),
        json!({ "id": "", "baseUrl": "u" }),
        json!({ "id": "a", "baseUrl": "u", "extra": 1 }),
    ] {
        assert!(ProviderConfig::from_value(&bad).is_err(), "{bad}");
    }
    let issues = ProviderConfig::from_value(&json!({ "id": "a", "baseUrl": "" })).unwrap_err();
    assert_eq!(issues[0].to_string(), "$.baseUrl shorter than 1");
}

#[tokio::test]
async fn a_configured_provider_sends_its_key_and_headers() {
    let ep = Endpoint::with_replies([Reply::completion_text("ok")]).unwrap();
    let config = ProviderConfig {
        api_key: Some("sk-config".into()),
        headers: Some(vec![("x-title".into(), "cofold".into())]),
        ..ProviderConfig::new("local", ep.base_url())
    };
    let providers = providers_of(&[config]).unwrap();
    let (provider, model) = provider_for(&providers, "local/deepseek/deepseek-chat").unwrap();
    let adapter = provider.model(ModelSpec::new(model));
    assert_eq!(adapter.id(), "openai-compat:deepseek/deepseek-chat");
    adapter.complete(ask("x")).await.unwrap();
    let r = &ep.chat_requests()[0];
    assert_eq!(r.json["model"], "deepseek/deepseek-chat");
    assert_eq!(r.header("authorization"), Some("Bearer sk-config"));
    assert_eq!(r.header("x-title"), Some("cofold"));
}
