//! Delete and rewind stopped between their steps, as a crash would stop them: a fresh instance
//! over the same folder sees the old session or the new one, never a mix.

#![allow(clippy::unwrap_used)]

use std::fs;
use std::path::Path;

use cofold_agents::id::Timestamp;
use cofold_agents::message::Message;
use cofold_agents::store::{NewSession, RunRecord, RunStatus};
use cofold_agents::usage::ZERO_USAGE;

use super::{FileStore, FileStoreOptions, Inner};
use crate::crash::stop_at;

fn open(root: &Path) -> FileStore {
    FileStore::open(root, FileStoreOptions::default()).unwrap()
}

fn new_session(inner: &Inner, id: &str) {
    inner
        .create_session(NewSession {
            session_id: id.into(),
            agent_id: "a".into(),
            workspace: None,
        })
        .unwrap();
}

fn run_record(session_id: &str, run_id: &str, input: &str) -> RunRecord {
    let now = Timestamp::now();
    RunRecord {
        run_id: run_id.into(),
        session_id: session_id.into(),
        agent_id: "a".into(),
        model: None,
        status: RunStatus::Running,
        created_at: now.clone(),
        updated_at: now,
        pending_request_id: None,
        usage: ZERO_USAGE,
        cost: None,
        steps: 0,
        denials: Vec::new(),
        input_message_id: Some(input.into()),
        last_message_id: None,
    }
}

/// A run that stores `ids` and ends with `status`, holding the claim while it writes.
fn stored_run(inner: &Inner, session_id: &str, run_id: &str, ids: &[&str], status: RunStatus) {
    inner
        .create_run(run_record(session_id, run_id, ids[0]))
        .unwrap();
    assert!(inner.claim_writer(session_id, run_id).unwrap());
    let messages: Vec<Message> = ids
        .iter()
        .map(|id| Message::user_text(format!("text of {id}")).with_id(*id))
        .collect();
    inner
        .append_messages(session_id, run_id, &messages)
        .unwrap();
    let mut update =
        cofold_agents::store::RunUpdate::new(cofold_agents::store::RunRef::new(session_id, run_id));
    update.status = Some(status);
    inner.update_run(&update).unwrap();
    if status.is_terminal() {
        inner.release_writer(session_id, run_id).unwrap();
    }
}

fn message_ids(inner: &Inner, session_id: &str) -> Vec<String> {
    inner
        .list_messages(session_id, None)
        .unwrap()
        .into_iter()
        .map(|m| m.id)
        .collect()
}

fn run_ids(inner: &Inner, session_id: &str) -> Vec<String> {
    let mut ids: Vec<String> = inner
        .list_runs(session_id, None)
        .unwrap()
        .into_iter()
        .map(|r| r.run_id)
        .collect();
    ids.sort();
    ids
}

fn names_in(folder: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(folder)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn a_delete_stopped_after_its_rename_is_a_delete_and_the_id_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    new_session(&store.inner, "s1");
    stored_run(
        &store.inner,
        "s1",
        "r1",
        &["m1", "m2"],
        RunStatus::Completed,
    );

    stop_at(Some("remove:renamed"));
    let stopped = store.inner.delete_session("s1");
    stop_at(None);
    assert!(stopped.is_err(), "the delete stopped half-way");
    let sessions = dir.path().join("sessions");
    assert!(
        names_in(&sessions)
            .iter()
            .any(|n| n.starts_with(crate::durable::TOMBSTONE_PREFIX)),
        "the crash left a tombstone: {:?}",
        names_in(&sessions)
    );

    let after = open(dir.path());
    assert_eq!(after.inner.get_session("s1").unwrap(), None);
    assert_eq!(
        names_in(&sessions),
        Vec::<String>::new(),
        "the next open swept the tombstone"
    );
    new_session(&after.inner, "s1");
    assert_eq!(message_ids(&after.inner, "s1"), Vec::<String>::new());
    assert_eq!(run_ids(&after.inner, "s1"), Vec::<String>::new());
}

