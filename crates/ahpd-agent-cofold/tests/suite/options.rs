//! The plugin, its options schema and the record engine.

use std::sync::Arc;

use ahp_types::common::JsonObject;
use ahpd_agent_cofold::{cofold_agent, options_schema, plugin};
use ahpd_sdk::Agent;
use ahpd_sdk::agent::Secret;
use ahpd_sdk::plugin::{AgentRecord, Engine, Plugin, Readiness, Registrar, SecretReader};
use serde_json::{Value, json};

use super::support::*;

/// Paths of the schema's refusals of `options` (empty = accepted).
fn refusals(schema: &Value, options: Value) -> Vec<String> {
    let validator = jsonschema::options()
        .should_ignore_unknown_formats(true)
        .build(schema)
        .expect("the schema compiles");
    validator
        .iter_errors(&options)
        .map(|e| {
            let mut path: Vec<String> = e
                .instance_path()
                .segments()
                .map(|s| s.to_string())
                .collect();
            if let jsonschema::error::ValidationErrorKind::AdditionalProperties { unexpected } =
                e.kind()
            {
                path.extend(unexpected.iter().cloned());
            }
            path.join(".")
        })
        .collect()
}

fn refused_at(options: Value) -> Vec<String> {
    let mut r = refusals(&options_schema(), options);
    r.sort();
    r.dedup();
    r
}

#[test]
fn case_001_105_the_default_agent_describes_itself() {
    let place = Place::new();
    let agent = agent(json!({}), place.embedder());
    let d = agent.descriptor();
    assert_eq!(d.provider, "cofold");
    assert_eq!(d.display_name, "Cofold");
    let schema = agent.config_schema(None);
    let mut keys: Vec<&String> = schema.properties.keys().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "baseUrl",
            "effortLevel",
            "instructions",
            "model",
            "permissionMode"
        ]
    );
    assert_eq!(
        schema.properties["permissionMode"].default,
        Some(json!("auto"))
    );
    assert_eq!(schema.properties["effortLevel"].default, Some(json!("off")));
    assert_eq!(schema.properties["permissionMode"].title, "Approvals");
}

#[test]
fn case_002_the_resource_follows_the_endpoint() {
    let place = Place::new();
    let resource = |options: Value| {
        let d = agent(options, place.embedder()).descriptor();
        let r = d.protected_resources.expect("one resource");
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].resource_name.as_deref(), Some("Cofold"));
        assert_eq!(r[0].required, Some(false));
        r[0].resource.clone()
    };
    assert_eq!(
        resource(json!({ "memory": true, "baseUrl": "https://api.deepseek.com/v1" })),
        "https://api.deepseek.com"
    );
    assert_eq!(
        resource(json!({ "memory": true, "baseUrl": "http://127.0.0.1:1234/v1" })),
        "https://ahpd.dev/agent-cofold"
    );
    assert_eq!(
        resource(json!({ "memory": true, "baseUrl": "https://x.test/v1", "resource": "urn:mine" })),
        "urn:mine"
    );
}

#[test]
fn case_003_defaults_are_only_what_is_configured() {
    let place = Place::new();
    let a = agent(
        json!({ "memory": true, "model": "m", "baseUrl": "http://127.0.0.1:9/v1" }),
        place.embedder(),
    );
    let d = a.config_defaults(None);
    let expected: JsonObject =
        serde_json::from_value(json!({ "model": "m", "baseUrl": "http://127.0.0.1:9/v1" }))
            .unwrap();
    assert_eq!(d, expected);
    let schema = a.config_schema(None);
    assert!(d.keys().all(|k| schema.properties.contains_key(k)));
    let a = agent(json!({ "memory": true }), place.embedder());
    assert!(a.config_defaults(None).is_empty());
    place.copapo(json!({ "model": "open_router/x" }));
    let a = agent(json!({ "memory": true }), place.embedder());
    let d = a.config_defaults(None);
    assert_eq!(d.len(), 1);
    assert_eq!(d["model"], "open_router/x");
}

