//! Previews of write_file and edit_file (issue 37): what a call would do, told before it runs,
//! agrees with what the call then does, case by case; and making a preview changes nothing.

use cofold_agents::tool::{FileChange, Preview};
use serde_json::{Value, json};

use super::files_fixture::{Files, Ws};

async fn read(files: &Files, path: &str) {
    let _ = files.call("read_file", json!({ "path": path })).await;
}

fn preview(files: &Files, name: &str, input: &Value) -> Preview {
    let tool = files.tool(name);
    let input = tool.validate(input).expect("a valid input");
    tool.preview(&input).expect("the tool previews its calls")
}

/// Previews the call, checks that doing so changed nothing, runs it, and checks the preview
/// against what happened: the same bytes before and after, or the same refusal.
async fn agrees(ws: &Ws, files: &Files, name: &str, input: Value, file: &str) -> Preview {
    let exists = ws.path(file).exists();
    let before = exists.then(|| ws.bytes(file));
    let shown = preview(files, name, &input);
    assert_eq!(ws.path(file).exists(), exists, "the preview made nothing");
    if exists {
        assert_eq!(Some(ws.bytes(file)), before, "the preview changed nothing");
    }
    let outcome = files.call(name, input.clone()).await;
    match &shown {
        Preview::Changes { files: changes } => {
            let [
                FileChange {
                    path,
                    before: b,
                    after,
                },
            ] = changes.as_slice()
            else {
                panic!("one file: {changes:?}")
            };
            assert!(outcome.is_ok(), "{name} {input}: {outcome:?}");
            assert_eq!(path, &ws.path(file).canonicalize().expect("real path"));
            assert_eq!(b, &before, "{name} {input}: before");
            assert_eq!(
                after.as_ref(),
                Some(&ws.bytes(file)),
                "{name} {input}: after"
            );
        }
        Preview::WouldFail { message } => {
            assert_eq!(outcome.as_ref().err(), Some(message), "{name} {input}");
            if exists {
                assert_eq!(Some(ws.bytes(file)), before);
            }
        }
        Preview::Unavailable { .. } => {}
    }
    shown
}

#[tokio::test]
async fn an_edit_preview_is_the_edit_the_call_makes() {
    let ws = Ws::f();
    ws.write_bytes("crlf.txt", b"one\r\ntwo\r\none\r\n\xfe");
    ws.write("lf.txt", "alpha beta\nalpha\n");
    ws.write("twice.txt", "x and x\n");
    let files = Files::f(&ws, "s").await;
    for file in ["crlf.txt", "lf.txt", "twice.txt"] {
        read(&files, file).await;
    }
    let edit = |path: &str, old: &str, new: &str, all: bool| json!({ "path": path, "old": old, "new": new, "all": all });
    let cases = [
        (edit("crlf.txt", "two\none", "2\n1", false), "crlf.txt"),
        (edit("crlf.txt", "1", "$& $1", false), "crlf.txt"),
        (edit("lf.txt", "alpha", "a", true), "lf.txt"),
        (edit("lf.txt", "gamma", "g", false), "lf.txt"),
        (edit("twice.txt", "x", "y", false), "twice.txt"),
        (edit("missing.txt", "x", "y", false), "missing.txt"),
        (edit("src", "x", "y", false), "src"),
    ];
    let mut kinds = Vec::new();
    for (input, file) in cases {
        let shown = agrees(&ws, &files, "edit_file", input, file).await;
        kinds.push(match shown {
            Preview::Changes { .. } => "changes".to_owned(),
            Preview::WouldFail { message } => message,
            Preview::Unavailable { message } => format!("unavailable: {message}"),
        });
    }
    assert_eq!(
        kinds,
        [
            "changes",
            "changes",
            "changes",
            "old text not found in lf.txt",
            "old text occurs 2 times in twice.txt; add context to make it unique, or pass all: true",
            "no file at missing.txt",
            "src is a folder; use list_files",
        ]
    );
    assert_eq!(ws.bytes("crlf.txt"), b"one\r\n2\r\n$& $1\r\n\xfe");
}

#[tokio::test]
async fn a_write_preview_is_a_creation_or_a_replacement_as_the_call_makes_it() {
    let ws = Ws::f();
    ws.write_bytes("crlf.txt", b"old\r\nlines\r\n");
    let files = Files::f(&ws, "s").await;
    read(&files, "crlf.txt").await;
    let shown = agrees(
        &ws,
        &files,
        "write_file",
        json!({ "path": "deep/new/file.txt", "content": "a\nb\n" }),
        "deep/new/file.txt",
    )
    .await;
    let Preview::Changes { files: changes } = shown else {
        panic!("a creation: {shown:?}")
    };
    assert!(changes[0].is_creation());
    let shown = agrees(
        &ws,
        &files,
        "write_file",
        json!({ "path": "crlf.txt", "content": "new\ntext\n" }),
        "crlf.txt",
    )
    .await;
    assert!(matches!(shown, Preview::Changes { .. }));
    assert_eq!(ws.bytes("crlf.txt"), b"new\r\ntext\r\n");
}

#[tokio::test]
async fn what_the_read_check_would_refuse_is_previewed_as_that_refusal() {
    let ws = Ws::f();
    ws.write("unread.txt", "one\n");
    let files = Files::f(&ws, "s").await;
    let shown = agrees(
        &ws,
        &files,
        "edit_file",
        json!({ "path": "unread.txt", "old": "one", "new": "two" }),
        "unread.txt",
    )
    .await;
    assert_eq!(
        shown,
        Preview::would_fail(
            "unread.txt was not read in this session; read it with read_file first"
        )
    );
}

#[tokio::test]
async fn binary_and_large_files_are_described_not_shown() {
    let ws = Ws::f();
    ws.write_bytes("blob.bin", b"\x00\x01\x02");
    ws.write("big.txt", &"line of text\n".repeat(100_000));
    let files = Files::f(&ws, "s").await;
    read(&files, "blob.bin").await;
    read(&files, "big.txt").await;
    assert_eq!(
        preview(
            &files,
            "write_file",
            &json!({ "path": "blob.bin", "content": "t" })
        ),
        Preview::unavailable("blob.bin is binary, so there is no preview")
    );
    // The edit itself would be refused, and the preview says that rather than "binary".
    assert_eq!(
        preview(
            &files,
            "edit_file",
            &json!({ "path": "blob.bin", "old": "a", "new": "b" })
        ),
        Preview::would_fail("blob.bin is binary")
    );
    assert_eq!(
        preview(
            &files,
            "write_file",
            &json!({ "path": "new.bin", "content": "a\u{0}b" })
        ),
        Preview::unavailable("the new content of new.bin is binary, so there is no preview")
    );
    assert_eq!(
        preview(
            &files,
            "edit_file",
            &json!({ "path": "big.txt", "old": "line of text\nline", "new": "x" })
        ),
        Preview::would_fail(
            "old text occurs 50000 times in big.txt; add context to make it unique, or pass all: true"
        )
    );
    assert_eq!(
        preview(
            &files,
            "write_file",
            &json!({ "path": "big.txt", "content": "short" })
        ),
        Preview::unavailable(
            "big.txt is too large to preview (1300000 bytes; a preview shows at most 1 MiB)"
        )
    );
}
