//! The store conformance suite against the in-memory store, and what is particular to it.

use cofold_agents::store::conformance::StoreFixture;
use cofold_agents::store::{MemoryStore, RunRef, Store};

fn fixture() -> StoreFixture {
    StoreFixture::new(MemoryStore::new())
}

cofold_agents::store_conformance_tests!(fixture);

#[tokio::test]
async fn a_fork_may_reuse_a_run_id_in_another_session() {
    let store = MemoryStore::new();
    cofold_agents::store::conformance::seed_session(&store, "s1").await;
    store.fork("s1", "m4", "s2").await.expect("fork");
    let mut update = cofold_agents::store::RunUpdate::new(RunRef::new("s2", "r1"));
    update.steps = Some(42);
    store.update_run(update).await.expect("update the copy");
    let source = store
        .get_run(&RunRef::new("s1", "r1"))
        .await
        .expect("get")
        .expect("source run");
    assert_eq!(source.steps, 1, "the source's run is a separate record");
}
