//! Recording as the tools run: a capability's tools wrapped so that each call that writes a
//! file inside the session's folder keeps the file's content first, and each command is
//! bracketed by two indexes of the folder. The wrap sits at execution, after any approval, so
//! the content kept is the one the tool replaced.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use cofold_agents::capability::{Capability, CapabilityArgs, CapabilityError};
use cofold_agents::tool::{Tool, ToolContext, ToolError, ToolHandler, ToolOutput};
use serde_json::Value;

use crate::journal::Journal;

/// The real form of `path`: its closest existing ancestor with links resolved, then the rest
/// as written (a file about to be created keeps its name).
pub fn real_path(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut at = path.to_path_buf();
    loop {
        if let Ok(real) = std::fs::canonicalize(&at) {
            return rest.iter().rev().fold(real, |p: PathBuf, n| p.join(n));
        }
        match (at.file_name().map(|n| n.to_owned()), at.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                at = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Called after every call that recorded a change, with the turn.
pub type OnChange = Arc<dyn Fn(&str) + Send + Sync>;

/// What one turn's wrapped tools share.
#[derive(Clone)]
pub struct TurnRecorder {
    /// The session's journal.
    pub journal: Arc<Mutex<Journal>>,
    /// The turn the calls belong to.
    pub turn: String,
    /// The session's folder, as a real path: only changes under it are recorded.
    pub root: PathBuf,
    /// Told after each call that changed something.
    pub on_change: Option<OnChange>,
}

fn lock(journal: &Mutex<Journal>) -> std::sync::MutexGuard<'_, Journal> {
    journal.lock().unwrap_or_else(|p| p.into_inner())
}

/// How a call is recorded.
enum Kind {
    /// It writes this file.
    Write(PathBuf),
    /// It may change anything in the folder.
    Command,
    /// It reads this file.
    Read(PathBuf),
    /// Nothing to record.
    Other,
}

struct Recording {
    inner: Arc<dyn ToolHandler>,
    tool: Tool,
    recorder: TurnRecorder,
}

impl Recording {
    fn kind(&self, input: &Value, workspace: Option<&str>) -> Kind {
        let name = self.tool.name();
        if name.starts_with("memory_") {
            return Kind::Other;
        }
        let base = workspace.map_or_else(|| self.recorder.root.clone(), PathBuf::from);
        if let Some(path) = self.tool.writes(input) {
            let real = real_path(&base.join(path));
            return if real.starts_with(&self.recorder.root) {
                Kind::Write(real)
            } else {
                Kind::Other
            };
        }
        if name == "read_file"
            && let Some(path) = input.get("path").and_then(Value::as_str)
        {
            let real = real_path(&base.join(path));
            if real.starts_with(&self.recorder.root) {
                return Kind::Read(real);
            }
            return Kind::Other;
        }
        let effects = self.tool.effects();
        if effects.writes && !self.tool.has_writes() {
            return Kind::Command;
        }
        Kind::Other
    }

    fn changed(&self) {
        if let Some(f) = &self.recorder.on_change {
            f(&self.recorder.turn);
        }
    }
}

#[async_trait]
impl ToolHandler for Recording {
    async fn execute(&self, input: Value, ctx: ToolContext) -> Result<ToolOutput, ToolError> {
        let kind = self.kind(&input, ctx.workspace.as_deref());
        let journal = self.recorder.journal.clone();
        let turn = self.recorder.turn.clone();
        let by = self.tool.name().to_owned();
        match kind {
            Kind::Other => self.inner.execute(input, ctx).await,
            Kind::Read(path) => {
                let out = self.inner.execute(input, ctx).await;
                if out.is_ok() {
                    let _ =
                        tokio::task::spawn_blocking(move || lock(&journal).note_read(&path)).await;
                }
                out
            }
            Kind::Write(path) => {
                let before = {
                    let (journal, path) = (journal.clone(), path.clone());
                    tokio::task::spawn_blocking(move || lock(&journal).capture(&path)).await
                };
                let out = self.inner.execute(input, ctx).await;
                match before {
                    Ok(Ok(before)) => {
                        let recorded = tokio::task::spawn_blocking(move || {
                            lock(&journal).record_write(&turn, &path, before, &by)
                        })
                        .await;
                        match recorded {
                            Ok(Err(e)) => tracing::warn!("a tool's change was not recorded: {e}"),
                            Err(e) => tracing::warn!("a tool's change was not recorded: {e}"),
                            Ok(Ok(())) => {}
                        }
                        self.changed();
                    }
                    Ok(Err(e)) => tracing::warn!("a tool's change was not recorded: {e}"),
                    Err(e) => tracing::warn!("a tool's change was not recorded: {e}"),
                }
                out
            }
            Kind::Command => {
                let root = self.recorder.root.clone();
                let before = {
                    let journal = journal.clone();
                    tokio::task::spawn_blocking(move || lock(&journal).index_before(&root)).await
                };
                let out = self.inner.execute(input, ctx).await;
                if let Ok(index) = before {
                    let recorded = tokio::task::spawn_blocking(move || {
                        lock(&journal).record_command(&turn, index, "command")
                    })
                    .await;
                    match recorded {
                        Ok(Ok(0)) => {}
                        Ok(Ok(_)) => self.changed(),
                        Ok(Err(e)) => tracing::warn!("a command's changes were not recorded: {e}"),
                        Err(e) => tracing::warn!("a command's changes were not recorded: {e}"),
                    }
                }
                out
            }
        }
    }
}

/// `tool` with its calls recorded by `recorder`.
pub fn recording_tool(tool: &Tool, recorder: &TurnRecorder) -> Tool {
    let mut def = tool.def().clone();
    def.handler = Arc::new(Recording {
        inner: def.handler.clone(),
        tool: tool.clone(),
        recorder: recorder.clone(),
    });
    match Tool::new(def) {
        Ok(wrapped) => wrapped.with_source(tool.source()),
        // The definition was accepted once; it cannot fail again, but the tool stays usable.
        Err(_) => tool.clone(),
    }
}

/// A capability whose tools are recorded.
pub struct Recorded {
    inner: Arc<dyn Capability>,
    recorder: TurnRecorder,
}

impl Recorded {
    /// `inner`'s tools, recorded by `recorder`.
    pub fn new(inner: Arc<dyn Capability>, recorder: TurnRecorder) -> Recorded {
        Recorded { inner, recorder }
    }
}

#[async_trait]
impl Capability for Recorded {
    fn id(&self) -> &str {
        self.inner.id()
    }

    async fn tools(&self, args: &CapabilityArgs) -> Result<Vec<Tool>, CapabilityError> {
        Ok(self
            .inner
            .tools(args)
            .await?
            .iter()
            .map(|t| recording_tool(t, &self.recorder))
            .collect())
    }

    async fn instructions(&self, args: &CapabilityArgs) -> Result<Option<String>, CapabilityError> {
        self.inner.instructions(args).await
    }
}