#[test]
fn case_004_the_options_schema_names_the_seed_table_with_its_defaults() {
    let schema = options_schema();
    let props = schema["properties"].as_object().unwrap();
    let mut keys: Vec<&String> = props.keys().collect();
    keys.sort();
    let mut expected = vec![
        "model",
        "baseUrl",
        "models",
        "instructions",
        "computerConfigDir",
        "store",
        "memory",
        "tools",
        "strictTools",
        "apiKey",
        "resource",
        "autoCompactTokens",
        "autoCompactAt",
        "catalogueTimeoutMs",
        "hostTools",
        "modelTimeouts",
    ];
    expected.sort();
    assert_eq!(keys, expected);
    assert_eq!(props["catalogueTimeoutMs"]["default"], 15000);
    assert_eq!(props["autoCompactAt"]["default"], 0.8);
    assert_eq!(props["computerConfigDir"]["default"], "/ahpd/cofold");
    assert_eq!(props["strictTools"]["default"], true);
    assert_eq!(props["hostTools"]["default"], true);
    assert_eq!(props["memory"]["default"], false);
    let p = plugin();
    assert_eq!(p.name(), "@ahpd/agent-cofold");
    assert_eq!(p.title(), "Cofold");
    assert_eq!(p.defaults(), json!({}));
    assert!(matches!(p.check(&json!({})), Readiness::Ready));
}

#[test]
fn case_005_a_wrong_type_is_refused_at_its_own_key() {
    let cases = [
        ("model", json!(1)),
        ("baseUrl", json!(true)),
        ("models", json!("x")),
        ("instructions", json!(3)),
        ("store", json!(false)),
        ("memory", json!("yes")),
        ("tools", json!(1)),
        ("strictTools", json!("no")),
        ("apiKey", json!(5)),
        ("resource", json!([])),
        ("autoCompactTokens", json!("x")),
        ("autoCompactAt", json!("x")),
        ("catalogueTimeoutMs", json!(1.5)),
        ("hostTools", json!(0)),
    ];
    for (key, value) in cases {
        let mut options = serde_json::Map::new();
        options.insert(key.to_owned(), value);
        assert_eq!(refused_at(Value::Object(options)), [key], "{key}");
    }
}

#[test]
fn case_007_008_tools_are_read_strictly_unless_told_otherwise() {
    assert_eq!(
        refused_at(json!({ "tools": { "files": "no" } })),
        ["tools.files"]
    );
    // The refusal lands on the `files` key (the schema's `anyOf` of boolean and object).
    let at = refused_at(json!({ "tools": { "files": { "requireRead": "no" } } }));
    assert!(
        !at.is_empty() && at.iter().all(|p| p.starts_with("tools.files")),
        "{at:?}"
    );
    assert!(refused_at(json!({ "tools": { "files": { "requireRead": false } } })).is_empty());
    assert!(
        refused_at(json!({ "strictTools": false, "tools": { "files": { "requireRead": false } } }))
            .is_empty()
    );
    assert_eq!(
        refused_at(json!({ "tools": { "filse": true } })),
        ["tools.filse"]
    );
    assert!(refused_at(json!({ "strictTools": false, "tools": { "filse": true } })).is_empty());
    assert!(refused_at(json!({ "tools": { "shell": false } })).is_empty());
}

