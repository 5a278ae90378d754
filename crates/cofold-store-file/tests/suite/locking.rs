//! The writer lock on disk (runtime cases 210-212, docs/acceptance.md) and a second writer.

use std::fs;
use std::path::Path;

use cofold_agents::error::ErrorCode;
use cofold_agents::store::{RunRef, RunStatus, RunUpdate, Store};
use serde_json::{Value, json};

use super::support::{Disk, event, message, run, session};

fn read_lock(folder: &Path) -> Value {
    serde_json::from_slice(&fs::read(folder.join("writer.lock")).expect("writer.lock"))
        .expect("JSON")
}

fn write_lock(folder: &Path, lock: &Value) {
    fs::write(
        folder.join("writer.lock"),
        serde_json::to_vec(lock).expect("JSON"),
    )
    .expect("write writer.lock");
}

#[tokio::test]
async fn the_lock_names_run_and_pid_and_only_the_heartbeat_moves() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    assert!(disk.store.claim_writer("s1", "r1").await.expect("claim"));
    let folder = disk.session_dir("s1").await;
    let first = read_lock(&folder);
    let keys: Vec<&str> = first
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    #[cfg(target_os = "linux")]
    assert_eq!(
        keys,
        [
            "runId",
            "pid",
            "startTime",
            "bootId",
            "pidNamespace",
            "claimedAt",
            "heartbeatAt"
        ]
    );
    #[cfg(not(target_os = "linux"))]
    assert_eq!(keys, ["runId", "pid", "claimedAt", "heartbeatAt"]);
    assert_eq!(first["runId"], "r1");
    assert_eq!(first["pid"], std::process::id());
    disk.store.heartbeat("s1", "r1").await.expect("heartbeat");
    let second = read_lock(&folder);
    assert_eq!(second["runId"], first["runId"]);
    assert_eq!(second["pid"], first["pid"]);
    assert_eq!(second["claimedAt"], first["claimedAt"]);
    assert_ne!(second["heartbeatAt"], first["heartbeatAt"]);
    disk.store
        .release_writer("s1", "r2")
        .await
        .expect("release by another run");
    assert!(
        folder.join("writer.lock").is_file(),
        "only the holder's release removes the lock"
    );
    disk.store
        .release_writer("s1", "r1")
        .await
        .expect("release");
    assert!(!folder.join("writer.lock").exists());
}

#[tokio::test]
async fn a_stale_running_holder_is_taken_over_but_not_a_paused_or_fresh_one() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    run(&disk.store, "s1", "r1", RunStatus::Running).await;
    assert!(disk.store.claim_writer("s1", "r1").await.expect("claim"));
    assert!(
        !disk
            .store
            .claim_writer("s1", "r2")
            .await
            .expect("fresh holder"),
        "a fresh heartbeat holds"
    );
    let folder = disk.session_dir("s1").await;
    let mut lock = read_lock(&folder);
    lock["heartbeatAt"] = json!("2000-01-01T00:00:00.000000Z");
    lock["pid"] = json!(4_000_000);
    write_lock(&folder, &lock);
    let mut update = RunUpdate::new(RunRef::new("s1", "r1"));
    update.status = Some(RunStatus::Awaiting);
    // The fence lets this through: the lock names r1 with another pid, so it is refused...
    let err = disk.store.update_run(update).await.expect_err("superseded");
    assert_eq!(err.code, ErrorCode::WriterMismatch);
    // ...so pause it by hand, as the other process would have.
    let run_path = folder.join("runs/r1/run.json");
    let mut record: Value =
        serde_json::from_slice(&fs::read(&run_path).expect("run.json")).expect("JSON");
    record["status"] = json!("awaiting");
    fs::write(&run_path, serde_json::to_vec(&record).expect("JSON")).expect("write run.json");
    assert!(
        !disk
            .store
            .claim_writer("s1", "r2")
            .await
            .expect("paused holder"),
        "a paused holder never expires"
    );
    record["status"] = json!("running");
    fs::write(&run_path, serde_json::to_vec(&record).expect("JSON")).expect("write run.json");
    assert!(
        disk.store
            .claim_writer("s1", "r2")
            .await
            .expect("stale holder"),
        "a stale running holder is taken over"
    );
    let taken = read_lock(&folder);
    assert_eq!(taken["runId"], "r2");
    assert_eq!(taken["pid"], std::process::id());
}

