//! Building a turn: its settings, the tools it offers besides the agent's own (the
//! embedder's host tools, the clients' tools, the session's MCP servers' tools), the run's
//! options and the mapping of its events.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use ahpd_sdk::TurnRequest;
use cofold_agents::run::RunOptions;
use cofold_agents::tool::Tool;

use super::{Core, lock};
use crate::build::{TurnExtras, TurnSettings};
use crate::client_tools;
use crate::edits::{EditHooks, OpenEdits};
use crate::turns::TurnMapper;

/// A turn's agent, built and ready to run.
pub(super) struct Prepared {
    pub(super) built: crate::build::TurnAgent,
    pub(super) options: RunOptions,
    pub(super) mapper: TurnMapper,
    pub(super) edits: Option<OpenEdits>,
}

/// The tools a turn offers besides the agent's own, and the names the mapper shows them by.
struct Extra {
    tools: Vec<Tool>,
    /// Every name taken, so the agent's own tools yield to none of these.
    taken: Vec<String>,
    /// A client tool's offered name → the client that runs it.
    client_names: HashMap<String, String>,
    /// A host or MCP tool's offered name → the name shown for it.
    shown: HashMap<String, String>,
    /// The tools the person approved in advance.
    approved: Vec<String>,
}

impl Core {
    /// Where pasted attachments of this session's chats are written.
    pub(super) fn attachments_dir(&self) -> PathBuf {
        self.agent
            .env
            .home
            .join(".copilot")
            .join("chats")
            .join(crate::scratch::encode_scratch_segment(&self.session_id))
            .join("attachments")
    }

    /// The embedder's host tools (when the record allows them), the clients' tools and the
    /// ready MCP servers' tools, each under a name nothing before it took.
    fn extra_tools(&self, turn: &TurnRequest) -> Extra {
        let mut tools = Vec::new();
        let mut taken: Vec<String> = Vec::new();
        let host_tools: &[crate::host_tools::HostTool] = if self.agent.options.host_tools {
            &self.agent.embedder.host_tools
        } else {
            &[]
        };
        for tool in host_tools {
            if let Some(wrapped) =
                crate::host_tools::wrap(tool, self.ctx.clone(), &turn.turn_id, &self.workspace)
            {
                taken.push(wrapped.name().to_owned());
                tools.push(wrapped);
            }
        }
        let mut client_names = HashMap::new();
        for (client_id, definition) in self.ctx.client_tools() {
            if let Some(tool) =
                client_tools::client_tool(self.ctx.clone(), &turn.turn_id, &client_id, &definition)
            {
                client_names.insert(tool.name().to_owned(), client_id.clone());
                tools.push(tool);
            }
        }
        taken.extend(client_names.keys().cloned());
        let mut shown = crate::host_tools::display_names(host_tools);
        let mut approved = Vec::new();
        if let Some(mcp) = self.mcp.get() {
            for offered in mcp.tools(&taken, &self.attachments_dir()) {
                let name = offered.tool.name().to_owned();
                taken.push(name.clone());
                if offered.approved {
                    approved.push(name.clone());
                }
                shown.insert(name, offered.shown);
                tools.push(offered.tool);
            }
        }
        Extra {
            tools,
            taken,
            client_names,
            shown,
            approved,
        }
    }

    /// The capability that reads the project's instruction files when the run starts and names
    /// them in the session's `_meta` whenever the list changes.
    fn project_instructions(
        self: &Arc<Self>,
        turn_id: &str,
    ) -> Arc<dyn cofold_agents::capability::Capability> {
        let sources = self.project.sources(
            &self.agent.embedder.project,
            &self.workspace,
            &self.ctx,
            turn_id,
        );
        let core = Arc::downgrade(self);
        let observer = Arc::new(move |loaded: &cofold_tools::project::Loaded| {
            if let Some(core) = core.upgrade() {
                // A session that never read an instruction file says nothing about them.
                let nothing = loaded.files.is_empty() && loaded.withheld.is_empty();
                if nothing && !lock(&core.meta).contains_key(crate::project::META_KEY) {
                    return;
                }
                core.set_meta(crate::project::META_KEY, crate::project::meta_value(loaded));
            }
        });
        Arc::new(cofold_tools::project::ProjectInstructions::new(sources).observed(observer))
    }

