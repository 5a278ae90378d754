//! Where things land on disk (runtime cases 208, 209, 216, 217, 220, 222, 223, docs/acceptance.md).

use std::fs;
use std::os::unix::fs::MetadataExt;

use cofold_agents::error::ErrorCode;
use cofold_agents::store::{KvScope, RunRef, RunStatus, RunUpdate, SessionQuery, Store};
use cofold_store_file::{memory_dir, workspace_slug};
use serde_json::{Value, json};

use super::support::{Disk, event, message, run, run_record, session};

#[tokio::test]
async fn a_fresh_instance_finds_a_workspace_session_and_ids_are_unique_across_layouts() {
    let disk = Disk::new();
    session(&disk.store, "s1", Some("/home/u/proj")).await;
    let folder = disk.session_dir("s1").await;
    assert_eq!(
        folder,
        disk.dir.path().join("workspaces/-home-u-proj/sessions/s1")
    );
    let text = fs::read_to_string(folder.join("session.json")).expect("session.json");
    assert!(
        text.starts_with("{\n  \"sessionId\": \"s1\""),
        "pretty JSON with 2 spaces: {text}"
    );
    let fresh = disk.reopen();
    let found = fresh
        .get_session("s1")
        .await
        .expect("get")
        .expect("found by a fresh instance");
    assert_eq!(found.workspace.as_deref(), Some("/home/u/proj"));
    let plain = cofold_agents::store::NewSession {
        session_id: "s1".into(),
        agent_id: "a".into(),
        workspace: None,
    };
    let err = fresh
        .create_session(plain)
        .await
        .expect_err("taken in the other layout");
    assert_eq!(err.code, ErrorCode::AlreadyExists);
    session(&fresh, "s2", None).await;
    let other = cofold_agents::store::NewSession {
        session_id: "s2".into(),
        agent_id: "a".into(),
        workspace: Some("/w".into()),
    };
    assert_eq!(
        disk.store
            .create_session(other)
            .await
            .expect_err("taken")
            .code,
        ErrorCode::AlreadyExists
    );
    assert!(disk.dir.path().join("sessions/s2/session.json").is_file());
}

#[tokio::test]
async fn the_model_is_kept_in_run_json() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    let mut record = run_record("s1", "r1", RunStatus::Running);
    record.model = Some("or/qwen/qwen3-8b".into());
    disk.store.create_run(record).await.expect("create_run");
    let path = disk.dir.path().join("sessions/s1/runs/r1/run.json");
    let json: Value = serde_json::from_slice(&fs::read(path).expect("run.json")).expect("JSON");
    assert_eq!(json["model"], "or/qwen/qwen3-8b");
    let read = disk
        .reopen()
        .get_run(&RunRef::new("s1", "r1"))
        .await
        .expect("get")
        .expect("run");
    assert_eq!(read.model.as_deref(), Some("or/qwen/qwen3-8b"));
}

#[tokio::test]
async fn names_are_percent_encoded_single_segments() {
    let disk = Disk::new();
    let scope = KvScope::Shared {
        namespace: "team".into(),
    };
    disk.store
        .kv_set(&scope, "team/x", json!(1))
        .await
        .expect("set");
    disk.store
        .kv_set(&scope, "a b/c:d", json!(2))
        .await
        .expect("set");
    let folder = disk.dir.path().join("kv/shared/team");
    assert!(folder.join("team%2Fx.json").is_file());
    assert!(folder.join("a%20b%2Fc%3Ad.json").is_file());
    let keys: Vec<String> = disk
        .store
        .kv_list(&scope, None)
        .await
        .expect("list")
        .into_iter()
        .map(|e| e.key)
        .collect();
    assert_eq!(keys, ["a b/c:d", "team/x"]);
    let long = "s".repeat(201);
    let err = disk
        .store
        .get_session(&long)
        .await
        .expect_err("201 characters");
    assert_eq!(err.code, ErrorCode::InvalidOptions);
    let err = disk
        .store
        .kv_set(&scope, &"k".repeat(300), json!(0))
        .await
        .expect_err("300 characters");
    assert_eq!(err.code, ErrorCode::InvalidOptions);
    assert_eq!(
        disk.store.get_session("").await.expect_err("empty").code,
        ErrorCode::InvalidOptions
    );
    session(&disk.store, ".", None).await;
    session(&disk.store, "..", None).await;
    assert!(disk.dir.path().join("sessions/%2E/session.json").is_file());
    assert!(
        disk.dir
            .path()
            .join("sessions/%2E%2E/session.json")
            .is_file()
    );
    run(&disk.store, ".", "..", RunStatus::Completed).await;
    assert!(
        disk.dir
            .path()
            .join("sessions/%2E/runs/%2E%2E/run.json")
            .is_file()
    );
    let ids: Vec<String> = disk
        .store
        .list_sessions(SessionQuery::default())
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(ids.len(), 2);
}

