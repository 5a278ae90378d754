//! Tools cases 9.7 (docs/acceptance.md) (search_files, cases 48–55) and decision (d).

use serde_json::{Value, json};

use super::files_fixture::{Files, Ws};
use super::tools_driver::cancelled;

fn search(pattern: &str) -> Value {
    json!({"pattern": pattern})
}

#[tokio::test]
async fn rows_are_file_line_text() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files
            .ok(
                "search_files",
                json!({"pattern": "const [ab]", "path": "src"})
            )
            .await,
        "src/a.ts:1:const a = 1;\nsrc/a.ts:2:export const b = a + 1;"
    );
    assert_eq!(
        files
            .ok(
                "search_files",
                json!({"pattern": "todo", "ignoreCase": true, "glob": "**/*.ts"})
            )
            .await,
        "src/a.ts:3:// TODO later\nsrc/deep/c.ts:1:export const c = 3; // todo"
    );
    assert_eq!(
        files
            .ok(
                "search_files",
                json!({"pattern": "todo", "glob": "**/*.ts"})
            )
            .await,
        "src/deep/c.ts:1:export const c = 3; // todo"
    );
}

#[tokio::test]
async fn the_limit_is_announced_even_when_met_exactly() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files
            .ok(
                "search_files",
                json!({"pattern": ".", "path": "README.md", "limit": 2})
            )
            .await,
        "README.md:1:line 1\nREADME.md:2:line 2\n[2 rows; narrow with path or glob]"
    );
    let text = files
        .ok(
            "search_files",
            json!({"pattern": "line", "path": "README.md"}),
        )
        .await;
    assert!(
        text.ends_with("\n[3 rows; narrow with path or glob]"),
        "{text}"
    );
    ws.write("three.txt", "x1\nx2\nx3\n");
    let exact = files
        .ok("search_files", json!({"pattern": "x", "path": "three.txt"}))
        .await;
    assert_eq!(
        exact,
        "three.txt:1:x1\nthree.txt:2:x2\nthree.txt:3:x3\n[3 rows; narrow with path or glob]"
    );
}

#[tokio::test]
async fn no_matches_and_refusals() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files.ok("search_files", search("zzz")).await,
        "no matches for /zzz/ under ."
    );
    assert_eq!(
        files.ok("search_files", search("const a = 0")).await,
        "no matches for /const a = 0/ under ."
    );
    let refusal = files.refused("search_files", search("(")).await;
    assert_eq!(refusal, "invalid regular expression /(/: unclosed group");
    assert_eq!(
        files
            .refused("search_files", json!({"pattern": "x", "path": "missing"}))
            .await,
        format!("nothing at {}", ws.path("missing").display())
    );
}

#[tokio::test]
async fn size_and_binary_limits_are_exact() {
    let ws = Ws::empty();
    let sized = |n: usize| {
        let mut bytes = b"needle\n".to_vec();
        bytes.resize(n, b'x');
        bytes
    };
    ws.write_bytes("exact.txt", &sized(2_097_152));
    ws.write_bytes("over.txt", &sized(2_097_153));
    let with_nul_at = |at: usize| {
        let mut bytes = b"needle\n".to_vec();
        bytes.resize(9000, b'y');
        bytes[at] = 0;
        bytes
    };
    ws.write_bytes("nul8191.txt", &with_nul_at(8191));
    ws.write_bytes("nul8192.txt", &with_nul_at(8192));
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files.ok("search_files", search("needle")).await,
        "exact.txt:1:needle\nnul8192.txt:1:needle"
    );
}

#[tokio::test]
async fn long_rows_are_cut_and_crlf_is_not_shown() {
    let ws = Ws::empty();
    ws.write("long.txt", &format!("{}\n", "é".repeat(250)));
    ws.write("crlf.txt", "foo\r\nbar  \r\n");
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files
            .ok("search_files", json!({"pattern": "é", "path": "long.txt"}))
            .await,
        format!(
            "long.txt:1:{} [line cut at 200 characters]",
            "é".repeat(200)
        )
    );
    assert_eq!(
        files.ok("search_files", search("foo$")).await,
        "crlf.txt:1:foo"
    );
    assert_eq!(
        files.ok("search_files", search("bar")).await,
        "crlf.txt:2:bar"
    );
}

#[tokio::test]
async fn rows_sort_by_path_then_line_whatever_the_walk() {
    let ws = Ws::empty();
    ws.write("b.txt", "hit\n");
    ws.write("a.txt", "hit\nmiss\nhit\n");
    ws.write("a/z.txt", "hit\n");
    let files = Files::f(&ws, "s").await;
    let expected = "a/z.txt:1:hit\na.txt:1:hit\na.txt:3:hit\n[3 rows; narrow with path or glob]";
    for _ in 0..20 {
        assert_eq!(files.ok("search_files", search("hit")).await, expected);
    }
    assert_eq!(
        files
            .ok("search_files", json!({"pattern": "hit", "limit": 2}))
            .await,
        "a/z.txt:1:hit\na.txt:1:hit\n[2 rows; narrow with path or glob]"
    );
}

#[tokio::test]
async fn rows_outside_the_workspace_are_absolute() {
    let ws = Ws::f();
    let outside = Ws::empty();
    outside.write("o.txt", "found it\n");
    let files = Files::f(&ws, "s").await;
    let path = outside.text();
    assert_eq!(
        files
            .ok("search_files", json!({"pattern": "found", "path": path}))
            .await,
        format!("{}/o.txt:1:found it", outside.text())
    );
    assert_eq!(
        files
            .ok("search_files", json!({"pattern": "zzz", "path": path}))
            .await,
        format!("no matches for /zzz/ under {}", outside.text())
    );
}

#[tokio::test]
async fn a_cancelled_run_stops_the_search() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    let text = files
        .call_with("search_files", search("const"), cancelled())
        .await
        .expect("an answer");
    assert_eq!(text, "no matches for /const/ under .");
}