    /// The recorder of the turn's tool calls: each recorded change is published at once.
    fn recorder(self: &Arc<Self>, turn_id: &str) -> cofold_changes::TurnRecorder {
        let core = Arc::downgrade(self);
        self.changes.recorder(
            turn_id,
            Arc::new(move |turn: &str| {
                if let Some(core) = core.upgrade() {
                    core.changes_published(turn);
                }
            }),
        )
    }

    /// The turn's and the session's changesets and `_meta` after a change.
    pub(crate) fn changes_published(&self, turn: &str) {
        // Advertised with the first change, so a session that changes nothing shows no
        // changesets.
        self.changes.advertise();
        self.changes.publish(turn);
        self.set_meta(crate::changes::META_KEY, self.changes.meta());
    }

    /// Sets one key of the session's `_meta`, saying it only when its value changed.
    pub(crate) fn set_meta(&self, key: &str, value: serde_json::Value) {
        let mut meta = lock(&self.meta);
        if meta.get(key) == Some(&value) {
            return;
        }
        meta.insert(key.to_owned(), value);
        self.ctx
            .emit(ahp_types::actions::StateAction::SessionMetaChanged(
                ahp_types::actions::SessionMetaChangedAction {
                    meta: Some(meta.clone()),
                },
            ));
    }

    /// Builds the turn's agent, its run's options and the mapping of its events.
    pub(super) fn prepare(self: &Arc<Self>, turn: &TurnRequest) -> Result<Prepared, String> {
        let mut settings = lock(&self.settings).clone();
        for (k, v) in &turn.settings {
            settings.insert(k.clone(), v.clone());
        }
        let values = TurnSettings::read(
            &settings,
            turn.message.model.as_ref(),
            &self.agent,
            &self.copapo,
        );
        let agent_endpoint = self.agent.agent_endpoint(&self.copapo);
        let resource = self
            .agent
            .options
            .resource
            .clone()
            .unwrap_or_else(|| crate::models::resource_of(agent_endpoint.as_deref()));
        let credential = self
            .ctx
            .credential(&resource)
            .map(|s| s.expose().to_owned());
        let extra = self.extra_tools(turn);
        let edits = self
            .agent
            .embedder
            .on_file_edit
            .clone()
            .map(|observer| OpenEdits::new(&turn.turn_id, observer));
        let hooks = edits.clone().map(|edits| {
            Arc::new(EditHooks {
                edits,
                workspace: self.workspace.clone(),
            }) as Arc<dyn cofold_agents::hooks::Hooks>
        });
        let built = self
            .agent
            .turn_agent(
                &values,
                &self.copapo,
                &self.workspace,
                credential,
                TurnExtras {
                    taken_names: extra.taken,
                    hooks,
                    tools: extra.tools,
                    capabilities: vec![self.project_instructions(&turn.turn_id)],
                    recorder: Some(self.recorder(&turn.turn_id)),
                    approved: extra.approved,
                },
            )
            .map_err(|e| e.to_string())?;
        let input =
            crate::attachments::input_of(&turn.message, built.images, &self.attachments_dir())
                .map_err(|e| format!("{}: {e}", self.agent.id))?;
        let mut options = RunOptions::new(self.backend_id.clone(), input);
        options.workspace = Some(self.workspace.to_string_lossy().into_owned());
        options.model = (!built.reference.is_empty()).then(|| built.reference.clone());
        options.message_id = Some(turn.turn_id.clone());
        let mut mapper = TurnMapper::new(
            &turn.turn_id,
            self.workspace.clone(),
            built.memory_dir.clone(),
            options.model.clone(),
        );
        mapper.set_client_tools(extra.client_names);
        mapper.set_host_tools(extra.shown);
        Ok(Prepared {
            built,
            options,
            mapper,
            edits,
        })
    }
}
