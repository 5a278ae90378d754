//! A writer killed with SIGKILL in the middle of its appends leaves a store that opens, lists the
//! session and holds every record the writer reported as written.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use cofold_agents::store::{RunRef, RunStatus, SessionQuery, Store};
use cofold_store_file::{FileStore, FileStoreOptions};

use super::support::{event, message, run, seqs, session};

const CHILD_ENV: &str = "COFOLD_STORE_KILL_TEST_ROOT";

/// The child half: appends an event and a message per round and reports each round on stdout,
/// until it is killed. Only runs when the parent test starts it.
#[test]
#[ignore = "the child process of the kill test; the kill test starts it"]
fn child_appends_until_killed() {
    let Some(root) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let store = FileStore::open(root, FileStoreOptions::default()).expect("open");
        assert!(
            store.claim_writer("s1", "r1").await.expect("claim"),
            "the child claims the session"
        );
        let r1 = RunRef::new("s1", "r1");
        for round in 1..=1_000_000u64 {
            store
                .append_event(&event(&r1, round))
                .await
                .expect("append event");
            store
                .append_messages("s1", "r1", &[message(&format!("m{round}"))])
                .await
                .expect("append message");
            println!("written {round}");
            if round == 50 {
                println!("ready");
            }
        }
    });
}

#[tokio::test]
async fn a_writer_killed_mid_write_leaves_a_readable_store_with_everything_it_reported() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let store = FileStore::open(dir.path(), FileStoreOptions::default()).expect("open");
    session(&store, "s1", Some("/home/u/proj")).await;
    run(&store, "s1", "r1", RunStatus::Running).await;

    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "suite::kill::child_appends_until_killed",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the child");
    let stdout = child.stdout.take().expect("the child's stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut reported = 0u64;
    for line in lines.by_ref() {
        let line = line.expect("a line from the child");
        if let Some(round) = line.strip_prefix("written ") {
            reported = round.parse().expect("a round number");
        } else if line == "ready" {
            break;
        }
    }
    assert!(
        reported >= 50,
        "the child reported {reported} rounds before it was ready"
    );
    // SIGKILL while the child is busy appending.
    child.kill().expect("kill the child");
    // Rounds reported before the kill landed still count.
    for line in lines {
        let Ok(line) = line else { break };
        if let Some(round) = line.strip_prefix("written ") {
            reported = round.parse().expect("a round number");
        }
    }
    let status = child.wait().expect("reap the child");
    assert!(
        !status.success(),
        "the child was killed, not finished: {status:?}"
    );

    let reopened =
        FileStore::open(dir.path(), FileStoreOptions::default()).expect("the store opens");
    let listed = reopened
        .list_sessions(SessionQuery::default())
        .await
        .expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].session_id, "s1");
    let r1 = RunRef::new("s1", "r1");
    let events = seqs(&reopened.list_events(&r1, None).await.expect("events"));
    assert!(
        events.len() as u64 >= reported,
        "{} events stored, {reported} reported",
        events.len()
    );
    assert_eq!(
        events,
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "every event, in order, no gap"
    );
    let messages = reopened.list_messages("s1", None).await.expect("messages");
    assert!(
        messages.len() as u64 >= reported,
        "{} messages stored, {reported} reported",
        messages.len()
    );
    for (at, message) in messages.iter().enumerate() {
        assert_eq!(message.id, format!("m{}", at + 1));
    }
    // The dead child still names r1 in the lock; this process claims r1 back and goes on.
    assert!(reopened.claim_writer("s1", "r1").await.expect("claim back"));
    let next = events.len() as u64 + 1;
    reopened
        .append_event(&event(&r1, next))
        .await
        .expect("the log goes on after the kill");
    reopened
        .append_messages("s1", "r1", &[message("after")])
        .await
        .expect("the transcript goes on");
    let last = reopened.list_messages("s1", Some(1)).await.expect("window");
    assert_eq!(last[0].id, "after");
}
