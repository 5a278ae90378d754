//! Tools cases 9.5 (docs/acceptance.md) (read-before-write) and tools cases 9.6 (require_read: false).

use std::sync::Arc;

use cofold_tools::files::{FilesOptions, ReadRecord};
use serde_json::{Value, json};

use super::files_fixture::{Files, Ws, f_options};

fn write(path: &str, content: &str) -> Value {
    json!({"path": path, "content": content})
}

fn edit(path: &str, old: &str, new: &str) -> Value {
    json!({"path": path, "old": old, "new": new})
}

fn read(path: &str) -> Value {
    json!({"path": path})
}

fn with_record(record: &Arc<ReadRecord>, require_read: bool) -> FilesOptions {
    FilesOptions {
        read_record: Some(Arc::clone(record)),
        require_read,
        ..f_options()
    }
}

#[tokio::test]
async fn own_writes_count_as_reads() {
    let ws = Ws::f();
    ws.write("fresh-1.txt", "one\n");
    let files = Files::f(&ws, "read-then-write").await;
    files.ok("read_file", read("fresh-1.txt")).await;
    assert_eq!(
        files
            .ok("edit_file", edit("fresh-1.txt", "one", "two"))
            .await,
        "edited fresh-1.txt: 1 replacement"
    );
    assert_eq!(
        files.ok("write_file", write("fresh-1.txt", "three")).await,
        "replaced fresh-1.txt (5 bytes)"
    );
    assert_eq!(
        files
            .ok("edit_file", edit("fresh-1.txt", "three", "four"))
            .await,
        "edited fresh-1.txt: 1 replacement"
    );
    assert_eq!(ws.read("fresh-1.txt"), "four");
}

#[tokio::test]
async fn unread_files_are_refused() {
    let ws = Ws::f();
    ws.write("unread.txt", "kept");
    let files = Files::f(&ws, "never-read").await;
    let sentence = "unread.txt was not read in this session; read it with read_file first";
    assert_eq!(
        files.refused("write_file", write("unread.txt", "x")).await,
        sentence
    );
    assert_eq!(
        files
            .refused("edit_file", edit("unread.txt", "kept", "x"))
            .await,
        sentence
    );
    assert_eq!(ws.read("unread.txt"), "kept");
}

#[tokio::test]
async fn files_changed_since_the_read_are_refused() {
    let ws = Ws::f();
    ws.write("moved-on.txt", "before");
    let files = Files::f(&ws, "changed-outside").await;
    files.ok("read_file", read("moved-on.txt")).await;
    ws.write("moved-on.txt", "someone else wrote this");
    let sentence = "moved-on.txt changed since it was read; read it again with read_file first";
    assert_eq!(
        files
            .refused("write_file", write("moved-on.txt", "x"))
            .await,
        sentence
    );
    assert_eq!(
        files
            .refused("edit_file", edit("moved-on.txt", "else", "x"))
            .await,
        sentence
    );
    assert_eq!(ws.read("moved-on.txt"), "someone else wrote this");
    files.ok("read_file", read("moved-on.txt")).await;
    assert_eq!(
        files
            .ok("edit_file", edit("moved-on.txt", "else", "other"))
            .await,
        "edited moved-on.txt: 1 replacement"
    );
}

#[tokio::test]
async fn new_files_need_no_read() {
    let ws = Ws::f();
    let files = Files::f(&ws, "new-file").await;
    assert_eq!(
        files.ok("write_file", write("brand-new.txt", "a")).await,
        "created brand-new.txt (1 bytes)"
    );
    assert_eq!(
        files.ok("write_file", write("brand-new.txt", "bb")).await,
        "replaced brand-new.txt (2 bytes)"
    );
}

#[tokio::test]
async fn the_record_is_per_session_and_outlives_a_run() {
    let ws = Ws::f();
    ws.write("two-runs.txt", "one");
    let record = Arc::new(ReadRecord::new());
    let first = Files::new(&ws.root, "across-runs", with_record(&record, true)).await;
    first.ok("read_file", read("two-runs.txt")).await;
    let other = Files::new(&ws.root, "another-session", with_record(&record, true)).await;
    assert_eq!(
        other
            .refused("write_file", write("two-runs.txt", "x"))
            .await,
        "two-runs.txt was not read in this session; read it with read_file first"
    );
    let later = Files::new(&ws.root, "across-runs", with_record(&record, true)).await;
    assert_eq!(
        later.ok("write_file", write("two-runs.txt", "next")).await,
        "replaced two-runs.txt (4 bytes)"
    );
}

