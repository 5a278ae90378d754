//! Tools cases 9.7 (docs/acceptance.md) (list_files, cases 44–47), decision (g) on ignore files and (d) on order.

use serde_json::json;

use super::files_fixture::{Files, Ws};
use super::tools_driver::cancelled;

fn list(pattern: &str) -> serde_json::Value {
    json!({"pattern": pattern})
}

#[tokio::test]
async fn globs_list_files_and_folders_relative_to_cwd() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files.ok("list_files", list("src/**/*.ts")).await,
        "src/a.ts\nsrc/deep/c.ts"
    );
    assert_eq!(
        files
            .ok("list_files", json!({"pattern": "*", "cwd": "src"}))
            .await,
        "a.ts\ndeep/"
    );
    assert_eq!(files.ok("list_files", list("*.md")).await, "README.md");
    assert_eq!(files.ok("list_files", list("src/a.ts")).await, "src/a.ts");
}

#[tokio::test]
async fn node_modules_is_skipped_unless_named() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    assert_eq!(
        files.ok("list_files", list("**/*.js")).await,
        "no files match **/*.js under ."
    );
    assert_eq!(
        files.ok("list_files", list("node_modules/**/*.js")).await,
        "node_modules/dep/index.js"
    );
    assert_eq!(
        files
            .ok("list_files", json!({"pattern": "*.ts", "cwd": "nowhere"}))
            .await,
        "no files match *.ts under nowhere"
    );
}

#[tokio::test]
async fn at_most_a_thousand_entries_in_path_order() {
    for (count, trailer) in [(1005, true), (1000, true), (999, false)] {
        let ws = Ws::empty();
        for i in 0..count {
            ws.write(&format!("many/f{i:04}.txt"), "");
        }
        let files = Files::f(&ws, "s").await;
        let text = files.ok("list_files", list("many/*.txt")).await;
        let rows: Vec<&str> = text.split('\n').collect();
        let shown = count.min(1000);
        assert_eq!(rows.len(), shown + usize::from(trailer), "{count}");
        assert_eq!(rows[0], "many/f0000.txt");
        assert_eq!(rows[shown - 1], format!("many/f{:04}.txt", shown - 1));
        if trailer {
            assert_eq!(rows[shown], "[1000 entries; narrow the pattern]");
        }
    }
}

#[tokio::test]
async fn dot_names_need_a_dotted_segment() {
    let ws = Ws::f();
    ws.write(".hidden/x.ts", "");
    ws.write(".env", "");
    ws.write("a/.env", "");
    let files = Files::f(&ws, "s").await;
    let all = files.ok("list_files", list("**/*")).await;
    assert!(!all.contains(".hidden") && !all.contains(".env"), "{all}");
    assert!(
        all.contains("src/deep/c.ts") && all.contains("src/deep/"),
        "{all}"
    );
    assert_eq!(
        files.ok("list_files", list(".hidden/*")).await,
        ".hidden/x.ts"
    );
    assert_eq!(
        files.ok("list_files", list("**/.env")).await,
        ".env\na/.env"
    );
    let refusal = files.refused("list_files", list("src/[a")).await;
    assert!(refusal.starts_with("invalid glob src/[a: "), "{refusal}");
}

#[tokio::test]
async fn rows_sort_by_path_component_by_component() {
    let ws = Ws::empty();
    ws.write("b.txt", "");
    ws.write("a.txt", "");
    ws.write("a/z.txt", "");
    let files = Files::f(&ws, "s").await;
    let first = files.ok("list_files", list("**/*.txt")).await;
    assert_eq!(first, "a/z.txt\na.txt\nb.txt");
    for _ in 0..20 {
        assert_eq!(files.ok("list_files", list("**/*.txt")).await, first);
    }
}

#[cfg(unix)]
#[tokio::test]
async fn links_are_entries_and_are_not_followed() {
    let ws = Ws::f();
    std::os::unix::fs::symlink(ws.path("src"), ws.path("srclink")).expect("link");
    let files = Files::f(&ws, "s").await;
    let text = files.ok("list_files", list("*")).await;
    assert!(text.split('\n').any(|r| r == "srclink"), "{text}");
    assert!(text.split('\n').any(|r| r == "src/"), "{text}");
    assert!(
        !files
            .ok("list_files", list("**/*.ts"))
            .await
            .contains("srclink")
    );
}

#[tokio::test]
async fn ignore_files_are_honoured_unless_the_path_is_named() {
    let ws = Ws::f();
    std::fs::create_dir(ws.path(".git")).expect("git folder");
    ws.write(".gitignore", "build/\n");
    ws.write("build/out.d", "todo built\n");
    ws.write(".ignore", "scratch.txt\n");
    ws.write("scratch.txt", "todo scratch\n");
    let files = Files::f(&ws, "s").await;
    let all = files.ok("list_files", list("**/*")).await;
    assert!(!all.contains("build") && !all.contains("scratch"), "{all}");
    assert_eq!(
        files.ok("list_files", list("build/**/*")).await,
        "build/out.d"
    );
    let found = files.ok("search_files", json!({"pattern": "built"})).await;
    assert_eq!(found, "no matches for /built/ under .");
    let named = files
        .ok("search_files", json!({"pattern": "built", "path": "build"}))
        .await;
    assert_eq!(named, "build/out.d:1:todo built");
}

#[tokio::test]
async fn a_cancelled_run_lists_nothing() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    let text = files
        .call_with("list_files", list("**/*"), cancelled())
        .await
        .expect("an answer");
    assert_eq!(text, "no files match **/* under .");
}
