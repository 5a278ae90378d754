//! A message id already in the session. Refusing it is the run's job (the run
//! reads the transcript before it writes anything); `append_messages` in the `Store` contract
//! does not check ids, so the file store and the memory store must treat a repeat the same way.

use std::sync::Arc;

use cofold_agents::agent::Agent;
use cofold_agents::error::ErrorCode;
use cofold_agents::event::{EventBody, OutcomeKind, RunStatus};
use cofold_agents::run::{RunOptions, run};
use cofold_agents::store::{MemoryStore, RunRef, Store};
use cofold_agents::testing::{FakeModel, FakeStep};
use cofold_store_file::{FileStore, FileStoreOptions};
use futures::StreamExt;

use super::support::{self, Disk, message, snapshot};

/// What a store did with the same id appended twice by the holder: each call's error code (if
/// any), then the stored ids and the run's `lastMessageId`.
type Observed = (Vec<Option<ErrorCode>>, Vec<String>, Option<String>);

async fn append_twice(store: &dyn Store) -> Observed {
    support::session(store, "s", None).await;
    support::run(store, "s", "r", RunStatus::Running).await;
    assert!(store.claim_writer("s", "r").await.expect("claim"));
    let mut codes = Vec::new();
    for batch in [vec![message("m1")], vec![message("m2"), message("m1")]] {
        let result = store.append_messages("s", "r", &batch).await;
        codes.push(result.err().map(|error| error.code));
    }
    let ids = store
        .list_messages("s", None)
        .await
        .expect("list")
        .into_iter()
        .map(|m| m.id)
        .collect();
    let last = store
        .get_run(&RunRef::new("s", "r"))
        .await
        .expect("get")
        .expect("the run")
        .last_message_id;
    (codes, ids, last)
}

#[tokio::test]
async fn both_stores_treat_a_repeated_id_in_append_messages_alike() {
    let memory = append_twice(&MemoryStore::new()).await;
    let disk = Disk::new();
    let file = append_twice(&disk.store).await;
    assert_eq!(file, memory, "the file store and the memory store agree");
    // The contract leaves ids to the run: both appends land, in order.
    assert_eq!(
        memory,
        (
            vec![None, None],
            vec!["m1".into(), "m2".into(), "m1".into()],
            Some("m1".into())
        )
    );
    let reread: Vec<String> = disk
        .reopen()
        .list_messages("s", None)
        .await
        .expect("list")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(
        reread,
        ["m1", "m2", "m1"],
        "a fresh instance reads the same"
    );
}

#[tokio::test]
async fn a_run_reusing_a_message_id_fails_and_writes_nothing_to_disk() {
    let root = tempfile::tempdir().expect("a temporary folder");
    let store = Arc::new(FileStore::open(root.path(), FileStoreOptions::default()).expect("open"));
    let model = FakeModel::new(vec![FakeStep::text("a"), FakeStep::text("b")]);
    let agent = Agent::builder("a", "be brief", model.adapter())
        .store(store.clone())
        .build()
        .expect("agent");
    let mut options = RunOptions::new("s", "x");
    options.message_id = Some("m-1".into());

    let first = run(&agent, options.clone());
    assert_eq!(first.outcome().await.status(), RunStatus::Completed);
    let before = snapshot(root.path());

    let again = run(&agent, options);
    let events: Vec<_> = again.events().collect().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(matches!(events[0].body, EventBody::RunFinished { .. }));
    let outcome = again.outcome().await;
    assert!(
        matches!(&outcome.kind, OutcomeKind::Failed { error } if error.code == ErrorCode::AlreadyExists),
        "{outcome:?}"
    );
    assert_eq!(outcome.steps, 0);
    assert_eq!(
        snapshot(root.path()),
        before,
        "no run folder, no message, no lock, no timestamp changed"
    );
    assert!(
        store
            .get_run(&RunRef::new("s", again.run_id()))
            .await
            .expect("get")
            .is_none()
    );
    assert_eq!(model.requests().len(), 1, "the refused run asked no model");
}