#[test]
fn case_009_010_011_bounds_and_urls_are_checked() {
    assert!(refused_at(json!({ "computerConfigDir": "/srv/cofold-home" })).is_empty());
    assert!(refused_at(json!({ "computerConfigDir": false })).is_empty());
    assert_eq!(
        refused_at(json!({ "computerConfigDir": true })),
        ["computerConfigDir"]
    );
    assert_eq!(
        refused_at(json!({ "computerConfigDir": "relative/dir" })),
        ["computerConfigDir"]
    );
    assert_eq!(
        refused_at(json!({ "autoCompactTokens": 0 })),
        ["autoCompactTokens"]
    );
    assert!(refused_at(json!({ "autoCompactTokens": 4000 })).is_empty());
    assert_eq!(refused_at(json!({ "autoCompactAt": 0 })), ["autoCompactAt"]);
    assert_eq!(
        refused_at(json!({ "autoCompactAt": 1.5 })),
        ["autoCompactAt"]
    );
    assert_eq!(
        refused_at(json!({ "catalogueTimeoutMs": 0 })),
        ["catalogueTimeoutMs"]
    );
    assert_eq!(refused_at(json!({ "baseUrl": "ftp://x" })), ["baseUrl"]);
    assert_eq!(refused_at(json!({ "baseUrl": "not a url" })), ["baseUrl"]);
    for key in ["adapter", "policy", "provider"] {
        let mut options = serde_json::Map::new();
        options.insert(key.to_owned(), json!("x"));
        assert_eq!(refused_at(Value::Object(options)), [key]);
    }
}

#[test]
fn case_106_session_values_are_checked_with_one_sentence() {
    let place = Place::new();
    let a = cofold_agent(&json!({ "memory": true })).unwrap();
    let _ = &place;
    let check = |v: Value| {
        let values: JsonObject = serde_json::from_value(v).unwrap();
        a.validate_config(&values).err().map(|r| r.0)
    };
    assert_eq!(
        check(json!({ "permissionMode": "sometimes" })).as_deref(),
        Some(
            "cofold: permissionMode takes one of default, acceptEdits, plan, auto, bypassPermissions, dontAsk"
        )
    );
    assert_eq!(
        check(json!({ "colour": "x" })).as_deref(),
        Some("cofold: colour is not a config key this agent takes")
    );
    assert_eq!(
        check(json!({ "baseUrl": "x" })).as_deref(),
        Some("cofold: baseUrl takes an http or https URL")
    );
    assert_eq!(
        check(json!({ "effortLevel": "extreme" })).as_deref(),
        Some("cofold: effortLevel takes one of off, low, medium, high")
    );
    assert_eq!(
        check(json!({ "permissionMode": "plan", "model": "m" })),
        None
    );
}

struct Engines(Vec<Arc<dyn Engine>>);

impl Registrar for Engines {
    fn engine(&mut self, engine: Arc<dyn Engine>) {
        self.0.push(engine);
    }
    fn agent(&mut self, _agent: Arc<dyn Agent>) {}
}

struct Vault;

impl SecretReader for Vault {
    fn read(&self, name: &str) -> Result<Secret, ahpd_sdk::plugin::SecretError> {
        match name {
            "host:deepseek" => Ok(Secret::new("sk-vault")),
            other => Err(ahpd_sdk::plugin::SecretError {
                name: other.to_owned(),
                reason: format!("the vault holds no {other}"),
            }),
        }
    }
}

async fn engine() -> Arc<dyn Engine> {
    let mut r = Engines(Vec::new());
    plugin().apply(json!({}), &mut r).await.expect("applies");
    assert_eq!(r.0.len(), 1, "one engine");
    r.0.remove(0)
}

