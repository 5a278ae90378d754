//! Tools cases 9.9 (docs/acceptance.md): standard_capabilities, ToolsConfig and tools_schema.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cofold_agents::capability::Capability;
use cofold_agents::schema::Schema;
use cofold_tools::standard::{
    FilesConfig, ProviderConfig, StandardArgs, TOOLS_SCHEMA, ToolsConfig, WebConfig,
    standard_capabilities, tools_schema,
};
use serde_json::{Value, json};

use super::tools_driver::Caps;

fn config(value: Value) -> ToolsConfig {
    serde_json::from_value(value).expect("a valid tools section")
}

fn build(value: Value, memory_dir: Option<&Path>) -> Vec<Arc<dyn Capability>> {
    standard_capabilities(
        &config(value),
        StandardArgs {
            workspace: PathBuf::from("/srv/ws"),
            memory_dir: memory_dir.map(Path::to_path_buf),
            env: None,
            web_client: None,
            private: None,
        },
    )
}

fn ids(capabilities: &[Arc<dyn Capability>]) -> Vec<String> {
    capabilities.iter().map(|c| c.id().to_owned()).collect()
}

fn memory_dir() -> &'static Path {
    Path::new("/srv/memory/ws")
}

#[test]
fn which_capabilities_and_in_what_order() {
    assert_eq!(
        ids(&build(json!({}), Some(memory_dir()))),
        ["files", "shell", "web", "memory"]
    );
    assert_eq!(ids(&build(json!({}), None)), ["files", "shell", "web"]);
    assert_eq!(
        ids(&build(json!({"memory": true}), None)),
        ["files", "shell", "web"]
    );
    assert_eq!(
        ids(&build(
            json!({"shell": false, "web": false}),
            Some(memory_dir())
        )),
        ["files", "memory"]
    );
    assert_eq!(
        ids(&build(
            json!({"files": false, "memory": false}),
            Some(memory_dir())
        )),
        ["shell", "web"]
    );
    assert_eq!(
        ids(&standard_capabilities(
            &ToolsConfig::default(),
            StandardArgs::default()
        )),
        ["files", "shell", "web"]
    );
}

async fn tools_of(capability: &Arc<dyn Capability>) -> Caps {
    Caps::of(capability.as_ref(), Some(Path::new("/srv/ws"))).await
}

async fn web_of(value: Value) -> Caps {
    let capabilities = build(value, None);
    let web = capabilities.iter().find(|c| c.id() == "web").expect("web");
    tools_of(web).await
}

#[tokio::test]
async fn providers_come_in_written_order() {
    let caps =
        web_of(json!({"web": {"search": {"duckduckgo": true, "brave": {"apiKey": "k"}}}})).await;
    assert!(
        caps.tool("web_search")
            .description()
            .contains("(duckduckgo, then brave)")
    );
    let caps =
        web_of(json!({"web": {"search": {"tavily": {"apiKey": "k"}, "duckduckgo": true}}})).await;
    assert!(
        caps.tool("web_search")
            .description()
            .contains("(tavily, then duckduckgo)")
    );
    for alone in [
        json!({"web": {"search": {"duckduckgo": false}}}),
        json!({"web": true}),
        json!({"web": {"search": {}}}),
        json!({"web": {}}),
        json!({}),
    ] {
        assert_eq!(
            web_of(alone.clone()).await.names(),
            ["web_fetch"],
            "{alone}"
        );
    }
    let all = build(json!({}), None);
    assert_eq!(
        tools_of(&all[0]).await.names(),
        [
            "read_file",
            "write_file",
            "edit_file",
            "list_files",
            "search_files"
        ]
    );
    assert_eq!(tools_of(&all[1]).await.names(), ["shell_exec"]);
}

#[tokio::test]
async fn require_read_can_be_turned_off() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let ws = std::fs::canonicalize(tmp.path()).expect("canonical");
    std::fs::write(ws.join("unread.txt"), "old").expect("write");
    std::fs::write(ws.join("unread-again.txt"), "old").expect("write");
    let args = || StandardArgs {
        workspace: ws.clone(),
        memory_dir: None,
        env: None,
        web_client: None,
        private: None,
    };

    let off = standard_capabilities(&config(json!({"files": {"requireRead": false}})), args());
    let caps = Caps::of(off[0].as_ref(), Some(&ws)).await;
    assert_eq!(
        caps.ok("write_file", json!({"path": "unread.txt", "content": "x"}))
            .await,
        "replaced unread.txt (1 bytes)"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("unread.txt")).expect("read"),
        "x"
    );

    let on = standard_capabilities(&config(json!({"files": true})), args());
    let caps = Caps::of(on[0].as_ref(), Some(&ws)).await;
    let refusal = caps
        .refused(
            "write_file",
            json!({"path": "unread-again.txt", "content": "x"}),
        )
        .await;
    assert!(
        refusal.contains("unread-again.txt was not read in this session"),
        "{refusal}"
    );
}

