//! The terminal client: `ahpd run`, `ahpd chat` and `ahpd sessions`.
//!
//! It is an ordinary AHP client built on the official `ahp` client and reducers, so it sees a
//! session exactly as an editor does. It talks to the daemon running for this configuration
//! folder, or, when none answers, to a host it builds inside its own process for as long as the
//! command runs, through the host crate's in-memory connection. Either way the same protocol
//! code runs.

mod approve;
mod chat;
mod connect;
pub mod conversation;
mod render;
mod run;
mod sessions;

use std::path::PathBuf;

pub use chat::chat;
pub use connect::{Conn, Target, connect, runtime, work_dir};
pub use run::run;
pub use sessions::sessions;

/// The permission modes `--mode` takes.
pub const MODES: [&str; 6] = [
    "auto",
    "default",
    "acceptEdits",
    "plan",
    "bypassPermissions",
    "dontAsk",
];

/// `ahpd run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunOpts {
    /// The prompt; `-` or none reads it from standard input.
    #[arg(value_name = "PROMPT")]
    pub prompt: Option<String>,
    /// The session's working folder [default: the current folder].
    #[arg(long, value_name = "DIR")]
    pub path: Option<PathBuf>,
    /// The model, as `<provider>/<model>` [default: the configured one].
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// The permission mode [default: auto].
    #[arg(long, value_name = "MODE", value_parser = MODES)]
    pub mode: Option<String>,
    /// Approve every tool call without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Print every action of the session and its chat as one JSON object per line.
    #[arg(long)]
    pub json: bool,
    /// Continue this session (a URI from `ahpd sessions`) instead of starting one.
    #[arg(long, value_name = "URI")]
    pub session: Option<String>,
    /// Show the model's reasoning, dimmed, on standard error.
    #[arg(long)]
    pub show_reasoning: bool,
    /// Run the host in this process even when a daemon runs.
    #[arg(long)]
    pub in_process: bool,
}

/// `ahpd chat`.
#[derive(Debug, Clone, clap::Args)]
pub struct ChatOpts {
    /// Continue this session instead of starting one.
    #[arg(long, value_name = "URI")]
    pub session: Option<String>,
    /// The session's working folder [default: the current folder].
    #[arg(long, value_name = "DIR")]
    pub path: Option<PathBuf>,
    /// The model, as `<provider>/<model>` [default: the configured one].
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// The permission mode [default: auto].
    #[arg(long, value_name = "MODE", value_parser = MODES)]
    pub mode: Option<String>,
    /// Show the model's reasoning, dimmed.
    #[arg(long)]
    pub show_reasoning: bool,
    /// Run the host in this process even when a daemon runs.
    #[arg(long)]
    pub in_process: bool,
}

/// `ahpd sessions`.
#[derive(Debug, Clone, clap::Args)]
pub struct SessionsOpts {
    #[command(subcommand)]
    pub action: Option<SessionsAction>,
    /// Print JSON.
    #[arg(long, global = true)]
    pub json: bool,
    /// Read the sessions through a host in this process even when a daemon runs.
    #[arg(long, global = true)]
    pub in_process: bool,
}

/// `ahpd sessions …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum SessionsAction {
    /// The stored sessions, the most recent first (the default).
    List,
    /// A session's transcript.
    Show {
        /// The session's URI.
        uri: String,
    },
    /// Delete a session and its stored conversation.
    Rm {
        /// The session's URI.
        uri: String,
    },
}