#[tokio::test]
async fn a_superseded_process_is_fenced_and_the_same_run_may_claim_back() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    run(&disk.store, "s1", "r1", RunStatus::Running).await;
    assert!(disk.store.claim_writer("s1", "r1").await.expect("claim"));
    let folder = disk.session_dir("s1").await;
    let mut lock = read_lock(&folder);
    lock["pid"] = json!(4_000_001);
    write_lock(&folder, &lock);
    let r1 = RunRef::new("s1", "r1");
    let err = disk
        .store
        .heartbeat("s1", "r1")
        .await
        .expect_err("heartbeat");
    assert_eq!(err.code, ErrorCode::WriterMismatch);
    assert!(
        err.message.contains("taken over by pid 4000001"),
        "{}",
        err.message
    );
    let err = disk
        .store
        .append_event(&event(&r1, 1))
        .await
        .expect_err("append_event");
    assert_eq!(err.code, ErrorCode::WriterMismatch);
    let err = disk
        .store
        .append_messages("s1", "r1", &[message("m1")])
        .await
        .expect_err("append_messages");
    assert_eq!(err.code, ErrorCode::WriterMismatch);
    let err = disk
        .store
        .update_run(RunUpdate::new(r1.clone()))
        .await
        .expect_err("update_run");
    assert_eq!(err.code, ErrorCode::WriterMismatch);
    let step = cofold_agents::store::StepRecord::Model(cofold_agents::store::ModelStep {
        session_id: "s1".into(),
        run_id: "r1".into(),
        index: 0,
        invocation_id: "i1".into(),
        status: cofold_agents::store::StepStatus::Started,
        request: None,
        reply: None,
        detail: None,
        started_at: cofold_agents::id::Timestamp::now(),
        ended_at: None,
    });
    assert_eq!(
        disk.store
            .append_step(&step)
            .await
            .expect_err("append_step")
            .code,
        ErrorCode::WriterMismatch
    );
    assert!(
        disk.store
            .claim_writer("s1", "r1")
            .await
            .expect("claim back")
    );
    assert_eq!(
        read_lock(&folder)["pid"],
        std::process::id(),
        "the claim re-stamps the pid"
    );
    disk.store
        .append_event(&event(&r1, 1))
        .await
        .expect("append after claiming back");
}

#[tokio::test]
async fn a_second_writer_is_refused_clearly_and_loses_nothing() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    assert!(disk.store.claim_writer("s1", "r1").await.expect("claim"));
    disk.store
        .append_messages("s1", "r1", &[message("m1")])
        .await
        .expect("append");
    let second = disk.reopen();
    assert!(
        !second.claim_writer("s1", "r2").await.expect("second claim"),
        "a second writer is refused"
    );
    let err = second
        .append_messages("s1", "r2", &[message("x")])
        .await
        .expect_err("second writer appends");
    assert_eq!(err.code, ErrorCode::WriterMismatch);
    assert_eq!(
        err.message,
        "run r2 does not hold the writer claim of session s1"
    );
    disk.store
        .append_messages("s1", "r1", &[message("m2")])
        .await
        .expect("the holder goes on");
    let ids: Vec<String> = second
        .list_messages("s1", None)
        .await
        .expect("list")
        .into_iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(ids, ["m1", "m2"]);
    let unreadable = disk.session_dir("s1").await.join("writer.lock");
    fs::write(&unreadable, b"{\"runId\":").expect("damage the lock");
    assert!(
        second
            .claim_writer("s1", "r2")
            .await
            .expect("claim over an unreadable lock")
    );
}

/// Field 22 of `/proc/<pid>/stat`: when the process started, in clock ticks since boot.
#[cfg(target_os = "linux")]
fn start_time_of(pid: u32) -> u64 {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).expect("the child's stat");
    let after = &stat[stat.rfind(')').expect("a command name") + 1..];
    after
        .split_whitespace()
        .nth(19)
        .expect("field 22")
        .parse()
        .expect("a number")
}

