//! Random JSON fed to every standard tool's input: no panic, and exactly one answer per call,
//! either the schema's refusal (what the harness answers) or the tool's own result or refusal.

use std::path::Path;
use std::sync::Arc;

use cofold_agents::capability::Capability;
use cofold_agents::store::MemoryStore;
use cofold_agents::tool::{AbortSignal, KvScopes, Resources, Tool, ToolContext};
use cofold_tools::files::{FilesOptions, ReadRecord, files};
use cofold_tools::memory::{MemoryOptions, memory};
use cofold_tools::shell::{ShellOptions, ShellSpec, shell};
use cofold_tools::web::{WebOptions, web};
use proptest::prelude::*;
use serde_json::{Map, Value};

use super::tools_driver::Caps;
use super::web_fakes::{FakeLookup, FakeWeb};

/// Text that can be a path, a glob or a pattern but never an absolute one: the workspace sits
/// six folders deep, and ten characters climb at most three, so no write leaves the temporary
/// folder whatever is drawn.
fn text() -> impl Strategy<Value = String> {
    "([a-z.*?{}~ -]|\\[|\\]|\\\\)([a-z./*?{}~ -]|\\[|\\]){0,9}|"
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (0u64..5000).prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        text().prop_map(Value::from),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(text(), inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// The names the standard tools take, and a few they do not.
const KEYS: [&str; 14] = [
    "path",
    "cwd",
    "glob",
    "pattern",
    "content",
    "old",
    "new",
    "all",
    "offset",
    "limit",
    "command",
    "timeoutMs",
    "url",
    "maxBytes",
];

/// An input: mostly objects over the known keys (so the schema often lets it through), else
/// any JSON value at all.
fn input() -> impl Strategy<Value = Value> {
    let entry = (prop::sample::select(KEYS.to_vec()), value());
    prop_oneof![
        3 => prop::collection::vec(entry, 0..5).prop_map(|entries| {
            let map: Map<String, Value> =
                entries.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            Value::Object(map)
        }),
        1 => value(),
    ]
}

struct Tools {
    _dir: tempfile::TempDir,
    workspace: std::path::PathBuf,
    tools: Vec<Tool>,
}

async fn tools() -> Tools {
    let dir = tempfile::tempdir().expect("temp dir");
    let base = std::fs::canonicalize(dir.path()).expect("canonical");
    let workspace = base.join("a/b/c/d/e/ws");
    std::fs::create_dir_all(workspace.join("src")).expect("folders");
    std::fs::write(workspace.join("src/a.txt"), "one\ntwo\n").expect("write");
    let capabilities: Vec<Arc<dyn Capability>> = vec![
        Arc::new(files(FilesOptions {
            read_record: Some(Arc::new(ReadRecord::new())),
            ..FilesOptions::default()
        })),
        // The command text is echoed, never run: random text must not reach a real shell.
        Arc::new(shell(ShellOptions {
            shell: Some(ShellSpec {
                command: "echo".into(),
                args: vec![],
            }),
            timeout_ms: 5_000,
            max_timeout_ms: 5_000,
            ..ShellOptions::default()
        })),
        Arc::new(web(WebOptions {
            fetch: Some(Arc::new(FakeWeb::default())),
            lookup: Some(Arc::new(FakeLookup::default())),
            timeout_ms: 5_000,
            ..WebOptions::default()
        })),
        Arc::new(memory(MemoryOptions::new(base.join("a/b/c/d/e/memory")))),
    ];
    let mut all = Vec::new();
    for capability in &capabilities {
        all.extend(Caps::of(capability.as_ref(), Some(&workspace)).await.tools);
    }
    Tools {
        _dir: dir,
        workspace,
        tools: all,
    }
}

fn context(workspace: &Path) -> ToolContext {
    ToolContext {
        agent_id: "agent".into(),
        session_id: "session".into(),
        run_id: "run".into(),
        call_id: "call".into(),
        invocation_id: "inv".into(),
        workspace: Some(workspace.to_string_lossy().into_owned()),
        signal: AbortSignal::never(),
        kv: KvScopes::new(Arc::new(MemoryStore::new()), "agent", "ns", None),
        resources: Resources::new(),
    }
}

/// One call as the harness makes it: the schema first, then the handler. The answer is one
/// sentence or one result.
async fn answer(tool: &Tool, workspace: &Path, input: &Value) -> String {
    match tool.validate(input) {
        Err(issues) => {
            assert!(
                !issues.is_empty(),
                "{} refused {input} without a reason",
                tool.name()
            );
            format!("invalid: {}", issues[0].message)
        }
        Ok(valid) => {
            // Rules and modes call these on every valid input; they must not panic either.
            let _ = tool.subject(&valid);
            let _ = tool.writes(&valid);
            match tool.execute(valid, context(workspace)).await {
                Ok(output) => output.content,
                Err(error) => {
                    let sentence = error.to_string();
                    assert!(
                        !sentence.is_empty(),
                        "{} failed without a sentence",
                        tool.name()
                    );
                    sentence
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn every_tool_answers_any_input_once(inputs in prop::collection::vec(input(), 1..4)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let tools = tools().await;
            assert_eq!(tools.tools.len(), 9, "files, shell, web_fetch and memory");
            for input in &inputs {
                for tool in &tools.tools {
                    let call = answer(tool, &tools.workspace, input);
                    let answered = tokio::time::timeout(std::time::Duration::from_secs(60), call).await;
                    assert!(answered.is_ok(), "{} never answered {input}", tool.name());
                }
            }
        });
    }
}
