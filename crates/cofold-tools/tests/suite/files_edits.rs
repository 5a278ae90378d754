//! Tools cases 9.3 (docs/acceptance.md) (write_file and edit_file) and tools cases 9.14 (the decisions on edits).

use serde_json::json;

use super::files_fixture::{Files, Ws};

async fn read(files: &Files, path: &str) {
    let _ = files.call("read_file", json!({"path": path})).await;
}

#[tokio::test]
async fn a_new_file_is_created_with_its_folders_then_replaced() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    let write = |content: &str| json!({"path": "out/new/file.txt", "content": content});
    assert_eq!(
        files.ok("write_file", write("hello")).await,
        "created out/new/file.txt (5 bytes)"
    );
    assert_eq!(ws.read("out/new/file.txt"), "hello");
    assert_eq!(
        files.ok("write_file", write("bye")).await,
        "replaced out/new/file.txt (3 bytes)"
    );
    assert_eq!(ws.read("out/new/file.txt"), "bye");
}

#[tokio::test]
async fn edits_count_occurrences_and_replace_literally() {
    let ws = Ws::f();
    ws.write("edit.txt", "one two one\nthree\n");
    let files = Files::f(&ws, "s").await;
    read(&files, "edit.txt").await;
    let edit = |old: &str, new: &str| json!({"path": "edit.txt", "old": old, "new": new});
    assert_eq!(
        files.refused("edit_file", edit("four", "x")).await,
        "old text not found in edit.txt"
    );
    assert_eq!(
        files.refused("edit_file", edit("one", "x")).await,
        "old text occurs 2 times in edit.txt; add context to make it unique, or pass all: true"
    );
    assert_eq!(ws.read("edit.txt"), "one two one\nthree\n");
    assert_eq!(
        files.ok("edit_file", edit("three", "$& $1")).await,
        "edited edit.txt: 1 replacement"
    );
    assert_eq!(ws.read("edit.txt"), "one two one\n$& $1\n");
    let all = json!({"path": "edit.txt", "old": "one", "new": "1", "all": true});
    assert_eq!(
        files.ok("edit_file", all).await,
        "edited edit.txt: 2 replacements"
    );
    assert_eq!(ws.read("edit.txt"), "1 two 1\n$& $1\n");
}

#[tokio::test]
async fn occurrences_do_not_overlap() {
    let ws = Ws::f();
    ws.write("a.txt", "aaa");
    let files = Files::f(&ws, "s").await;
    read(&files, "a.txt").await;
    let edit = json!({"path": "a.txt", "old": "aa", "new": "b"});
    assert_eq!(
        files.ok("edit_file", edit).await,
        "edited a.txt: 1 replacement"
    );
    assert_eq!(ws.read("a.txt"), "ba");
}

#[tokio::test]
async fn a_shorter_write_leaves_no_tail() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    let write = |content: &str| json!({"path": "made/here.txt", "content": content});
    assert_eq!(
        files.ok("write_file", write("a long first text")).await,
        "created made/here.txt (17 bytes)"
    );
    assert_eq!(
        files.ok("write_file", write("short")).await,
        "replaced made/here.txt (5 bytes)"
    );
    assert_eq!(ws.read("made/here.txt"), "short");
}

#[tokio::test]
async fn missing_files_and_folders_are_refused() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files
            .refused(
                "edit_file",
                json!({"path": "nope.txt", "old": "a", "new": "b"})
            )
            .await,
        "no file at nope.txt"
    );
    assert_eq!(
        files
            .refused("write_file", json!({"path": "src", "content": "x"}))
            .await,
        "src is a folder; use list_files"
    );
    assert_eq!(
        files
            .refused("edit_file", json!({"path": "src", "old": "a", "new": "b"}))
            .await,
        "src is a folder; use list_files"
    );
    assert!(!ws.path("nope.txt").exists());
}

#[cfg(unix)]
#[tokio::test]
async fn writes_through_an_alias_land_on_its_target() {
    let ws = Ws::f();
    ws.write("target.txt", "first");
    std::os::unix::fs::symlink("target.txt", ws.path("alias.txt")).expect("link");
    let files = Files::f(&ws, "s").await;
    read(&files, "alias.txt").await;
    assert_eq!(
        files
            .ok(
                "write_file",
                json!({"path": "alias.txt", "content": "second line"})
            )
            .await,
        "replaced alias.txt (11 bytes)"
    );
    assert_eq!(
        files
            .ok(
                "edit_file",
                json!({"path": "alias.txt", "old": "second", "new": "third"})
            )
            .await,
        "edited alias.txt: 1 replacement"
    );
    assert_eq!(ws.read("target.txt"), "third line");
    assert!(
        ws.path("alias.txt")
            .symlink_metadata()
            .expect("meta")
            .file_type()
            .is_symlink()
    );
}