#[tokio::test]
async fn case_014_016_the_engine_serves_records() {
    let e = engine().await;
    assert_eq!(e.name(), "cofold");
    assert_eq!(
        e.host_only_fields(),
        ["computerConfigDir", "store", "memory", "mcpServers"]
    );
    assert!(e.template().is_empty());
    let schema = e.record_schema();
    let props = schema["properties"].as_object().unwrap();
    let secret: Vec<&String> = props
        .iter()
        .filter(|(_, v)| v["writeOnly"] == true)
        .map(|(k, _)| k)
        .collect();
    assert_eq!(secret, ["apiKey"]);
    assert!(!props.contains_key("model"));
    assert!(!props.contains_key("strictTools"));
    assert!(
        !refusals(
            &schema,
            json!({ "tools": { "web": { "search": { "brave": { "apiKey": "k" } } } } })
        )
        .is_empty()
    );
    assert!(
        refusals(
            &schema,
            json!({ "tools": { "web": { "search": { "duckduckgo": true } } } })
        )
        .is_empty()
    );
    let host_only: JsonObject = serde_json::from_value(json!({ "store": "/x" })).unwrap();
    assert!(
        e.check_record("team:a", &host_only)
            .is_err_and(|m| m.to_string().contains("config.store"))
    );
    assert!(e.check_record("host", &host_only).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_013_015_017_a_record_runs_on_its_own_endpoint_and_key() {
    let place = Place::new();
    let ep = endpoint(vec![text("from the record")]);
    let mut r = Engines(Vec::new());
    plugin_with(&place)
        .apply(json!({}), &mut r)
        .await
        .expect("applies");
    let e = r.0.remove(0);
    let record = AgentRecord {
        id: "cofold-deepseek".into(),
        engine: "cofold".into(),
        owner: "host".into(),
        name: "Cofold on DeepSeek".into(),
        description: None,
        icon: None,
        model: Some("deepseek-chat".into()),
        config: serde_json::from_value(json!({
            "baseUrl": ep.base_url(), "apiKey": { "$secret": "host:deepseek" }, "memory": true,
            "instructions": "B"
        }))
        .unwrap(),
    };
    let plugin_options = json!({ "instructions": "A" });
    let agent = e
        .agent(&record, &plugin_options, Arc::new(Vault))
        .expect("an agent");
    let d = agent.descriptor();
    assert_eq!(d.provider, "cofold-deepseek");
    assert_eq!(d.display_name, "Cofold on DeepSeek");
    let th = host(vec![agent]).await;
    let mut w = Watch::create(
        &th,
        "cofold-deepseek",
        &fresh_id("rec"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "hi").await;
    w.end("t1").await;
    let requests = ep.chat_requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].json["model"], "deepseek-chat");
    assert_eq!(requests[0].header("authorization"), Some("Bearer sk-vault"));
    let system = requests[0].json["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(system.starts_with("B\n"), "{system}");
    w.assert_mirror(&th).await;

    // A record naming a secret the vault lacks is refused with the vault's sentence.
    let mut missing = record.clone();
    missing
        .config
        .insert("apiKey".into(), json!({ "$secret": "host:missing" }));
    let err = e
        .agent(&missing, &plugin_options, Arc::new(Vault))
        .err()
        .unwrap();
    assert_eq!(err.to_string(), "the vault holds no host:missing");
}

fn plugin_with(place: &Place) -> impl Plugin {
    ahpd_agent_cofold::CofoldPlugin::with_embedder(place.embedder())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_012_017_the_plugin_options_reach_the_default_record() {
    let place = Place::new();
    let ep = endpoint(vec![text("answered by the plugin")]);
    let mut r = Engines(Vec::new());
    let options =
        json!({ "baseUrl": ep.base_url(), "model": "m", "memory": true, "instructions": "A" });
    plugin_with(&place)
        .apply(options.clone(), &mut r)
        .await
        .expect("applies");
    let e = r.0.remove(0);
    let record = AgentRecord {
        id: "cofold".into(),
        engine: "cofold".into(),
        owner: "host".into(),
        name: "Cofold".into(),
        description: None,
        icon: None,
        model: None,
        config: JsonObject::new(),
    };
    let agent = e
        .agent(&record, &options, Arc::new(Vault))
        .expect("an agent");
    let th = host(vec![agent]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("plug"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "hi").await;
    w.end("t1").await;
    w.assert_mirror(&th).await;
    let turn = w.chat_state().turns.last().unwrap().clone();
    let text: String = turn
        .response_parts
        .iter()
        .filter_map(|p| match p {
            ahp_types::state::ResponsePart::Markdown(m) => Some(m.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "answered by the plugin");
    let system = ep.chat_bodies()[0]["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(system.starts_with("A\n"), "{system}");
}
