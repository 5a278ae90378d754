//! Model Context Protocol servers for the daemon, built on the official Rust SDK (`rmcp`).
//!
//! [`spec`] reads and checks the `mcpServers` setting (Claude Code's and Codex's shapes); an
//! entry's `${VAR}` references and `$secret`s are worked out at each start ([`Launch`]). [`McpHub`] owns every server the daemon
//! runs: one connection per distinct entry, shared by every session that uses it, started when
//! the first such session starts (or with the daemon when the entry is `eager`), restarted with
//! backoff after it exits, and stopped with its whole process tree when nothing uses it or the
//! daemon stops. A [`Server`] reports its state and tools through a watch channel and makes
//! tool calls with a time limit and cancellation.
//!
//! The crate knows neither the Agent Host Protocol nor cofold: the engine turns servers into
//! tools and states into protocol actions.

mod call;
mod connect;
mod expand;
mod hub;
mod launch;
mod server;
pub mod spec;
mod tree;

pub use tree::contain_with;

use std::sync::Arc;

pub use call::{CallError, CallOutput, Image};
pub use connect::passes as passes_environment;
pub use hub::{McpHub, ServerReport};
pub use launch::{Launch, Target};
pub use server::{Lease, McpTool, Server, ServerState, Status};
pub use spec::{SecretValue, ServerSpec, Servers, SpecError, ToolFilter, Transport, Trust};

/// Answers a `$secret` reference with the secret's value, or one sentence saying why it cannot
/// (never quoting a value).
pub type SecretResolver = Arc<dyn Fn(&str) -> Result<String, String> + Send + Sync>;

/// `text` with every one of `hidden` replaced by `[secret]`: what a server or the SDK says may
/// repeat a value it was given.
pub(crate) fn redact(text: &str, hidden: &[String]) -> String {
    let mut out = text.to_owned();
    for h in hidden {
        // Short values (a "1", a "true") would blank ordinary words and hide nothing worth it.
        if h.len() >= 4 {
            out = out.replace(h.as_str(), "[secret]");
        }
    }
    out
}
