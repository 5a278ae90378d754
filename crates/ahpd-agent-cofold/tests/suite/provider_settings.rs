//! A copapo provider entry's transport settings reach the engine's requests: its quirks shape
//! the body the endpoint receives, and an entry without any keeps the defaults.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use serde_json::{Value, json};

use super::support::*;

/// Runs one turn of `model` against the copapo file `config` and returns the chat body sent.
async fn body_of(model: &str, config: impl Fn(&str) -> Value) -> Value {
    let place = Place::new();
    let ep = endpoint(vec![text("ok")]);
    place.copapo(config(&ep.base_url()));
    let agent = agent(json!({ "memory": true, "model": model }), place.embedder());
    let th = host(vec![Arc::new(agent)]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("settings"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "hi").await;
    let end = w.end("t1").await;
    assert!(matches!(end, StateAction::ChatTurnComplete(_)), "{end:?}");
    ep.chat_bodies().remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_providers_quirks_and_dialect_shape_the_request() {
    let providers = |base: &str| {
        json!({ "providers": [
            { "id": "plain", "baseUrl": base },
            { "id": "picky", "baseUrl": base,
              "quirks": { "streamOptions": false } },
            { "id": "mistral", "baseUrl": base, "dialect": "mistral" }
        ] })
    };

    let plain = body_of("plain/m", providers).await;
    assert_eq!(plain["stream_options"], json!({ "include_usage": true }));
    assert!(plain.get("prompt_cache_key").is_some(), "{plain}");

    // A single quirk changes that field alone.
    let picky = body_of("picky/m", providers).await;
    assert_eq!(picky["stream"], json!(true));
    assert!(picky.get("stream_options").is_none(), "{picky}");
    assert!(picky.get("prompt_cache_key").is_some(), "{picky}");

    // A dialect named on a loopback URL (which alone implies `generic`) takes that preset.
    let mistral = body_of("mistral/m", providers).await;
    assert!(mistral.get("stream_options").is_none(), "{mistral}");
    assert!(mistral.get("prompt_cache_key").is_none(), "{mistral}");
}
