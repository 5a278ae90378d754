//! The `cofold` engine of ahpd, registered by the plugin `@ahpd/agent-cofold`.
//!
//! One AHP chat is one cofold session: turns become runs of the cofold runtime, run events become
//! AHP actions, and approvals go through the host. See `PLUGINS.md` for the options and
//! `AGENT.md` for how the `Agent` and `Session` contracts are met.

mod actions;
mod agent;
mod approval_keys;
mod asks;
mod attachments;
mod build;
mod catalogue;
mod changes;
mod client_tools;
mod edits;
pub mod guard;
mod host_tools;
mod machine;
mod mcp;
mod models;
mod options;
mod plugin;
mod previews;
mod project;
mod readback;
mod schema_wording;
mod scratch;
mod session;
mod session_config;
mod transcript;
mod turn_facts;
mod turn_model;
mod turn_parts;
mod turns;

/// The per-call helper that contains commands and stdio servers, for the daemon's binary to run
/// and install (see `cofold_tools::shell::reaper`).
pub mod contain {
    pub use cofold_tools::shell::reaper::{Helper, install, installed, run};
}

pub use agent::{AgentBuildError, CofoldAgent, cofold_agent, cofold_agent_with};
pub use changes::{
    CONTENT_SCHEME, ContentProvider, META_KEY as CHANGES_META_KEY, REDO_ALL, REDO_FILE, UNDO_ALL,
    UNDO_FILE,
};
pub use host_tools::{HostQuestion, HostQuestionOption, HostTool, HostToolContext, HostToolError};
pub use models::{Copapo, KeySource, Shared, read_copapo};
pub use options::{
    CofoldOptions, EditObserver, EditPhase, Embedder, Environment, KeyFunction, OptionsError,
    options_schema, record_schema,
};
pub use plugin::{CofoldEngine, CofoldPlugin, plugin};
pub use project::{META_KEY as INSTRUCTIONS_META_KEY, ProjectSetup, TRUSTED_FILE};
pub use session::{CofoldSession, REPLACED};

/// The plugin's package name, as the upstream daemon names it.
pub const PLUGIN_NAME: &str = "@ahpd/agent-cofold";
/// The plugin's title.
pub const TITLE: &str = "Cofold";
/// The engine records name.
pub const ENGINE: &str = "cofold";
/// The name the daemon shares its MCP servers (an `ahpd_mcp::McpHub`) under.
pub const MCP_SERVICE: &str = "mcp";
/// The name the daemon shares the folders it serves (a `Vec<PathBuf>`) under: project
/// instructions inside them are read without asking.
pub const SERVED_SERVICE: &str = "served-paths";