#[tokio::test]
async fn memory_paths_follow_the_given_folder() {
    let capabilities = build(json!({}), Some(memory_dir()));
    let caps = tools_of(&capabilities[3]).await;
    let input = json!({"path": "topics/a.md", "content": ""});
    assert_eq!(
        caps.writes("memory_write", input.clone()),
        Some(PathBuf::from("/srv/memory/ws/topics/a.md"))
    );
    assert_eq!(
        caps.subject("memory_write", input),
        Some("topics/a.md".into())
    );
}

fn schema() -> Schema {
    Schema::compile(&tools_schema()).expect("the tools schema compiles")
}

const ACCEPTED: &[&str] = &[
    r#"{}"#,
    r#"{"files":false,"shell":true,"memory":false}"#,
    r#"{"shell":{}}"#,
    r#"{"shell":{"env":{}}}"#,
    r#"{"shell":{"env":{"inherit":["NPM_*"],"exclude":["HOME"],"set":{"CI":"1"}}}}"#,
    r#"{"files":true}"#,
    r#"{"files":{}}"#,
    r#"{"files":{"requireRead":false}}"#,
    r#"{"web":true}"#,
    r#"{"web":false}"#,
    r#"{"web":{}}"#,
    r#"{"web":{"search":{"duckduckgo":true}}}"#,
    r#"{"web":{"search":{"brave":{"apiKey":"k"},"tavily":{"apiKey":"k"},"duckduckgo":false}}}"#,
];

const REFUSED: &[&str] = &[
    r#"{"web":{"search":{"brave":{"apiKey":""}}}}"#,
    r#"{"web":{"search":{"google":{}}}}"#,
    r#"{"web":{"search":{"duckduckgo":"yes"}}}"#,
    r#"{"web":"yes"}"#,
    r#"{"files":"yes"}"#,
    r#"{"files":{"requireRead":1}}"#,
    r#"{"files":{"other":true}}"#,
    r#"{"memory":"yes"}"#,
    r#"{"shell":"yes"}"#,
    r#"{"shell":{"other":true}}"#,
    r#"{"shell":{"env":{"keep":[]}}}"#,
    r#"{"shell":{"env":{"inherit":"NPM_*"}}}"#,
    r#"{"shell":{"env":{"exclude":[""]}}}"#,
    r#"{"unknown":true}"#,
    r#"{"web":{"search":{"brave":{}}}}"#,
];

#[test]
fn the_schema_and_the_config_agree() {
    let schema = schema();
    assert_eq!(*TOOLS_SCHEMA, tools_schema());
    for text in ACCEPTED {
        let value: Value = serde_json::from_str(text).expect("json");
        assert!(schema.validate(&value).is_ok(), "the schema refused {text}");
        assert!(
            serde_json::from_value::<ToolsConfig>(value).is_ok(),
            "the config refused {text}"
        );
    }
    for text in REFUSED {
        let value: Value = serde_json::from_str(text).expect("json");
        assert!(
            schema.validate(&value).is_err(),
            "the schema accepted {text}"
        );
        assert!(
            serde_json::from_value::<ToolsConfig>(value).is_err(),
            "the config accepted {text}"
        );
    }
}

#[test]
fn a_provider_without_a_key_is_one_issue_at_web() {
    let issues = schema()
        .validate(&json!({"web": {"search": {"brave": {}}}}))
        .expect_err("refused");
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].path, "$.web");
    assert_eq!(issues[0].message, "matches none of anyOf");
}

#[test]
fn bad_input_gets_one_sentence() {
    let error = |text: &str| {
        serde_json::from_str::<ToolsConfig>(text)
            .expect_err("refused")
            .to_string()
    };
    let unknown = error(r#"{"unknown":true}"#);
    assert!(
        unknown.starts_with("unknown key \"unknown\" in the tools section"),
        "{unknown}"
    );
    let keyless = error(r#"{"web":{"search":{"brave":{}}}}"#);
    assert!(
        keyless.starts_with("tools.web.search.brave needs an apiKey"),
        "{keyless}"
    );
    let empty = error(r#"{"web":{"search":{"tavily":{"apiKey":""}}}}"#);
    assert!(
        empty.starts_with("tools.web.search.tavily.apiKey must not be empty"),
        "{empty}"
    );
    let google = error(r#"{"web":{"search":{"google":{}}}}"#);
    assert!(
        google.starts_with("unknown key \"google\" in tools.web.search"),
        "{google}"
    );
    // A key in a refused section is never repeated back.
    let wrong = error(r#"{"web":{"search":{"brave":{"apiKey":"sk-secret","extra":1}}}}"#);
    assert!(!wrong.contains("sk-secret"), "{wrong}");
}

#[test]
fn the_written_order_is_kept() {
    let parsed = config(
        json!({"web": {"search": {"duckduckgo": true, "tavily": {"apiKey": "t"}, "brave": {"apiKey": "b"}}}}),
    );
    assert_eq!(
        parsed.web,
        Some(WebConfig::Options {
            search: Some(vec![
                ProviderConfig::DuckDuckGo(true),
                ProviderConfig::Tavily {
                    api_key: "t".into()
                },
                ProviderConfig::Brave {
                    api_key: "b".into()
                },
            ])
        })
    );
    assert_eq!(
        config(json!({"files": {}})).files,
        Some(FilesConfig::Options { require_read: None })
    );
    assert!(!format!("{parsed:?}").contains("\"t\""));
}
