//! The one driver every capability's tests use: resolve a capability for one run, then call its
//! tools the way the harness does (validate against the schema, then execute).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cofold_agents::capability::{Capability, CapabilityArgs};
use cofold_agents::store::MemoryStore;
use cofold_agents::tool::{
    AbortController, AbortReason, AbortSignal, KvScopes, Resources, Tool, ToolContext,
};
use serde_json::Value;

/// One run's tools and instructions from one capability.
pub struct Caps {
    pub tools: Vec<Tool>,
    pub instructions: Option<String>,
    session: String,
    workspace: Option<PathBuf>,
}

fn kv() -> KvScopes {
    KvScopes::new(Arc::new(MemoryStore::new()), "agent", "ns", None)
}

/// The arguments of a run of session `session` in `workspace`.
pub fn session_args(workspace: Option<&Path>, session: &str) -> CapabilityArgs {
    CapabilityArgs {
        agent_id: "agent".into(),
        session_id: session.into(),
        run_id: "run".into(),
        workspace: workspace.map(|w| w.to_string_lossy().into_owned()),
        kv: kv(),
        signal: AbortSignal::never(),
    }
}

/// The arguments of a run of the default session in `workspace`.
pub fn run_args(workspace: Option<&Path>) -> CapabilityArgs {
    session_args(workspace, "session")
}

impl Caps {
    /// Resolves `capability` for a run in `workspace`.
    pub async fn of(capability: &dyn Capability, workspace: Option<&Path>) -> Caps {
        Caps::for_session(capability, workspace, "session").await
    }

    /// Resolves `capability` for a run of session `session` in `workspace`.
    pub async fn for_session(
        capability: &dyn Capability,
        workspace: Option<&Path>,
        session: &str,
    ) -> Caps {
        let args = session_args(workspace, session);
        let tools = capability.tools(&args).await.expect("tools");
        let instructions = capability.instructions(&args).await.expect("instructions");
        Caps {
            tools,
            instructions,
            session: session.to_owned(),
            workspace: workspace.map(Path::to_path_buf),
        }
    }

    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(Tool::name).collect()
    }

    pub fn text(&self) -> &str {
        self.instructions
            .as_deref()
            .expect("an instructions section")
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
            workspace: self
                .workspace
                .as_ref()
                .map(|w| w.to_string_lossy().into_owned()),
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

/// A controller whose signal the test fires.
pub fn controller() -> AbortController {
    AbortController::new()
}

/// Fires `controller` as a cancel.
pub fn cancel(controller: &AbortController) {
    controller.abort(AbortReason::Cancel { reason: None });
}

/// A signal that has already fired.
pub fn cancelled() -> AbortSignal {
    let controller = controller();
    cancel(&controller);
    controller.signal()
}
