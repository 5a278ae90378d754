//! Tools cases 9.2 (docs/acceptance.md): read_file.

use serde_json::json;

use super::files_fixture::{Files, Ws};

#[tokio::test]
async fn pages_of_numbered_lines() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files.ok("read_file", json!({"path": "src/a.ts"})).await,
        "1│const a = 1;\n2│export const b = a + 1;\n3│// TODO later"
    );
    assert_eq!(
        files.ok("read_file", json!({"path": "README.md"})).await,
        "1│line 1\n2│line 2\n3│line 3\n4│line 4\n5│line 5\n[7 more lines; read from offset 6]"
    );
    assert_eq!(
        files
            .ok(
                "read_file",
                json!({"path": "README.md", "offset": 9, "limit": 2})
            )
            .await,
        " 9│line 9\n10│line 10\n[2 more lines; read from offset 11]"
    );
    let abs = ws.path("README.md").to_string_lossy().into_owned();
    assert_eq!(
        files
            .ok("read_file", json!({"path": abs, "offset": 11}))
            .await,
        "11│line 11\n12│line 12"
    );
}

#[tokio::test]
async fn refusals_are_exact() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    let refused = |path: &'static str| files.refused("read_file", json!({"path": path}));
    assert_eq!(refused("image.bin").await, "image.bin is binary");
    assert_eq!(refused("missing.txt").await, "no file at missing.txt");
    assert_eq!(refused("src").await, "src is a folder; use list_files");
    assert_eq!(refused("README.md/x").await, "no file at README.md/x");
    assert_eq!(
        files
            .refused("read_file", json!({"path": "README.md", "offset": 13}))
            .await,
        "README.md has 12 lines; offset 13 is past the end"
    );
}

#[tokio::test]
async fn an_empty_file_is_refused_but_counts_as_read() {
    let ws = Ws::f();
    ws.write("e.txt", "");
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files.refused("read_file", json!({"path": "e.txt"})).await,
        "e.txt is empty"
    );
    assert_eq!(
        files
            .ok("write_file", json!({"path": "e.txt", "content": "now"}))
            .await,
        "replaced e.txt (3 bytes)"
    );
}

#[tokio::test]
async fn long_lines_are_cut_by_characters() {
    let ws = Ws::f();
    ws.write(
        "long.txt",
        &format!("{}\n{}\n", "é".repeat(2001), "😀".repeat(1500)),
    );
    let files = Files::f(&ws, "s").await;
    let text = files.ok("read_file", json!({"path": "long.txt"})).await;
    let rows: Vec<&str> = text.split('\n').collect();
    assert_eq!(
        rows[0],
        format!("1│{} [line cut at 2000 characters]", "é".repeat(2000))
    );
    assert_eq!(rows[1], format!("2│{}", "😀".repeat(1500)));
}

#[tokio::test]
async fn crlf_is_dropped_only_before_a_line_feed() {
    let ws = Ws::f();
    ws.write("crlf.txt", "a\r\nb\r\n");
    ws.write("cr.txt", "a\rb\r");
    ws.write_bytes("bad.txt", b"ok \xff here\n");
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files.ok("read_file", json!({"path": "crlf.txt"})).await,
        "1│a\n2│b"
    );
    assert_eq!(
        files.ok("read_file", json!({"path": "cr.txt"})).await,
        "1│a\rb\r"
    );
    assert_eq!(
        files.ok("read_file", json!({"path": "bad.txt"})).await,
        "1│ok \u{FFFD} here"
    );
}

#[cfg(unix)]
#[tokio::test]
async fn a_fifo_is_refused_without_blocking() {
    let ws = Ws::f();
    let status = std::process::Command::new("mkfifo")
        .arg(ws.path("pipe"))
        .status()
        .expect("mkfifo runs");
    assert!(status.success());
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files.refused("read_file", json!({"path": "pipe"})).await,
        "pipe is not a regular file"
    );
}

#[tokio::test]
async fn a_page_deep_in_a_large_file_comes_back_with_the_count() {
    let ws = Ws::f();
    let mut text = String::new();
    for i in 1..=200_000 {
        text.push_str(&format!("row {i}\n"));
    }
    ws.write("big.txt", &text);
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files
            .ok(
                "read_file",
                json!({"path": "big.txt", "offset": 199_998, "limit": 2})
            )
            .await,
        "199998│row 199998\n199999│row 199999\n[1 more lines; read from offset 200000]"
    );
}