#[tokio::test]
async fn a_restart_forgets_what_was_read() {
    let ws = Ws::f();
    ws.write("restart.txt", "r");
    let first = Files::new(
        &ws.root,
        "restarted",
        with_record(&Arc::new(ReadRecord::new()), true),
    )
    .await;
    first.ok("read_file", read("restart.txt")).await;
    let after = Files::new(
        &ws.root,
        "restarted",
        with_record(&Arc::new(ReadRecord::new()), true),
    )
    .await;
    assert_eq!(
        after.refused("write_file", write("restart.txt", "x")).await,
        "restart.txt was not read in this session; read it with read_file first"
    );
    after.ok("read_file", read("restart.txt")).await;
    assert_eq!(
        after.ok("write_file", write("restart.txt", "x")).await,
        "replaced restart.txt (1 bytes)"
    );
}

#[tokio::test]
async fn the_global_record_is_shared_by_default() {
    let ws = Ws::f();
    ws.write("global.txt", "g");
    let session = format!("global-{}", ws.text());
    let reader = Files::new(&ws.root, &session, FilesOptions::default()).await;
    reader.ok("read_file", read("global.txt")).await;
    let writer = Files::new(&ws.root, &session, FilesOptions::default()).await;
    assert_eq!(
        writer.ok("write_file", write("global.txt", "h")).await,
        "replaced global.txt (1 bytes)"
    );
}

#[tokio::test]
async fn opting_out_skips_only_the_check() {
    let ws = Ws::f();
    ws.write("optout-unread.txt", "one\n");
    let record = Arc::new(ReadRecord::new());
    let off = Files::new(&ws.root, "optout-unread", with_record(&record, false)).await;
    assert_eq!(
        off.ok("edit_file", edit("optout-unread.txt", "one", "two"))
            .await,
        "edited optout-unread.txt: 1 replacement"
    );
    assert_eq!(
        off.ok("write_file", write("optout-unread.txt", "three"))
            .await,
        "replaced optout-unread.txt (5 bytes)"
    );
    assert_eq!(ws.read("optout-unread.txt"), "three");

    ws.write("optout-moved.txt", "before");
    let moved = Files::new(&ws.root, "optout-moved", with_record(&record, false)).await;
    moved.ok("read_file", read("optout-moved.txt")).await;
    ws.write("optout-moved.txt", "someone else wrote this");
    assert_eq!(
        moved
            .ok("edit_file", edit("optout-moved.txt", "else", "other"))
            .await,
        "edited optout-moved.txt: 1 replacement"
    );
    ws.write("optout-moved.txt", "and again");
    assert_eq!(
        moved.ok("write_file", write("optout-moved.txt", "x")).await,
        "replaced optout-moved.txt (1 bytes)"
    );
}

#[tokio::test]
async fn reads_by_an_opted_out_capability_are_recorded() {
    let ws = Ws::f();
    ws.write("optout-record.txt", "old");
    let record = Arc::new(ReadRecord::new());
    let off = Files::new(&ws.root, "optout-record", with_record(&record, false)).await;
    off.ok("read_file", read("optout-record.txt")).await;
    let on = Files::new(&ws.root, "optout-record", with_record(&record, true)).await;
    assert_eq!(
        on.ok("write_file", write("optout-record.txt", "next"))
            .await,
        "replaced optout-record.txt (4 bytes)"
    );
}

#[tokio::test]
async fn the_default_keeps_refusing() {
    let ws = Ws::f();
    ws.write("optout-default.txt", "before");
    let files = Files::f(&ws, "optout-default").await;
    let unread = "optout-default.txt was not read in this session; read it with read_file first";
    assert_eq!(
        files
            .refused("write_file", write("optout-default.txt", "x"))
            .await,
        unread
    );
    assert_eq!(
        files
            .refused("edit_file", edit("optout-default.txt", "before", "x"))
            .await,
        unread
    );
    files.ok("read_file", read("optout-default.txt")).await;
    ws.write("optout-default.txt", "someone else wrote this");
    assert_eq!(
        files
            .refused("write_file", write("optout-default.txt", "x"))
            .await,
        "optout-default.txt changed since it was read; read it again with read_file first"
    );
    assert_eq!(ws.read("optout-default.txt"), "someone else wrote this");
}
