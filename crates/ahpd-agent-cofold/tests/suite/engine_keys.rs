//! Keys: a record's key read for every request, and `Debug` output that names keys without
//! printing them.

use std::sync::Arc;

use ahpd_agent_cofold::Copapo;
use ahpd_agent_cofold::Environment;
use ahpd_sdk::Agent;
use serde_json::json;

use super::support::*;

#[test]
fn debug_output_names_keys_without_printing_them() {
    let place = Place::new();
    let env: Environment = place.env_with(&[("OPENAI_API_KEY", "sk-secret-env")]);
    place.copapo(json!({
        "model": "p/m",
        "providers": [{ "id": "p", "baseUrl": "http://127.0.0.1:9/v1", "apiKey": "sk-secret-file" }]
    }));
    let copapo: Copapo = ahpd_agent_cofold::read_copapo(&env, None);
    assert_eq!(copapo.providers.len(), 1, "{:?}", copapo.error);
    let printed = format!("{env:?} {copapo:?}");
    assert!(printed.contains("OPENAI_API_KEY"), "{printed}");
    assert!(!printed.contains("sk-secret"), "{printed}");
}

struct Engines(Vec<Arc<dyn ahpd_sdk::plugin::Engine>>);

impl ahpd_sdk::plugin::Registrar for Engines {
    fn engine(&mut self, engine: Arc<dyn ahpd_sdk::plugin::Engine>) {
        self.0.push(engine);
    }
    fn agent(&mut self, _agent: Arc<dyn Agent>) {}
}

/// A vault whose one secret the test changes.
struct Changing(std::sync::Mutex<String>);

impl ahpd_sdk::plugin::SecretReader for Changing {
    fn read(&self, name: &str) -> Result<ahpd_sdk::agent::Secret, ahpd_sdk::plugin::SecretError> {
        match name {
            "host:key" => Ok(ahpd_sdk::agent::Secret::new(self.0.lock().unwrap().clone())),
            other => Err(ahpd_sdk::plugin::SecretError {
                name: other.to_owned(),
                reason: format!("the vault holds no {other}"),
            }),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_records_key_is_read_for_each_turn() {
    use ahpd_sdk::plugin::Plugin;
    let place = Place::new();
    let ep = endpoint(vec![text("one"), text("two")]);
    let mut r = Engines(Vec::new());
    ahpd_agent_cofold::CofoldPlugin::with_embedder(place.embedder())
        .apply(json!({}), &mut r)
        .await
        .expect("applies");
    let engine = r.0.remove(0);
    let record = ahpd_sdk::plugin::AgentRecord {
        id: "cofold-keyed".into(),
        engine: "cofold".into(),
        owner: "host".into(),
        name: "Keyed".into(),
        description: None,
        icon: None,
        model: Some("m".into()),
        config: serde_json::from_value(json!({
            "baseUrl": ep.base_url(), "apiKey": { "$secret": "host:key" }, "memory": true
        }))
        .unwrap(),
    };
    let vault = Arc::new(Changing(std::sync::Mutex::new("sk-first".into())));
    let agent = engine
        .agent(&record, &json!({}), vault.clone())
        .expect("an agent");
    let th = host(vec![agent]).await;
    let mut w = Watch::create(
        &th,
        "cofold-keyed",
        &fresh_id("key"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "hi").await;
    w.end("t1").await;
    *vault.0.lock().unwrap() = "sk-second".into();
    w.send("t2", "again").await;
    w.end("t2").await;
    let requests = ep.chat_requests();
    assert_eq!(requests[0].header("authorization"), Some("Bearer sk-first"));
    assert_eq!(
        requests[1].header("authorization"),
        Some("Bearer sk-second")
    );
}
