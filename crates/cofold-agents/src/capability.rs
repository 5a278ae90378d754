//! Capabilities: named bundles of tools and one instructions section, resolved per run into the
//! request's tool list and system prompt.

use crate::error::{AgentError, ErrorCode};
use crate::tool::{AbortSignal, KvScopes, Tool};
use async_trait::async_trait;
use serde_json::json;
use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

/// What a capability is given when a run resolves it.
#[derive(Debug, Clone)]
pub struct CapabilityArgs {
    /// The agent id.
    pub agent_id: String,
    /// The session id.
    pub session_id: String,
    /// The run id.
    pub run_id: String,
    /// The session's workspace; a capability falls back to the current directory without one.
    pub workspace: Option<String>,
    /// Key-value handles.
    pub kv: KvScopes,
    /// Fires when the run is cancelled.
    pub signal: AbortSignal,
}

/// Why a capability could not give its tools or instructions for a run; the run fails
/// `capability_error` with this message after the capability's id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct CapabilityError {
    /// One sentence saying what went wrong.
    pub message: String,
}

impl From<String> for CapabilityError {
    fn from(message: String) -> CapabilityError {
        CapabilityError { message }
    }
}

impl From<&str> for CapabilityError {
    fn from(message: &str) -> CapabilityError {
        CapabilityError {
            message: message.to_owned(),
        }
    }
}

/// A bundle of tools and instructions, built per run from the run's arguments.
#[async_trait]
pub trait Capability: Send + Sync {
    /// The id: names the instructions section and becomes the `source` of its tools.
    fn id(&self) -> &str;

    /// The tools for this run.
    async fn tools(&self, args: &CapabilityArgs) -> Result<Vec<Tool>, CapabilityError> {
        let _ = args;
        Ok(vec![])
    }

    /// The instructions section for this run, if any.
    async fn instructions(&self, args: &CapabilityArgs) -> Result<Option<String>, CapabilityError> {
        let _ = args;
        Ok(None)
    }
}

/// A capability as an agent holds it, with the names of tools to leave out.
#[derive(Clone)]
pub struct CapabilityEntry {
    /// The capability.
    pub capability: Arc<dyn Capability>,
    /// Tool names to drop (unknown names are ignored).
    pub exclude: Vec<String>,
}

impl fmt::Debug for CapabilityEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CapabilityEntry")
            .field("id", &self.capability.id())
            .field("exclude", &self.exclude)
            .finish()
    }
}

/// The result of resolving an agent's capabilities for one run.
#[derive(Debug, Clone)]
pub struct ResolvedCapabilities {
    /// The system prompt: the agent's instructions, then each section, joined by a blank line.
    pub instructions: String,
    /// Agent tools in declaration order, then capability tools in capability order.
    pub tools: Vec<Tool>,
}

/// Resolves capabilities in order: each one's tools then instructions; excluded tools dropped; a
/// kept tool whose name is taken fails `invalid_options`
/// (`capability "<id>" contributes a duplicate tool "<name>"`); a capability's `Err` fails
/// `capability_error` (`capability "<id>": <error>`, detail `{ "capability": "<id>" }`).
pub async fn resolve_capabilities(
    instructions: &str,
    agent_tools: &[Tool],
    entries: &[CapabilityEntry],
    args: &CapabilityArgs,
) -> Result<ResolvedCapabilities, AgentError> {
    let mut tools: Vec<Tool> = agent_tools.to_vec();
    let mut names: HashSet<String> = tools.iter().map(|t| t.name().to_owned()).collect();
    let mut sections = Vec::new();
    for entry in entries {
        let id = entry.capability.id();
        let failed = |error: CapabilityError| {
            AgentError::new(
                ErrorCode::CapabilityError,
                format!("capability \"{id}\": {error}"),
            )
            .with_detail(json!({ "capability": id }))
        };
        let contributed = entry.capability.tools(args).await.map_err(failed)?;
        let text = entry.capability.instructions(args).await.map_err(failed)?;
        for tool in contributed {
            if entry.exclude.iter().any(|name| name == tool.name()) {
                continue;
            }
            if !names.insert(tool.name().to_owned()) {
                return Err(AgentError::invalid_options(format!(
                    "capability \"{id}\" contributes a duplicate tool \"{}\"",
                    tool.name()
                ))
                .with_detail(json!({ "capability": id, "tool": tool.name() })));
            }
            tools.push(tool.with_source(id));
        }
        if let Some(text) = text
            && !text.trim().is_empty()
        {
            sections.push(format!("## {id}\n{}", text.trim()));
        }
    }
    Ok(ResolvedCapabilities {
        instructions: system_prompt(instructions, &sections),
        tools,
    })
}

/// The agent's instructions followed by the sections, joined by `\n\n`.
pub fn system_prompt(instructions: &str, sections: &[String]) -> String {
    std::iter::once(instructions.to_owned())
        .chain(sections.iter().cloned())
        .collect::<Vec<_>>()
        .join("\n\n")
}
