//! Engine cases of "Model resolution and catalogue" (see `docs/acceptance.md`) not covered by
//! `models.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use ahp_types::actions::StateAction;
use ahp_types::state::{ModelSelection, SessionModelInfo};
use ahpd_sdk::Agent;
use serde_json::{Value, json};
use testkit::{Gate, Reply};

use super::support::*;

async fn turn_on(agent: Arc<dyn Agent>, place: &Place, model: Option<&str>) -> StateAction {
    let th = host(vec![agent]).await;
    let mut w = Watch::create(&th, "cofold", &fresh_id("m"), Some(&place.work), json!({})).await;
    let mut m = message("hi");
    m.model = model.map(|id| ModelSelection {
        id: id.into(),
        config: None,
    });
    w.send_message("t1", m).await;
    w.end("t1").await
}

fn error_of(end: &StateAction) -> String {
    match end {
        StateAction::ChatError(e) => {
            assert_eq!(e.part.resumable, None, "not resumable");
            e.part.error.message.clone()
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

fn ids(rows: &[SessionModelInfo]) -> Vec<String> {
    rows.iter().map(|m| m.id.clone()).collect()
}

#[test]
fn case_021_the_copapo_files_are_read_and_merged() {
    let place = Place::new();
    place.copapo(json!({ "model": "p/from-user-file" }));
    let model = |agent: &ahpd_agent_cofold::CofoldAgent, dir: Option<&std::path::Path>| {
        agent
            .config_defaults(dir)
            .get("model")
            .cloned()
            .unwrap_or(Value::Null)
    };
    let a = agent(json!({ "memory": true }), place.embedder());
    assert_eq!(model(&a, None), "p/from-user-file");
    // `~/.config` when `XDG_CONFIG_HOME` is unset.
    let mut env = place.env();
    env.vars.remove("XDG_CONFIG_HOME");
    let dotconfig = place.home.join(".config").join("copapo");
    std::fs::create_dir_all(&dotconfig).unwrap();
    std::fs::write(
        dotconfig.join("config.json"),
        json!({ "model": "p/from-home" }).to_string(),
    )
    .unwrap();
    let home = agent(
        json!({ "memory": true }),
        ahpd_agent_cofold::Embedder {
            env: Some(env),
            ..Default::default()
        },
    );
    assert_eq!(model(&home, None), "p/from-home");
    // A `.copapo.json` above W, for sessions there alone.
    let project = place.work.join("project");
    std::fs::create_dir_all(project.join("deep")).unwrap();
    std::fs::write(
        project.join(".copapo.json"),
        json!({ "model": "p/from-project" }).to_string(),
    )
    .unwrap();
    assert_eq!(model(&a, Some(&project.join("deep"))), "p/from-project");
    assert_eq!(model(&a, Some(&place.work)), "p/from-user-file");
    // `COPAPO_CONFIG` on top of both.
    let top = place.home.join("top.json");
    std::fs::write(&top, json!({ "model": "p/from-variable" }).to_string()).unwrap();
    let over = agent(
        json!({ "memory": true }),
        ahpd_agent_cofold::Embedder {
            env: Some(place.env_with(&[("COPAPO_CONFIG", &top.display().to_string())])),
            ..Default::default()
        },
    );
    assert_eq!(model(&over, Some(&project.join("deep"))), "p/from-variable");
}

#[tokio::test]
async fn case_024_broken_provider_lists_give_no_provider() {
    let place = Place::new();
    let a = agent(json!({ "memory": true }), place.embedder());
    assert!(
        a.probe().await.models.is_empty(),
        "no file, no provider, no rows"
    );
    place.copapo(json!({ "providers": [{ "id": "x" }, 7, { "baseUrl": "u" }] }));
    let a = agent(json!({ "memory": true }), place.embedder());
    assert!(a.probe().await.models.is_empty());
    assert!(a.config_defaults(None).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_027_028_an_unknown_provider_with_or_without_a_base() {
    let place = Place::new();
    let ep = endpoint(vec![text("ok")]);
    place.copapo(json!({ "providers": [{ "id": "open_router", "baseUrl": ep.base_url() }] }));
    let a = Arc::new(agent(
        json!({ "memory": true, "model": "absent/model" }),
        place.embedder(),
    ));
    let sentence = error_of(&turn_on(a, &place, None).await);
    // The sentence goes on with what to write instead.
    assert!(sentence.contains("configures open_router"), "{sentence}");
    // With an explicit base, a prefix naming no provider is part of the id.
    let base = endpoint(vec![text("ok")]);
    let a = Arc::new(agent(
        json!({ "memory": true, "baseUrl": base.base_url(), "model": "deepseek/deepseek-chat" }),
        place.embedder(),
    ));
    assert!(matches!(
        turn_on(a, &place, None).await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(base.chat_bodies()[0]["model"], "deepseek/deepseek-chat");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_030_the_lent_token_the_option_key_and_the_key_function() {
    let place = Place::new();
    let ep = endpoint(vec![text("lent"), text("daemon")]);
    let a = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m", "apiKey": "daemon" }),
        place.embedder(),
    ));
    let th = host(vec![a]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("lent"),
        Some(&place.work),
        json!({}),
    )
    .await;
    let _: Value = w
        .client
        .request(
            "authenticate",
            json!({ "channel": ahp_types::ROOT_RESOURCE_URI,
            "resource": "https://ahpd.dev/agent-cofold", "token": "lent" }),
        )
        .await
        .expect("authenticate");
    w.send("t1", "hi").await;
    w.end("t1").await;
    assert_eq!(
        ep.chat_requests()[0].header("authorization"),
        Some("Bearer lent")
    );
    // Another client, which lent nothing, starts the next turn: the option's key.
    let other = client(&th.url, "other").await;
    other
        .dispatch(w.chat.clone(), turn_started_with("t2", message("again")))
        .await
        .unwrap();
    w.end("t2").await;
    assert_eq!(
        ep.chat_requests()[1].header("authorization"),
        Some("Bearer daemon")
    );

    // An embedder's key function: asked once per HTTP request, the retry included.
    let asked = Arc::new(AtomicUsize::new(0));
    let counter = asked.clone();
    let retried = endpoint(vec![Reply::status(500, "busy"), text("after a retry")]);
    let mut embedder = place.embedder();
    embedder.api_key = Some(Arc::new(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        Some("fn-key".into())
    }));
    let a = Arc::new(agent(
        json!({ "memory": true, "baseUrl": retried.base_url(), "model": "m" }),
        embedder,
    ));
    assert!(matches!(
        turn_on(a, &place, None).await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(retried.chat_requests().len(), 2);
    assert_eq!(asked.load(Ordering::SeqCst), retried.requests().len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_031_a_reference_with_nowhere_to_go_fails_the_turn_not_the_session() {
    let place = Place::new();
    place.copapo(json!({}));
    let a = Arc::new(agent(
        json!({ "memory": true, "model": "some-model" }),
        place.embedder(),
    ));
    let sentence = error_of(&turn_on(a, &place, None).await);
    assert!(sentence.starts_with("cofold: "), "{sentence}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_037_a_catalogue_that_never_answers_is_given_up() {
    let place = Place::new();
    let never = Gate::new();
    let silent = testkit::Endpoint::builder()
        .models_reply(Reply::json(json!({ "data": [{ "id": "late" }] })).held(&never))
        .start()
        .unwrap();
    let healthy = testkit::Endpoint::builder().models(["c"]).start().unwrap();
    place.copapo(json!({
        "providers": [
            { "id": "p1", "baseUrl": silent.base_url() },
            { "id": "p2", "baseUrl": healthy.base_url() }
        ],
        "model": "p1/m"
    }));
    let a = agent(
        json!({ "memory": true, "catalogueTimeoutMs": 200 }),
        place.embedder(),
    );
    let rows = a.probe().await.models;
    assert_eq!(ids(&rows), ["p1/m", "p2/c"]);
    assert_eq!(
        silent.requests().iter().filter(|r| r.is_models()).count(),
        1
    );
    never.open();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_038_each_offered_row_reaches_its_own_endpoint() {
    let place = Place::new();
    let one = testkit::Endpoint::builder()
        .models(["a"])
        .replies(vec![text("from one")])
        .start()
        .unwrap();
    let two = testkit::Endpoint::builder()
        .models(["c"])
        .replies(vec![text("from two")])
        .start()
        .unwrap();
    place.copapo(json!({
        "providers": [
            { "id": "p1", "baseUrl": one.base_url(), "apiKey": "k1" },
            { "id": "p2", "baseUrl": two.base_url(), "apiKey": "k2" }
        ],
        "model": "p1/a"
    }));
    let a = Arc::new(agent(json!({ "memory": true }), place.embedder()));
    let rows = a.probe().await.models;
    assert_eq!(ids(&rows), ["p1/a", "p2/c"]);
    for (row, ep, id, key) in [
        ("p1/a", &one, "a", "Bearer k1"),
        ("p2/c", &two, "c", "Bearer k2"),
    ] {
        assert!(matches!(
            turn_on(a.clone(), &place, Some(row)).await,
            StateAction::ChatTurnComplete(_)
        ));
        let r = ep.chat_requests().remove(0);
        assert_eq!(r.json["model"], id);
        assert_eq!(r.header("authorization"), Some(key));
    }
}

#[tokio::test]
async fn case_039_an_explicit_base_lists_the_bare_model_then_its_catalogue() {
    let place = Place::new();
    let ep = testkit::Endpoint::builder()
        .models_body(
            json!({ "object": "list", "data": [{ "id": "qwen/qwen3-8b", "name": "Qwen3 8B" }] }),
        )
        .start()
        .unwrap();
    let a = agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "qwen3-8b" }),
        place.embedder(),
    );
    let rows = a.probe().await.models;
    assert_eq!(ids(&rows), ["qwen3-8b", "cofold/qwen/qwen3-8b"]);
    assert_eq!(rows[1].name, "Qwen3 8B");
}

#[tokio::test]
async fn case_040_an_embedders_adapter_lists_only_the_configured_model() {
    use cofold_agents::testing::{FakeModel, FakeStep};
    let place = Place::new();
    let mut embedder = place.embedder();
    embedder.adapter = Some(FakeModel::new(vec![FakeStep::text("hi")]).adapter());
    let a = agent(json!({ "memory": true, "model": "m" }), embedder);
    let rows = a.probe().await.models;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert!(rows[0].id.ends_with('m'), "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_041_the_root_lists_the_probe_rows_and_a_new_model_is_fetched() {
    let place = Place::new();
    let ep = testkit::Endpoint::builder()
        .models(["a"])
        .replies(vec![text("on b")])
        .start()
        .unwrap();
    let a = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "a" }),
        place.embedder(),
    ));
    let th = host(vec![a.clone()]).await;
    let client = client(&th.url, "root").await;
    let mut events = client.events();
    let (res, _sub): (ahp_types::commands::SubscribeResult, _) = client
        .subscribe(ahp_types::ROOT_RESOURCE_URI.to_owned())
        .await
        .unwrap();
    let mut mirror = ahpd_sdk::testing::Mirror::default();
    mirror.apply_snapshot(&res.snapshot.expect("a snapshot"));
    let listed = |m: &ahpd_sdk::testing::Mirror| -> Vec<(String, String)> {
        m.root
            .as_ref()
            .map(|r| {
                r.agents
                    .iter()
                    .flat_map(|ag| ag.models.iter().map(|m| (m.id.clone(), m.provider.clone())))
                    .collect()
            })
            .unwrap_or_default()
    };
    while !listed(&mirror).iter().any(|(id, _)| id == "cofold/a") {
        let ev = tokio::time::timeout(PATIENCE, events.recv())
            .await
            .unwrap()
            .unwrap();
        if let ahp::SubscriptionEvent::Action(env) = ev.event {
            mirror.apply(&env);
        }
    }
    assert!(
        listed(&mirror)
            .iter()
            .all(|(_, provider)| provider == "cofold")
    );
    // A turn on an endpoint whose catalogue was never read has it read in the background;
    // the next probe lists what it holds.
    let fresh = testkit::Endpoint::builder()
        .models(["a", "b"])
        .replies(vec![text("on b")])
        .start()
        .unwrap();
    let unread = agent(
        json!({ "memory": true, "baseUrl": fresh.base_url(), "model": "b" }),
        place.embedder(),
    );
    let (mut session, mut probe) =
        super::cases_queue::detached_session(&unread, &place, &fresh_id("unread")).await;
    session.begin(super::cases_queue::turn("t1", "hi"));
    loop {
        let event = tokio::time::timeout(PATIENCE, probe.next())
            .await
            .unwrap()
            .unwrap();
        if let ahpd_sdk::agent::ContextEvent::Emit(StateAction::ChatTurnComplete(_)) = event {
            break;
        }
    }
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !fresh.requests().iter().any(|r| r.is_models()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no catalogue request"
        );
        tokio::task::yield_now().await;
    }
    let rows = unread.probe().await.models;
    assert!(ids(&rows).contains(&"cofold/b".to_owned()), "{rows:?}");
    session.close().await;
}

#[tokio::test]
async fn case_042_a_catalogue_entry_with_reasoning_offers_every_level() {
    let place = Place::new();
    let ep = testkit::Endpoint::builder()
        .models_body(json!({ "object": "list", "data": [
            { "id": "r", "supported_parameters": ["reasoning", "tools"] },
            { "id": "plain" }
        ] }))
        .start()
        .unwrap();
    let a = agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "plain" }),
        place.embedder(),
    );
    let rows = a.probe().await.models;
    let level = |id: &str| {
        rows.iter()
            .find(|m| m.id == id)
            .and_then(|m| m.config_schema.as_ref())
            .map(|s| serde_json::to_value(s).unwrap()["properties"]["thinkingLevel"].clone())
    };
    let r = level("cofold/r").expect("a level schema");
    assert_eq!(r["enum"], json!(["off", "low", "medium", "high"]));
    assert_eq!(r["default"], "off");
    assert!(level("cofold/plain").is_none());
}
