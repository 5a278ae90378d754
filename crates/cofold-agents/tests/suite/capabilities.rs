//! Capability resolution and the system prompt (runtime cases B38, B40–B42, docs/acceptance.md).

use async_trait::async_trait;
use cofold_agents::capability::{
    Capability, CapabilityArgs, CapabilityEntry, CapabilityError, resolve_capabilities,
    system_prompt,
};
use cofold_agents::error::ErrorCode;
use cofold_agents::store::MemoryStore;
use cofold_agents::tool::{AbortSignal, KvScopes, Tool, ToolDef, ToolOutput, handler_fn};
use serde_json::json;
use std::sync::{Arc, Mutex};

fn tool(name: &str) -> Tool {
    let handler = handler_fn(|_input, _ctx| async move { Ok(ToolOutput::from("ok")) });
    Tool::new(ToolDef::new(
        name,
        "A test tool.",
        json!({ "type": "object" }),
        handler,
    ))
    .expect("valid tool")
}

fn args() -> CapabilityArgs {
    CapabilityArgs {
        agent_id: "agent".into(),
        session_id: "s1".into(),
        run_id: "r1".into(),
        workspace: None,
        kv: KvScopes::new(Arc::new(MemoryStore::new()), "agent", "default", None),
        signal: AbortSignal::never(),
    }
}

/// A capability with fixed tools and instructions that records the arguments it saw.
struct Fixed {
    id: &'static str,
    tools: Vec<&'static str>,
    instructions: Option<&'static str>,
    fail_tools: Option<&'static str>,
    fail_instructions: Option<&'static str>,
    seen: Mutex<Vec<(String, String)>>,
}

impl Fixed {
    fn new(
        id: &'static str,
        tools: Vec<&'static str>,
        instructions: Option<&'static str>,
    ) -> Fixed {
        Fixed {
            id,
            tools,
            instructions,
            fail_tools: None,
            fail_instructions: None,
            seen: Mutex::new(Vec::new()),
        }
    }
}

#[async_trait]
impl Capability for Fixed {
    fn id(&self) -> &str {
        self.id
    }

    async fn tools(&self, args: &CapabilityArgs) -> Result<Vec<Tool>, CapabilityError> {
        self.seen
            .lock()
            .expect("lock")
            .push((args.session_id.clone(), args.run_id.clone()));
        match self.fail_tools {
            Some(error) => Err(error.into()),
            None => Ok(self.tools.iter().map(|name| tool(name)).collect()),
        }
    }

    async fn instructions(
        &self,
        _args: &CapabilityArgs,
    ) -> Result<Option<String>, CapabilityError> {
        match self.fail_instructions {
            Some(error) => Err(error.into()),
            None => Ok(self.instructions.map(str::to_owned)),
        }
    }
}

fn entry(capability: Fixed, exclude: &[&str]) -> CapabilityEntry {
    CapabilityEntry {
        capability: Arc::new(capability),
        exclude: exclude.iter().map(|s| s.to_string()).collect(),
    }
}

/// A capability relying on the trait's defaults.
struct Empty;

impl Capability for Empty {
    fn id(&self) -> &str {
        "empty"
    }
}

#[tokio::test]
async fn sections_follow_the_instructions_and_tools_keep_their_order() {
    let clock = Fixed::new(
        "clock",
        vec!["now", "sleep"],
        Some("   Tell the time when asked.\n  "),
    );
    let files = Fixed::new("files", vec!["read_file"], Some("   "));
    let notes = Fixed::new("notes", vec![], Some("Keep notes short."));
    let entries = [
        entry(clock, &[]),
        entry(files, &[]),
        entry(notes, &[]),
        CapabilityEntry {
            capability: Arc::new(Empty),
            exclude: vec![],
        },
    ];
    let resolved = resolve_capabilities("be brief", &[tool("echo")], &entries, &args())
        .await
        .expect("resolves");
    assert_eq!(
        resolved.instructions,
        "be brief\n\n## clock\nTell the time when asked.\n\n## notes\nKeep notes short."
    );
    let names: Vec<(&str, &str)> = resolved
        .tools
        .iter()
        .map(|t| (t.name(), t.source()))
        .collect();
    assert_eq!(
        names,
        [
            ("echo", "agent"),
            ("now", "clock"),
            ("sleep", "clock"),
            ("read_file", "files")
        ]
    );
}

#[tokio::test]
async fn capabilities_see_the_run_arguments() {
    let clock = Arc::new(Fixed::new("clock", vec!["now"], None));
    let entries = [CapabilityEntry {
        capability: clock.clone(),
        exclude: vec![],
    }];
    resolve_capabilities("x", &[], &entries, &args())
        .await
        .expect("resolves");
    assert_eq!(
        *clock.seen.lock().expect("lock"),
        [("s1".to_owned(), "r1".to_owned())]
    );
}

#[tokio::test]
async fn a_duplicate_tool_is_refused_naming_the_capability_and_the_tool() {
    let dup = Fixed::new("dup", vec!["echo"], None);
    let error = resolve_capabilities("x", &[tool("echo")], &[entry(dup, &[])], &args())
        .await
        .expect_err("refused");
    assert_eq!(error.code, ErrorCode::InvalidOptions);
    assert_eq!(
        error.message,
        "capability \"dup\" contributes a duplicate tool \"echo\""
    );

    let first = Fixed::new("first", vec!["shared"], None);
    let second = Fixed::new("second", vec!["shared"], None);
    let error = resolve_capabilities("x", &[], &[entry(first, &[]), entry(second, &[])], &args())
        .await
        .expect_err("refused");
    assert_eq!(
        error.message,
        "capability \"second\" contributes a duplicate tool \"shared\""
    );
}

#[tokio::test]
async fn an_excluded_tool_makes_room_for_the_agents_own() {
    let files = Fixed::new("files", vec!["write_file", "read_file"], None);
    let resolved = resolve_capabilities(
        "x",
        &[tool("write_file")],
        &[entry(files, &["write_file", "no_such_tool"])],
        &args(),
    )
    .await
    .expect("resolves");
    let names: Vec<(&str, &str)> = resolved
        .tools
        .iter()
        .map(|t| (t.name(), t.source()))
        .collect();
    assert_eq!(names, [("write_file", "agent"), ("read_file", "files")]);
}

#[tokio::test]
async fn a_failing_capability_names_itself() {
    let mut broken = Fixed::new("broken", vec!["x"], None);
    broken.fail_tools = Some("nope");
    let error = resolve_capabilities("x", &[], &[entry(broken, &[])], &args())
        .await
        .expect_err("refused");
    assert_eq!(error.code, ErrorCode::CapabilityError);
    assert_eq!(error.message, "capability \"broken\": nope");
    assert_eq!(error.detail, Some(json!({ "capability": "broken" })));

    let mut wordless = Fixed::new("wordless", vec![], None);
    wordless.fail_instructions = Some("no words today");
    let error = resolve_capabilities("x", &[], &[entry(wordless, &[])], &args())
        .await
        .expect_err("refused");
    assert_eq!(error.message, "capability \"wordless\": no words today");
}

#[test]
fn the_system_prompt_joins_with_blank_lines() {
    assert_eq!(system_prompt("a", &[]), "a");
    assert_eq!(system_prompt("a", &["## x\ny".to_owned()]), "a\n\n## x\ny");
}
