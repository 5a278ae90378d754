//! Edit notices: a `before` for each call that declares a write inside the
//! workspace, ahead of the call's start, and exactly one `after` for it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use cofold_agents::hooks::{AfterTool, BeforeTool, HookError, Hooks, RunInfo};
use cofold_agents::message::ToolCall;
use cofold_agents::tool::Tool;
use cofold_tools::paths::resolve_within;

use crate::options::{EditObserver, EditPhase};

/// The `before` notices still waiting for their `after`, by call id.
#[derive(Clone)]
pub(crate) struct OpenEdits {
    turn_id: String,
    observer: EditObserver,
    open: Arc<Mutex<HashMap<String, PathBuf>>>,
}

impl OpenEdits {
    pub(crate) fn new(turn_id: &str, observer: EditObserver) -> OpenEdits {
        OpenEdits {
            turn_id: turn_id.to_owned(),
            observer,
            open: Arc::default(),
        }
    }

    fn take(&self, call_id: Option<&str>) -> Vec<PathBuf> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        match call_id {
            Some(id) => open.remove(id).into_iter().collect(),
            None => open.drain().map(|(_, p)| p).collect(),
        }
    }

    /// Settles the call's `before` with its `after` (nothing when it has none open).
    pub(crate) fn after(&self, call_id: &str) {
        for path in self.take(Some(call_id)) {
            (self.observer)(&self.turn_id, &path, EditPhase::After);
        }
    }

    /// Settles every open edit (the run ended anywhere but at a pause).
    pub(crate) fn settle_all(&self) {
        for path in self.take(None) {
            (self.observer)(&self.turn_id, &path, EditPhase::After);
        }
    }
}

/// The hooks that raise the notices for one run.
pub(crate) struct EditHooks {
    pub(crate) edits: OpenEdits,
    pub(crate) workspace: PathBuf,
}

fn absolute(path: PathBuf, workspace: &Path) -> PathBuf {
    if path.is_absolute() {
        path
    } else {
        workspace.join(path)
    }
}

#[async_trait]
impl Hooks for EditHooks {
    async fn before_tool(
        &self,
        call: &ToolCall,
        tool: &Tool,
        _run: &RunInfo,
    ) -> Result<BeforeTool, HookError> {
        // Memory files live outside the workspace, so they never count as edits.
        let input = call.input.clone().unwrap_or(serde_json::Value::Null);
        if tool.name().starts_with("memory_") {
            return Ok(BeforeTool::Allow);
        }
        if let Some(path) = tool.writes(&input) {
            let path = absolute(path, &self.workspace);
            if resolve_within(&self.workspace, &path).inside {
                (self.edits.observer)(&self.edits.turn_id, &path, EditPhase::Before);
                self.edits
                    .open
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(call.call_id.clone(), path);
            }
        }
        Ok(BeforeTool::Allow)
    }

    async fn after_tool(
        &self,
        call: &ToolCall,
        _tool: &Tool,
        output: String,
        _is_error: bool,
        _run: &RunInfo,
    ) -> Result<AfterTool, HookError> {
        self.edits.after(&call.call_id);
        Ok(AfterTool::keep(output))
    }
}