/// Makes `folder`'s lock name `run_id` in process `pid`, with a heartbeat of `heartbeat_at`.
#[cfg(target_os = "linux")]
fn hand_over(folder: &Path, run_id: &str, pid: u32, start_time: u64, heartbeat_at: &str) {
    let mut lock = read_lock(folder);
    lock["runId"] = json!(run_id);
    lock["pid"] = json!(pid);
    lock["startTime"] = json!(start_time);
    lock["heartbeatAt"] = json!(heartbeat_at);
    write_lock(folder, &lock);
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_live_holder_is_never_taken_over_whatever_run_the_newcomer_names() {
    use std::process::{Command, Stdio};
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    run(&disk.store, "s1", "r1", RunStatus::Running).await;
    assert!(disk.store.claim_writer("s1", "r1").await.expect("claim"));
    let folder = disk.session_dir("s1").await;
    // A real process that lives until its input closes, holding the claim with a heartbeat far
    // older than any age limit: its process is what counts.
    let mut child = Command::new("cat")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start cat");
    let pid = child.id();
    hand_over(
        &folder,
        "r1",
        pid,
        start_time_of(pid),
        "2000-01-01T00:00:00.000000Z",
    );
    let fresh = disk.reopen();
    assert!(!fresh.claim_writer("s1", "r2").await.expect("another run"));
    assert!(
        !fresh
            .claim_writer("s1", "r1")
            .await
            .expect("the same run id"),
        "a resume naming the live run does not take it over"
    );
    assert_eq!(fresh.dead_writer("s1").await.expect("dead_writer"), None);
    assert_eq!(
        fresh.delete_session("s1").await.expect_err("delete").code,
        ErrorCode::WriterBusy
    );
    assert_eq!(read_lock(&folder)["pid"], pid, "the lock is untouched");

    // The same process gone: the claim is taken at once.
    drop(child.stdin.take());
    child.wait().expect("reap cat");
    assert_eq!(
        fresh
            .dead_writer("s1")
            .await
            .expect("dead_writer")
            .as_deref(),
        Some("r1")
    );
    assert!(
        fresh
            .claim_writer("s1", "r1")
            .await
            .expect("resume the run")
    );
    assert_eq!(read_lock(&folder)["pid"], std::process::id());
}

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_dead_holder_is_seen_at_once_even_with_a_fresh_heartbeat() {
    use std::process::Command;
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    run(&disk.store, "s1", "r1", RunStatus::Running).await;
    run(&disk.store, "s1", "r3", RunStatus::Awaiting).await;
    assert!(disk.store.claim_writer("s1", "r1").await.expect("claim"));
    let folder = disk.session_dir("s1").await;
    // The pid of a process that has exited and been reaped; the heartbeat is from just now.
    let mut child = Command::new("true").spawn().expect("start true");
    let exited = child.id();
    child.wait().expect("reap true");
    let now = read_lock(&folder)["heartbeatAt"].clone();
    let now = now.as_str().expect("a timestamp").to_owned();
    hand_over(&folder, "r1", exited, 1, &now);

    let fresh = disk.reopen();
    assert_eq!(
        fresh
            .dead_writer("s1")
            .await
            .expect("dead_writer")
            .as_deref(),
        Some("r1")
    );
    let err = fresh
        .truncate("s1", "none")
        .await
        .expect_err("an unknown message");
    assert_eq!(
        err.code,
        ErrorCode::NotFound,
        "a dead running holder does not make the session busy: {}",
        err.message
    );
    assert!(
        fresh.claim_writer("s1", "r2").await.expect("a new run"),
        "no waiting out the heartbeat"
    );
    assert_eq!(read_lock(&folder)["runId"], "r2");

    // A paused run's claim left by a dead process stays with that run.
    hand_over(&folder, "r3", exited, 1, &now);
    assert!(!fresh.claim_writer("s1", "r4").await.expect("another run"));
    assert!(
        fresh
            .claim_writer("s1", "r3")
            .await
            .expect("the paused run resumed")
    );
}

#[tokio::test]
async fn a_holder_on_another_machine_is_judged_by_its_heartbeat() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    run(&disk.store, "s1", "r1", RunStatus::Running).await;
    assert!(disk.store.claim_writer("s1", "r1").await.expect("claim"));
    let folder = disk.session_dir("s1").await;
    // Another boot: its pid means nothing here, so only the heartbeat can tell.
    let mut lock = read_lock(&folder);
    lock["bootId"] = json!("a-boot-of-another-machine");
    lock["pid"] = json!(1);
    write_lock(&folder, &lock);
    let fresh = disk.reopen();
    assert!(
        !fresh.claim_writer("s1", "r2").await.expect("claim"),
        "a fresh heartbeat holds"
    );
    assert_eq!(fresh.dead_writer("s1").await.expect("dead_writer"), None);
    lock["heartbeatAt"] = json!("2000-01-01T00:00:00.000000Z");
    write_lock(&folder, &lock);
    assert_eq!(
        fresh
            .dead_writer("s1")
            .await
            .expect("dead_writer")
            .as_deref(),
        Some("r1")
    );
    assert!(
        fresh.claim_writer("s1", "r2").await.expect("claim"),
        "a heartbeat past the age limit is a dead holder"
    );
}
