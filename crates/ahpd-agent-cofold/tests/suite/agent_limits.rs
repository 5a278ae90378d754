//! An agent's `modelTimeouts` option puts its own limits over its provider's for its requests.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use serde_json::{Value, json};
use testkit::{Gate, Reply};

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_first_byte_limit_ends_a_turn_its_provider_would_wait_on() {
    let place = Place::new();
    let gate = Gate::new();
    let ep = endpoint(vec![Reply::Held(gate.clone(), Box::new(text("late")))]);
    // The provider itself sets no first-byte limit at all, so only the agent's option can end
    // the wait; one attempt keeps the turn from retrying.
    place.copapo(json!({ "providers": [
        { "id": "slow", "baseUrl": ep.base_url(), "firstByteTimeoutMs": 0, "maxAttempts": 1 }
    ] }));
    let agent = agent(
        json!({ "memory": true, "model": "slow/m", "modelTimeouts": { "firstByteMs": 200 } }),
        place.embedder(),
    );
    let th = host(vec![Arc::new(agent)]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("limits"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "hi").await;
    // The watch bounds its wait for each event, so a limit that never fires fails the test.
    let end = w.end("t1").await;
    gate.open();
    match end {
        StateAction::ChatError(e) => assert!(
            e.part.error.message.contains("first-byte limit"),
            "{}",
            e.part.error.message
        ),
        other => panic!("the turn should fail on the limit: {other:?}"),
    }
}

#[test]
fn bad_limits_are_refused_at_their_own_key() {
    let schema = ahpd_agent_cofold::options_schema();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let path = |options: Value| {
        validator
            .iter_errors(&options)
            .map(|e| e.instance_path().to_string())
            .collect::<Vec<_>>()
    };
    assert!(path(json!({ "modelTimeouts": { "connectMs": 0, "idleMs": 5000 } })).is_empty());
    assert_eq!(
        path(json!({ "modelTimeouts": { "firstByteMs": -1 } })),
        ["/modelTimeouts/firstByteMs"]
    );
    assert_eq!(
        path(json!({ "modelTimeouts": { "idleMs": "90s" } })),
        ["/modelTimeouts/idleMs"]
    );
    assert_eq!(
        path(json!({ "modelTimeouts": { "firstByte": 1 } })),
        ["/modelTimeouts"]
    );
    // A record may set its agent's limits too.
    let record = ahpd_agent_cofold::record_schema();
    let record = jsonschema::validator_for(&record).expect("the record schema compiles");
    assert!(record.is_valid(&json!({ "modelTimeouts": { "firstByteMs": 1000 } })));
    assert!(!record.is_valid(&json!({ "modelTimeouts": { "firstByteMs": 1.5 } })));
}
