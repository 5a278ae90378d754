//! The `acp` engine of ahpd (plugin `@ahpd/agent-acp`): agents that speak the Agent Client
//! Protocol (Gemini CLI, opencode, goose, Copilot, Cursor, Qwen Code, Codex and Claude through
//! their adapters, Mistral Vibe, fast-agent, or any command) served as AHP sessions, so several
//! clients watch one session, any of them answers its permission questions, and the session
//! reads back after a daemon restart.
//!
//! # Shape
//!
//! - [`mod@plugin`]: the plugin and its engine; a record names a preset or a command.
//! - [`presets`]: the well-known agents, with the variables that keep each one's state in the
//!   session's state folder and turn its self-update off.
//! - `agent` and `session`: one child per chat, started with the chat's first turn in its own
//!   process group and killed with it when the chat closes; the ACP connection runs over its
//!   pipes (`connection`), and `mapping` turns its updates into chat actions. `launch` holds
//!   what a record's sessions share to start their agents.
//! - `store`: the host's own record of each conversation's turns.
//!
//! Depends on the SDK and never on cofold.

pub mod agent;
pub mod plugin;
pub mod presets;
pub mod record;

mod child;
mod connection;
mod env;
mod launch;
mod mapping;
mod session;
mod store;
mod text;

pub use plugin::{AcpEngine, AcpPlugin, ENGINE, PLUGIN};

/// The plugin, for the daemon's table of compiled-in plugins.
pub fn plugin() -> AcpPlugin {
    AcpPlugin
}
