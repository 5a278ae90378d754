//! Tools the embedder of the engine registers in code: the host's own
//! tools. Each is wrapped as a cofold tool for every turn: its description (else title, else
//! name), its input schema (an empty object schema when none), its declared effects and its run.
//! A run that fails or panics becomes a failed result the model reads. A run may put questions
//! to a person through the host while it works, and reads the answers itself.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use ahp_types::state::ChatInputResponseKind;
use ahpd_sdk::SessionContext;
use cofold_agents::tool::{Tool, ToolDef, ToolEffects, ToolError, ToolOutput, handler_fn};
use futures::FutureExt;
use serde_json::{Map, Value, json};

use crate::asks;

pub use cofold_agents::question::{Question as HostQuestion, QuestionOption as HostQuestionOption};

/// What a host tool's run hands back when it cannot give a result: one sentence the model reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct HostToolError(pub String);

impl HostToolError {
    /// A failure with this sentence.
    pub fn new(message: impl Into<String>) -> HostToolError {
        HostToolError(message.into())
    }
}

/// The future a host tool's run returns.
pub type HostToolFuture = Pin<Box<dyn Future<Output = Result<String, HostToolError>> + Send>>;

/// A host tool's run: the validated input and the call's context, giving the text the model
/// reads or a failure.
pub type HostToolRun = Arc<dyn Fn(Value, HostToolContext) -> HostToolFuture + Send + Sync>;

/// From a call's input to the absolute path of the file it writes.
pub type HostWritesFn = Arc<dyn Fn(&Value) -> Option<PathBuf> + Send + Sync>;

/// A tool of the host, registered with [`crate::Embedder::host_tool`].
///
/// ```
/// use ahpd_agent_cofold::{Embedder, HostTool};
/// let lookup = HostTool::new("lookup", |input, _ctx| async move {
///     Ok(format!("found {}", input["q"].as_str().unwrap_or("")))
/// })
/// .description("Looks a word up in the team's glossary.")
/// .input_schema(serde_json::json!({
///     "type": "object",
///     "properties": { "q": { "type": "string" } },
///     "required": ["q"]
/// }));
/// let embedder = Embedder::default().host_tool(lookup);
/// assert_eq!(embedder.host_tools.len(), 1);
/// ```
#[derive(Clone)]
pub struct HostTool {
    name: String,
    title: Option<String>,
    description: Option<String>,
    input_schema: Option<Value>,
    reads: bool,
    writes: Option<HostWritesFn>,
    network: bool,
    destructive: bool,
    run: HostToolRun,
}

impl std::fmt::Debug for HostTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostTool")
            .field("name", &self.name)
            .field("title", &self.title)
            .field("reads", &self.reads)
            .field("writes", &self.writes.is_some())
            .field("network", &self.network)
            .field("destructive", &self.destructive)
            .finish_non_exhaustive()
    }
}

impl HostTool {
    /// A tool called `name` (the name the model calls it by, `[A-Za-z0-9_-]{1,64}`) whose
    /// calls run `run`. It declares no effects until told otherwise.
    pub fn new<F, Fut>(name: impl Into<String>, run: F) -> HostTool
    where
        F: Fn(Value, HostToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, HostToolError>> + Send + 'static,
    {
        HostTool {
            name: name.into(),
            title: None,
            description: None,
            input_schema: None,
            reads: false,
            writes: None,
            network: false,
            destructive: false,
            run: Arc::new(move |input, ctx| Box::pin(run(input, ctx))),
        }
    }

    /// The name shown to people beside the call.
    pub fn title(mut self, title: impl Into<String>) -> HostTool {
        self.title = Some(title.into());
        self
    }

    /// What the tool does, for the model.
    pub fn description(mut self, description: impl Into<String>) -> HostTool {
        self.description = Some(description.into());
        self
    }

    /// The JSON Schema of its input (an object schema).
    pub fn input_schema(mut self, schema: Value) -> HostTool {
        self.input_schema = Some(schema);
        self
    }

    /// Declares that calls read something named by the input's `path` (or `cwd`).
    pub fn reads(mut self) -> HostTool {
        self.reads = true;
        self
    }

    /// Declares that calls write the file `path` gives for their input.
    pub fn writes(
        mut self,
        path: impl Fn(&Value) -> Option<PathBuf> + Send + Sync + 'static,
    ) -> HostTool {
        self.writes = Some(Arc::new(path));
        self
    }

    /// Declares that calls talk to the network.
    pub fn network(mut self) -> HostTool {
        self.network = true;
        self
    }

    /// Declares that calls may change or destroy something.
    pub fn destructive(mut self) -> HostTool {
        self.destructive = true;
        self
    }

    /// The name the model calls it by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What a call of it is shown as beside its title: the title, else the name.
    pub fn display_name(&self) -> &str {
        self.title.as_deref().unwrap_or(&self.name)
    }
}

/// What a host tool's run is given besides its input.
#[derive(Clone)]
pub struct HostToolContext {
    ctx: SessionContext,
    turn_id: String,
    call_id: String,
    workspace: PathBuf,
    signal: cofold_agents::tool::AbortSignal,
    asked: Arc<AtomicU32>,
}

impl HostToolContext {
    /// The turn the call belongs to.
    pub fn turn_id(&self) -> &str {
        &self.turn_id
    }