async fn seeded(disk: &Disk) {
    let store = &disk.store;
    session(store, "s1", Some("/home/u/proj")).await;
    let mut r1 = run_record("s1", "r1", RunStatus::Completed);
    r1.input_message_id = Some("m1".into());
    store.create_run(r1).await.expect("r1");
    assert!(store.claim_writer("s1", "r1").await.expect("claim"));
    store
        .append_messages("s1", "r1", &[message("m1"), message("m2")])
        .await
        .expect("append");
    store.release_writer("s1", "r1").await.expect("release");
    let mut r2 = run_record("s1", "r2", RunStatus::Awaiting);
    r2.input_message_id = Some("m3".into());
    store.create_run(r2).await.expect("r2");
    assert!(store.claim_writer("s1", "r2").await.expect("claim"));
    store
        .append_messages("s1", "r2", &[message("m3")])
        .await
        .expect("append");
}

#[tokio::test]
async fn truncate_rewrites_the_transcript_and_removes_what_it_drops() {
    let disk = Disk::new();
    seeded(&disk).await;
    let folder = disk.session_dir("s1").await;
    let inode_before = fs::metadata(folder.join("messages.jsonl"))
        .expect("stat")
        .ino();
    assert!(folder.join("writer.lock").is_file());
    let result = disk.store.truncate("s1", "m2").await.expect("truncate");
    assert_eq!(
        (
            result.remaining_messages,
            result.removed_messages,
            result.removed_runs
        ),
        (2, 1, 1)
    );
    let inode_after = fs::metadata(folder.join("messages.jsonl"))
        .expect("stat")
        .ino();
    assert_ne!(
        inode_before, inode_after,
        "a new file was renamed over the transcript"
    );
    assert_eq!(
        fs::read_to_string(folder.join("messages.jsonl"))
            .expect("read")
            .lines()
            .count(),
        2
    );
    assert!(
        !folder.join("runs/r2").exists(),
        "the dropped run's folder is gone"
    );
    assert!(folder.join("runs/r1/run.json").is_file());
    assert!(
        !folder.join("writer.lock").exists(),
        "the paused holder's lock is removed"
    );
    let forked = disk.store.fork("s1", "m1", "s9").await.expect("fork");
    assert_eq!(forked.workspace.as_deref(), Some("/home/u/proj"));
    let copy = disk.dir.path().join("workspaces/-home-u-proj/sessions/s9");
    assert!(copy.join("session.json").is_file());
    assert_eq!(
        fs::read_to_string(copy.join("messages.jsonl"))
            .expect("read")
            .lines()
            .count(),
        1
    );
    let leftovers: Vec<_> = fs::read_dir(copy.parent().expect("parent"))
        .expect("list")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .into_string()
                .expect("utf-8")
        })
        .collect();
    assert_eq!(
        leftovers.len(),
        2,
        "no staging folder is left: {leftovers:?}"
    );
}

#[tokio::test]
async fn listing_a_workspace_keeps_only_its_exact_spelling() {
    let disk = Disk::new();
    assert_eq!(workspace_slug("/a/b"), workspace_slug("/a-b"));
    session(&disk.store, "ab1", Some("/a/b")).await;
    session(&disk.store, "ab2", Some("/a/b")).await;
    session(&disk.store, "dash", Some("/a-b")).await;
    let query = SessionQuery {
        workspace: Some("/a/b".into()),
        ..SessionQuery::default()
    };
    let mut ids: Vec<String> = disk
        .store
        .list_sessions(query)
        .await
        .expect("list")
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    ids.sort();
    assert_eq!(ids, ["ab1", "ab2"]);
    let all = disk
        .reopen()
        .list_sessions(SessionQuery::default())
        .await
        .expect("list all");
    assert_eq!(all.len(), 3);
}

#[test]
fn the_memory_folder_follows_the_slug() {
    let root = std::path::Path::new("/store");
    assert_eq!(workspace_slug("/home/u/proj"), "-home-u-proj");
    assert_eq!(
        memory_dir(root, "/home/u/proj"),
        root.join("memory/-home-u-proj")
    );
}

#[tokio::test]
async fn an_event_append_only_adds_one_line_at_the_end() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    run(&disk.store, "s1", "r1", RunStatus::Running).await;
    let r1 = RunRef::new("s1", "r1");
    let path = disk.dir.path().join("sessions/s1/runs/r1/events.jsonl");
    // Write 10,000 events straight into the log, then let a fresh instance append the next one.
    let mut bulk = Vec::new();
    for seq in 1..=10_000 {
        bulk.extend_from_slice(&serde_json::to_vec(&event(&r1, seq)).expect("JSON"));
        bulk.push(b'\n');
    }
    fs::write(&path, &bulk).expect("write the log");
    let store = disk.reopen();
    let next = event(&r1, 10_001);
    store.append_event(&next).await.expect("append");
    let after = fs::read(&path).expect("read");
    let line = [serde_json::to_vec(&next).expect("JSON"), b"\n".to_vec()].concat();
    assert_eq!(&after[..bulk.len()], &bulk[..], "earlier bytes unchanged");
    assert_eq!(
        after.len(),
        bulk.len() + line.len(),
        "grown by exactly one line"
    );
    assert_eq!(&after[bulk.len()..], &line[..]);
    let mut update = RunUpdate::new(r1.clone());
    update.status = Some(RunStatus::Completed);
    store.update_run(update).await.expect("update");
    assert_eq!(
        store
            .list_events(&r1, Some(9_999))
            .await
            .expect("list")
            .len(),
        2
    );
}
