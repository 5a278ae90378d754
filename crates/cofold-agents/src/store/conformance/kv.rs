//! Conformance checks for the key-value scopes (runtime cases 204-206, docs/acceptance.md).

use serde_json::json;

use crate::store::{KvEntry, KvScope};

use super::{StoreFixture, ok};

fn agent(id: &str) -> KvScope {
    KvScope::Agent {
        agent_id: id.to_owned(),
    }
}

fn keys(entries: &[KvEntry]) -> Vec<&str> {
    entries.iter().map(|entry| entry.key.as_str()).collect()
}

/// 204: scopes are isolated, shared per scope key across handles; listing and deleting.
pub async fn kv_scopes(fixture: &StoreFixture) {
    let store = fixture.store();
    let shared = KvScope::Shared {
        namespace: "team".into(),
    };
    let workspace = KvScope::Workspace {
        workspace: "/home/u/proj".into(),
    };
    ok(store.kv_set(&agent("a1"), "k", json!(1)).await, "set agent");
    ok(store.kv_set(&shared, "k", json!(2)).await, "set shared");
    ok(
        store.kv_set(&workspace, "k", json!(3)).await,
        "set workspace",
    );
    assert_eq!(
        ok(store.kv_get(&agent("a1"), "k").await, "get"),
        Some(json!(1))
    );
    assert_eq!(ok(store.kv_get(&shared, "k").await, "get"), Some(json!(2)));
    assert_eq!(
        ok(store.kv_get(&workspace, "k").await, "get"),
        Some(json!(3))
    );
    assert_eq!(
        ok(store.kv_get(&agent("a2"), "k").await, "get other agent"),
        None
    );
    assert_eq!(
        ok(store.kv_get(&agent("a1"), "missing").await, "get missing"),
        None
    );
    let again = fixture.reopen();
    assert_eq!(
        ok(
            again.kv_get(&agent("a1"), "k").await,
            "get from another handle"
        ),
        Some(json!(1))
    );
    ok(
        again.kv_set(&agent("a1"), "j", json!("x")).await,
        "set from another handle",
    );
    ok(
        store
            .kv_set(&agent("a1"), "approvals/s1/shell", json!(true))
            .await,
        "set",
    );
    let all = ok(store.kv_list(&agent("a1"), None).await, "list");
    assert_eq!(keys(&all), ["approvals/s1/shell", "j", "k"]);
    let some = ok(
        store.kv_list(&agent("a1"), Some("approvals/")).await,
        "list with prefix",
    );
    assert_eq!(
        some,
        vec![KvEntry {
            key: "approvals/s1/shell".into(),
            value: json!(true)
        }]
    );
    assert!(ok(store.kv_list(&agent("a9"), None).await, "list empty scope").is_empty());
    ok(store.kv_delete(&agent("a1"), "k").await, "delete");
    assert_eq!(
        ok(store.kv_get(&agent("a1"), "k").await, "get deleted"),
        None
    );
    ok(
        store.kv_delete(&agent("a1"), "never-set").await,
        "delete a never-set key",
    );
    assert_eq!(
        ok(store.kv_get(&shared, "k").await, "other scope untouched"),
        Some(json!(2))
    );
}

/// 205: keys with slashes and spaces.
pub async fn kv_odd_keys(fixture: &StoreFixture) {
    let store = fixture.store();
    let scope = KvScope::Shared {
        namespace: "n s/x".into(),
    };
    for key in ["team/x", "a b/c:d", "team/y z", "plain"] {
        ok(store.kv_set(&scope, key, json!(key)).await, "set");
    }
    assert_eq!(
        ok(store.kv_get(&scope, "a b/c:d").await, "get"),
        Some(json!("a b/c:d"))
    );
    let listed = ok(
        store.kv_list(&scope, Some("team/")).await,
        "list with prefix",
    );
    assert_eq!(keys(&listed), ["team/x", "team/y z"]);
    let all = ok(store.kv_list(&scope, None).await, "list");
    assert_eq!(keys(&all), ["a b/c:d", "plain", "team/x", "team/y z"]);
}

/// 206: values are copied on write and on read.
pub async fn kv_values_are_copies(fixture: &StoreFixture) {
    let store = fixture.store();
    let scope = agent("a1");
    let mut value = json!({ "list": [1, 2] });
    ok(store.kv_set(&scope, "k", value.clone()).await, "set");
    value["list"] = json!([9]);
    let mut read = ok(store.kv_get(&scope, "k").await, "get").expect("value exists");
    assert_eq!(read, json!({ "list": [1, 2] }));
    read["list"] = json!([]);
    assert_eq!(
        ok(store.kv_get(&scope, "k").await, "get").expect("value exists"),
        json!({ "list": [1, 2] })
    );
}