#[tokio::test]
async fn all_replacement_is_literal() {
    let ws = Ws::f();
    ws.write("x.txt", "x x");
    let files = Files::f(&ws, "s").await;
    read(&files, "x.txt").await;
    let edit = json!({"path": "x.txt", "old": "x", "new": "$&$$", "all": true});
    assert_eq!(
        files.ok("edit_file", edit).await,
        "edited x.txt: 2 replacements"
    );
    assert_eq!(ws.read("x.txt"), "$&$$ $&$$");
}

#[tokio::test]
async fn crlf_files_stay_crlf() {
    let ws = Ws::f();
    ws.write("crlf.txt", "a\r\nb\r\nc\r\n");
    let files = Files::f(&ws, "s").await;
    read(&files, "crlf.txt").await;
    let edit = |old: &str, new: &str| json!({"path": "crlf.txt", "old": old, "new": new});
    files.ok("edit_file", edit("b", "B")).await;
    assert_eq!(ws.bytes("crlf.txt"), b"a\r\nB\r\nc\r\n");
    files.ok("edit_file", edit("a\nB", "x\ny")).await;
    assert_eq!(ws.bytes("crlf.txt"), b"x\r\ny\r\nc\r\n");
    files.ok("edit_file", edit("y\r\nc", "Y\nC")).await;
    assert_eq!(ws.bytes("crlf.txt"), b"x\r\nY\r\nC\r\n");
    assert_eq!(
        files
            .ok(
                "write_file",
                json!({"path": "crlf.txt", "content": "one\ntwo\n"})
            )
            .await,
        "replaced crlf.txt (10 bytes)"
    );
    assert_eq!(ws.bytes("crlf.txt"), b"one\r\ntwo\r\n");
    assert_eq!(
        files
            .ok(
                "write_file",
                json!({"path": "new.txt", "content": "one\ntwo\n"})
            )
            .await,
        "created new.txt (8 bytes)"
    );
    assert_eq!(ws.bytes("new.txt"), b"one\ntwo\n");
}

#[tokio::test]
async fn lf_files_stay_lf_and_foreign_bytes_survive() {
    let ws = Ws::f();
    ws.write("lf.txt", "a\nb\n");
    ws.write_bytes("raw.txt", b"keep \xff\nchange me\n");
    let files = Files::f(&ws, "s").await;
    read(&files, "lf.txt").await;
    read(&files, "raw.txt").await;
    files
        .ok(
            "edit_file",
            json!({"path": "lf.txt", "old": "b", "new": "c\nd"}),
        )
        .await;
    assert_eq!(ws.bytes("lf.txt"), b"a\nc\nd\n");
    files
        .ok(
            "edit_file",
            json!({"path": "raw.txt", "old": "change", "new": "changed"}),
        )
        .await;
    assert_eq!(ws.bytes("raw.txt"), b"keep \xff\nchanged me\n");
}

#[tokio::test]
async fn a_binary_read_is_recorded_but_edits_still_refuse() {
    let ws = Ws::f();
    ws.write_bytes("other.bin", &[1, 0, 2]);
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files
            .refused("read_file", json!({"path": "image.bin"}))
            .await,
        "image.bin is binary"
    );
    assert_eq!(
        files
            .ok(
                "write_file",
                json!({"path": "image.bin", "content": "text"})
            )
            .await,
        "replaced image.bin (4 bytes)"
    );
    assert_eq!(ws.read("image.bin"), "text");
    let _ = files.call("read_file", json!({"path": "other.bin"})).await;
    assert_eq!(
        files
            .refused(
                "edit_file",
                json!({"path": "other.bin", "old": "a", "new": "b"})
            )
            .await,
        "other.bin is binary"
    );
    assert_eq!(ws.bytes("other.bin"), [1, 0, 2]);
}

#[tokio::test]
async fn refusals_write_nothing() {
    let ws = Ws::f();
    ws.write("three.txt", "x x x\n");
    let files = Files::f(&ws, "s").await;
    read(&files, "three.txt").await;
    let before = std::fs::metadata(ws.path("three.txt"))
        .expect("meta")
        .modified()
        .expect("mtime");
    let edit = |old: &str| json!({"path": "three.txt", "old": old, "new": "y"});
    assert_eq!(
        files.refused("edit_file", edit("x")).await,
        "old text occurs 3 times in three.txt; add context to make it unique, or pass all: true"
    );
    assert_eq!(
        files.refused("edit_file", edit("z")).await,
        "old text not found in three.txt"
    );
    let after = std::fs::metadata(ws.path("three.txt"))
        .expect("meta")
        .modified()
        .expect("mtime");
    assert_eq!(
        (ws.read("three.txt"), after),
        ("x x x\n".to_owned(), before)
    );
    // An operating-system error the spec does not name comes back as `<shown>: <error>`.
    #[cfg(unix)]
    assert_eq!(
        files
            .refused("write_file", json!({"path": "image.bin/x", "content": "x"}))
            .await,
        format!("image.bin/x: {}", std::io::Error::from_raw_os_error(20))
    );
}
