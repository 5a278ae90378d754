//! Tools cases 9.1 (docs/acceptance.md): the files capability's declarations.

use serde_json::json;

use super::files_fixture::{Files, Ws, slash};

#[tokio::test]
async fn tools_come_in_order_with_their_effects() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    let names: Vec<&str> = files.tools.iter().map(|t| t.name()).collect();
    assert_eq!(
        names,
        [
            "read_file",
            "write_file",
            "edit_file",
            "list_files",
            "search_files"
        ]
    );
    for tool in &files.tools {
        let e = tool.effects();
        let (reads, writes, destructive) = match tool.name() {
            "write_file" | "edit_file" => (false, true, true),
            _ => (true, false, false),
        };
        assert_eq!(
            (e.reads, e.writes, e.network, e.destructive),
            (reads, writes, false, destructive),
            "{}",
            tool.name()
        );
    }
}

#[tokio::test]
async fn instructions_name_the_workspace_on_their_first_line() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    let first = files.text().lines().next().expect("a line");
    assert!(first.contains(&ws.text()), "{first}");
    assert_eq!(files.text().lines().count(), 3);
    assert!(!files.text().ends_with('\n'));
}

#[tokio::test]
async fn subjects_are_lexical_and_shown() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    let abs = format!("{}/src/a.ts", ws.text());
    for input in [
        json!({"path": "src/a.ts", "offset": 2}),
        json!({"path": abs}),
    ] {
        assert_eq!(
            files.subject("read_file", input).as_deref(),
            Some("src/a.ts")
        );
    }
    for path in ["./out.txt", "src/../out.txt"] {
        let input = json!({"path": path, "content": "x"});
        assert_eq!(
            files.subject("write_file", input).as_deref(),
            Some("out.txt")
        );
    }
    let edit = |path: &str| json!({"path": path, "old": "a", "new": "b"});
    assert_eq!(
        files.subject("edit_file", edit("src/a.ts")).as_deref(),
        Some("src/a.ts")
    );
    let parent = ws.root.parent().expect("parent");
    assert_eq!(
        files.subject("edit_file", edit("../outside/x.ts")),
        Some(format!("{}/outside/x.ts", slash(parent)))
    );
    let list = json!({"pattern": "src/**/*.ts", "cwd": "."});
    assert_eq!(
        files.subject("list_files", list).as_deref(),
        Some("src/**/*.ts")
    );
    let search = json!({"pattern": "todo", "path": "src"});
    assert_eq!(
        files.subject("search_files", search).as_deref(),
        Some("todo")
    );
}

#[tokio::test]
async fn writes_are_absolute_and_only_on_the_writers() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    let write = |path: &str| json!({"path": path, "content": "x"});
    assert_eq!(
        files.writes("write_file", write("src/a.ts")),
        Some(ws.path("src/a.ts"))
    );
    assert_eq!(
        files.writes("write_file", write("src/../out.txt")),
        Some(ws.path("out.txt"))
    );
    let parent = ws.root.parent().expect("parent");
    assert_eq!(
        files.writes(
            "edit_file",
            json!({"path": "../outside/x.ts", "old": "a", "new": "b"})
        ),
        Some(parent.join("outside").join("x.ts"))
    );
    for name in ["read_file", "list_files", "search_files"] {
        assert!(!files.tool(name).has_writes(), "{name}");
    }
}

#[tokio::test]
async fn schemas_are_exact() {
    let ws = Ws::f();
    let files = Files::f(&ws, "s").await;
    let keys = |name: &str| -> (Vec<String>, Vec<String>) {
        let input = files.tool(name).input();
        assert_eq!(input["type"], "object");
        assert_eq!(input["additionalProperties"], false);
        let props = input["properties"].as_object().expect("properties");
        let required = input["required"].as_array().expect("required");
        (
            props.keys().cloned().collect(),
            required
                .iter()
                .map(|v| v.as_str().unwrap_or("").to_owned())
                .collect(),
        )
    };
    assert_eq!(
        keys("read_file"),
        (
            vec!["path".into(), "offset".into(), "limit".into()],
            vec!["path".into()]
        )
    );
    assert_eq!(keys("write_file").1, ["path", "content"]);
    assert_eq!(
        keys("edit_file"),
        (
            vec!["path".into(), "old".into(), "new".into(), "all".into()],
            vec!["path".into(), "old".into(), "new".into()],
        )
    );
    assert_eq!(
        keys("list_files"),
        (vec!["pattern".into(), "cwd".into()], vec!["pattern".into()])
    );
    assert_eq!(
        keys("search_files").0,
        ["pattern", "path", "glob", "ignoreCase", "limit"]
    );
    let read = files.tool("read_file");
    assert!(
        read.description().contains("5 at a time"),
        "{}",
        read.description()
    );
    assert!(
        files
            .tool("search_files")
            .description()
            .contains("at most 3")
    );
    assert!(files.tool("list_files").description().contains("1000"));
    assert_eq!(
        files.tool("edit_file").input()["properties"]["old"]["minLength"],
        1
    );
}