#[test]
fn a_folder_left_without_its_record_is_not_inherited_by_a_new_session() {
    // What an older version left when a crash cut its delete short after removing the record.
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    new_session(&store.inner, "s1");
    stored_run(&store.inner, "s1", "r1", &["m1"], RunStatus::Completed);
    let folder = store.inner.session_folder("s1").unwrap();
    fs::remove_file(folder.join(super::SESSION_FILE)).unwrap();

    let after = open(dir.path());
    assert_eq!(after.inner.get_session("s1").unwrap(), None);
    new_session(&after.inner, "s1");
    assert_eq!(message_ids(&after.inner, "s1"), Vec::<String>::new());
    assert_eq!(run_ids(&after.inner, "s1"), Vec::<String>::new());
    assert!(!folder.join("writer.lock").exists());
}

/// A session of two finished runs and a third one paused holding the claim; the rewind through
/// `m2` keeps `r1` and drops `r2` and `r3`.
fn rewind_setup(root: &Path) -> FileStore {
    let store = open(root);
    new_session(&store.inner, "s1");
    stored_run(
        &store.inner,
        "s1",
        "r1",
        &["m1", "m2"],
        RunStatus::Completed,
    );
    stored_run(
        &store.inner,
        "s1",
        "r2",
        &["m3", "m4"],
        RunStatus::Completed,
    );
    stored_run(&store.inner, "s1", "r3", &["m5"], RunStatus::Awaiting);
    store
}

#[test]
fn a_rewind_stopped_at_any_step_leaves_the_old_session_or_the_new_one() {
    let old = (
        vec!["m1", "m2", "m3", "m4", "m5"],
        vec!["r1", "r2", "r3"],
        true,
    );
    let new = (vec!["m1", "m2"], vec!["r1"], false);
    for (point, expected) in [
        ("rewind:prepared", &old),
        ("rewind:intended", &new),
        ("rewind:transcript", &new),
        ("rewind:run", &new),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = rewind_setup(dir.path());
        stop_at(Some(point));
        let stopped = store.inner.truncate("s1", "m2");
        stop_at(None);
        assert!(stopped.is_err(), "{point}: the rewind stopped");
        drop(store);

        let after = open(dir.path());
        assert_eq!(message_ids(&after.inner, "s1"), expected.0, "{point}");
        assert_eq!(run_ids(&after.inner, "s1"), expected.1, "{point}");
        let folder = after.inner.session_folder("s1").unwrap();
        assert_eq!(
            folder.join("writer.lock").exists(),
            expected.2,
            "{point}: the paused r3's claim goes with it"
        );
        let left: Vec<String> = names_in(&folder)
            .into_iter()
            .filter(|n| n.starts_with("rewind") || n.starts_with('%'))
            .collect();
        if expected.2 {
            assert!(
                !left.contains(&"rewind.json".to_owned()),
                "{point}: {left:?}"
            );
        } else {
            assert_eq!(
                left,
                Vec::<String>::new(),
                "{point}: nothing of the rewind is left"
            );
            assert_eq!(names_in(&folder.join("runs")), ["r1"], "{point}");
        }
        // The session goes on either way.
        if expected.2 {
            after.inner.release_writer("s1", "r3").unwrap();
        }
        stored_run(&after.inner, "s1", "r9", &["m9"], RunStatus::Completed);
        let ids = message_ids(&after.inner, "s1");
        assert_eq!(ids.last().map(String::as_str), Some("m9"), "{point}");
    }
}

#[test]
fn a_rewind_that_runs_through_lands_the_new_session() {
    let dir = tempfile::tempdir().unwrap();
    let store = rewind_setup(dir.path());
    let result = store.inner.truncate("s1", "m2").unwrap();
    assert_eq!(result.remaining_messages, 2);
    assert_eq!(result.removed_messages, 3);
    assert_eq!(result.removed_runs, 2);
    assert_eq!(message_ids(&store.inner, "s1"), ["m1", "m2"]);
}
