//! Fixture F of tools.md §9 and a small driver that calls the files tools the way the harness
//! does: validate the input against the tool's schema, then execute.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cofold_agents::capability::{Capability, CapabilityArgs};
use cofold_agents::store::MemoryStore;
use cofold_agents::tool::{AbortController, AbortSignal, KvScopes, Resources, Tool, ToolContext};
use cofold_tools::files::{FilesOptions, ReadRecord, files};
use serde_json::Value;
use tempfile::TempDir;

/// A temporary workspace, canonicalised.
pub struct Ws {
    _dir: TempDir,
    pub root: PathBuf,
}

impl Ws {
    /// An empty workspace.
    pub fn empty() -> Ws {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = fs::canonicalize(dir.path()).expect("canonical");
        Ws { _dir: dir, root }
    }

    /// Fixture F.
    pub fn f() -> Ws {
        let ws = Ws::empty();
        ws.write(
            "src/a.ts",
            "const a = 1;\nexport const b = a + 1;\n// TODO later\n",
        );
        ws.write("src/deep/c.ts", "export const c = 3; // todo\n");
        let readme: Vec<String> = (1..=12).map(|i| format!("line {i}")).collect();
        ws.write("README.md", &readme.join("\n"));
        ws.write_bytes("image.bin", &[0x89, 0x50, 0x00, 0x47]);
        ws.write("node_modules/dep/index.js", "const a = 0;\n");
        ws
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    pub fn write(&self, rel: &str, text: &str) {
        self.write_bytes(rel, text.as_bytes());
    }

    pub fn write_bytes(&self, rel: &str, bytes: &[u8]) {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("folders");
        }
        fs::write(path, bytes).expect("write");
    }

    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.path(rel)).expect("read")
    }

    pub fn bytes(&self, rel: &str) -> Vec<u8> {
        fs::read(self.path(rel)).expect("read")
    }

    /// The root as text, the way the tools print absolute paths.
    pub fn text(&self) -> String {
        self.root.to_string_lossy().into_owned()
    }
}

/// Options of fixture F: five lines a page, three rows a search, a private record.
pub fn f_options() -> FilesOptions {
    FilesOptions {
        max_lines: 5,
        max_matches: 3,
        read_record: Some(Arc::new(ReadRecord::new())),
        ..FilesOptions::default()
    }
}

pub fn args(workspace: &Path, session: &str) -> CapabilityArgs {
    CapabilityArgs {
        agent_id: "agent".into(),
        session_id: session.into(),
        run_id: "run".into(),
        workspace: Some(workspace.to_string_lossy().into_owned()),
        kv: kv(),
        signal: AbortSignal::never(),
    }
}

fn kv() -> KvScopes {
    KvScopes::new(Arc::new(MemoryStore::new()), "agent", "ns", None)
}

/// The files tools of one run.
pub struct Files {
    pub tools: Vec<Tool>,
    pub instructions: String,
    session: String,
    workspace: PathBuf,
}

impl Files {
    /// Builds the capability with `options` and resolves it for `session` in `workspace`.
    pub async fn new(workspace: &Path, session: &str, options: FilesOptions) -> Files {
        let capability = files(options);
        assert_eq!(capability.id(), "files");
        let args = args(workspace, session);
        let tools = capability.tools(&args).await.expect("tools");
        let instructions = capability
            .instructions(&args)
            .await
            .expect("instructions")
            .expect("some instructions");
        Files {
            tools,
            instructions,
            session: session.to_owned(),
            workspace: workspace.to_path_buf(),
        }
    }

    /// Fixture F's tools for session `s` (or another), sharing nothing with other tests.
    pub async fn f(ws: &Ws, session: &str) -> Files {
        Files::new(&ws.root, session, f_options()).await
    }

    pub fn tool(&self, name: &str) -> &Tool {
        self.tools
            .iter()
            .find(|t| t.name() == name)
            .unwrap_or_else(|| panic!("no tool {name}"))
    }

    pub fn subject(&self, name: &str, input: Value) -> Option<String> {
        let tool = self.tool(name);
        let input = tool.validate(&input).expect("valid input");
        tool.subject(&input)
    }

    pub fn writes(&self, name: &str, input: Value) -> Option<PathBuf> {
        let tool = self.tool(name);
        let input = tool.validate(&input).expect("valid input");
        tool.writes(&input)
    }

    /// Calls a tool; `Ok` is the result text, `Err` the refusal sentence.
    pub async fn call(&self, name: &str, input: Value) -> Result<String, String> {
        self.call_with(name, input, AbortSignal::never()).await
    }

    pub async fn call_with(
        &self,
        name: &str,
        input: Value,
        signal: AbortSignal,
    ) -> Result<String, String> {
        let tool = self.tool(name);
        let input = tool
            .validate(&input)
            .expect("the harness would refuse this input");
        let ctx = ToolContext {
            agent_id: "agent".into(),
            session_id: self.session.clone(),
            run_id: "run".into(),
            call_id: "call".into(),
            invocation_id: "inv".into(),
            workspace: Some(self.workspace.to_string_lossy().into_owned()),
            signal,
            kv: kv(),
            resources: Resources::new(),
        };
        match tool.execute(input, ctx).await {
            Ok(output) => Ok(output.content),
            Err(error) => Err(error.to_string()),
        }
    }

    pub async fn ok(&self, name: &str, input: Value) -> String {
        match self.call(name, input).await {
            Ok(text) => text,
            Err(refusal) => panic!("{name} refused: {refusal}"),
        }
    }

    pub async fn refused(&self, name: &str, input: Value) -> String {
        match self.call(name, input).await {
            Ok(text) => panic!("{name} answered instead of refusing: {text}"),
            Err(refusal) => refusal,
        }
    }
}

/// A signal that has already fired.
pub fn cancelled() -> AbortSignal {
    let controller = AbortController::new();
    controller.abort(cofold_agents::tool::AbortReason::Cancel { reason: None });
    controller.signal()
}

/// The parent of a path as text with `/`.
pub fn slash(path: &Path) -> String {
    path.to_string_lossy().replace('\\', "/")
}