    /// The call's id.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The session's workspace.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// Whether the turn was stopped; a long run should give up once it is.
    pub fn is_stopped(&self) -> bool {
        self.signal.is_aborted()
    }

    /// Resolves when the turn is stopped.
    pub async fn stopped(&self) {
        self.signal.cancelled().await;
    }

    /// Puts questions to a person through the host and waits for the answers: an object of
    /// question id to the answer (a string, or a list of strings for a multi-select question;
    /// a skipped question is left out). A person declining gives the error
    /// `The person declined this action`; a stopped turn, `The turn was stopped`.
    pub async fn ask(
        &self,
        questions: Vec<HostQuestion>,
    ) -> Result<Map<String, Value>, HostToolError> {
        let n = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let request_id = format!("{}-ask-{n}", self.call_id);
        let request = asks::input_request(&request_id, &questions);
        let outcome = tokio::select! {
            outcome = self.ctx.ask_input(&self.turn_id, request) => outcome,
            () = self.signal.cancelled() => return Err(HostToolError::new(STOPPED)),
        };
        match outcome.response {
            ChatInputResponseKind::Accept => match asks::answers_value(outcome.answers.as_ref()) {
                Value::Object(map) => Ok(map),
                _ => Ok(Map::new()),
            },
            ChatInputResponseKind::Decline => Err(HostToolError::new(asks::DECLINED)),
            _ => Err(HostToolError::new(STOPPED)),
        }
    }
}

/// What a question cut short by a stop reads.
const STOPPED: &str = "The turn was stopped";

/// The cofold tool wrapping one host tool for one turn, or `None` when cofold refuses its
/// definition (a name outside the allowed pattern, a schema that is not an object schema).
pub(crate) fn wrap(
    tool: &HostTool,
    ctx: SessionContext,
    turn_id: &str,
    workspace: &Path,
) -> Option<Tool> {
    let description = tool
        .description
        .clone()
        .or_else(|| tool.title.clone())
        .filter(|d| !d.trim().is_empty())
        .unwrap_or_else(|| tool.name.clone());
    let schema = tool
        .input_schema
        .clone()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({ "type": "object", "properties": {} }));
    let run = tool.run.clone();
    let turn_id = turn_id.to_owned();
    let workspace = workspace.to_path_buf();
    let handler = handler_fn(move |input: Value, tcx| {
        let context = HostToolContext {
            ctx: ctx.clone(),
            turn_id: turn_id.clone(),
            call_id: tcx.call_id.clone(),
            workspace: workspace.clone(),
            signal: tcx.signal.clone(),
            asked: Arc::default(),
        };
        let future = std::panic::AssertUnwindSafe(run(input, context)).catch_unwind();
        async move {
            match future.await {
                Ok(Ok(content)) => Ok(ToolOutput {
                    content,
                    detail: None,
                }),
                Ok(Err(error)) if error.0.trim().is_empty() => {
                    Err(ToolError::failed("The tool failed"))
                }
                Ok(Err(error)) => Err(ToolError::failed(error.0)),
                // A panicking run is a failed call, never a failed turn.
                Err(panic) => Err(ToolError::failed(panic_text(panic.as_ref()))),
            }
        }
    });
    let mut def =
        ToolDef::new(tool.name.clone(), description, schema, handler).effects(ToolEffects {
            reads: tool.reads,
            writes: tool.writes.is_some(),
            network: tool.network,
            destructive: tool.destructive,
        });
    if let Some(writes) = tool.writes.clone() {
        def = def.writes(move |input| writes(input));
    }
    match Tool::new(def) {
        Ok(tool) => Some(tool),
        Err(error) => {
            tracing::warn!(tool = %tool.name, "a host tool is not offered: {}", error.message);
            None
        }
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    let detail = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned());
    match detail {
        Some(detail) => format!("The tool failed: {detail}"),
        None => "The tool failed".to_owned(),
    }
}

/// The host tools a turn offers, by name, with the name each is displayed under.
pub(crate) fn display_names(tools: &[HostTool]) -> HashMap<String, String> {
    tools
        .iter()
        .map(|t| (t.name.clone(), t.display_name().to_owned()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_name_is_the_title_else_the_name() {
        let plain = HostTool::new("lookup", |_, _| async { Ok(String::new()) });
        assert_eq!(plain.display_name(), "lookup");
        let titled = plain.clone().title("Look up");
        assert_eq!(titled.display_name(), "Look up");
        assert_eq!(display_names(&[titled])["lookup"], "Look up");
    }

    #[test]
    fn a_panic_reads_as_a_failure_sentence() {
        let text = panic_text(&"boom");
        assert_eq!(text, "The tool failed: boom");
        let text = panic_text(&7_u8);
        assert_eq!(text, "The tool failed");
    }
}
