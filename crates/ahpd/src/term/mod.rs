//! The terminal client: `ahpd run`, `ahpd chat` and `ahpd sessions`.
//!
//! It is an ordinary AHP client built on the official `ahp` client and reducers, so it sees a
//! session exactly as an editor does. It talks to the daemon running for this configuration
//! folder, or, when none answers, to a host it builds inside its own process for as long as the
//! command runs, through the host crate's in-memory connection. Either way the same protocol
//! code runs.

mod approve;
mod attach;
mod chat;
mod connect;
pub mod conversation;
mod history;
mod markdown;
mod out;
mod questions;
mod render;
mod run;
mod screen;
mod sessions;

use std::path::PathBuf;

pub use chat::chat;
pub use connect::{Conn, Target, connect, runtime, work_dir};
pub use run::run;
pub use screen::{ColorChoice, clean, clean_line};
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
#[command(after_help = RUN_AFTER)]
pub struct RunOpts {
    /// The prompt; `-` or none reads it from standard input. Piped input given with a prompt
    /// is sent after it as context; `@path` in the prompt attaches that file.
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
    /// Approve every tool call without asking (questions are still asked, never answered).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Print every action of the session and its chat as one JSON object per line, then a
    /// `{"type": "result", ...}` line (see docs/scripting.md).
    #[arg(long)]
    pub json: bool,
    /// Continue this session (a URI from `ahpd sessions`) instead of starting one.
    #[arg(long, value_name = "URI", conflicts_with_all = ["continue_last", "last"])]
    pub session: Option<String>,
    /// Continue the last session of this folder.
    #[arg(long = "continue", short = 'c', conflicts_with = "last")]
    pub continue_last: bool,
    /// Continue the last session, in whatever folder.
    #[arg(long)]
    pub last: bool,
    /// Attach an image (PNG, JPEG, GIF or WebP); repeatable.
    #[arg(long = "image", short = 'i', value_name = "FILE")]
    pub images: Vec<PathBuf>,
    /// Write the reply's final message to this file too.
    #[arg(long = "output-last-message", short = 'o', value_name = "FILE")]
    pub output_last_message: Option<PathBuf>,
    /// Leave out the diffs of the edits that ran.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// When to style the output [default: auto, which honours NO_COLOR].
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// Show the model's reasoning, dimmed, on standard error.
    #[arg(long)]
    pub show_reasoning: bool,
    /// Run the session in a machine: a disposable one of this `@ahpd/computer` profile
    /// (`disposable:<profile>` and `computer://<id>` are taken as they are).
    #[arg(long, value_name = "PROFILE", conflicts_with_all = ["session", "continue_last", "last"])]
    pub machine: Option<String>,
    /// Keep the disposable machine this command's own host made when it ends (a daemon's go
    /// after their delay anyway).
    #[arg(long)]
    pub keep: bool,
    /// Run the host in this process even when a daemon runs.
    #[arg(long)]
    pub in_process: bool,
}

const RUN_AFTER: &str = "\
Approvals are asked on the terminal: y allows the call once, a allows what the question names
for the rest of the session (a command's leading words, a file tool's folder, or the tool), n
denies it and asks for a reason the model reads, v shows an input too long to show whole.
Questions from the agent are asked on the terminal too; --yes never answers them.

Exit codes: 0 the turn completed; 1 it failed, or a call was denied because standard input is
not a terminal; 2 a usage error; 3 the agent asked a question and no terminal could answer
(it was told nobody is there and the turn went on); 130 the turn was stopped (Ctrl-C).";

/// `ahpd chat`.
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = CHAT_AFTER)]
pub struct ChatOpts {
    /// Continue this session instead of starting one.
    #[arg(long, value_name = "URI", conflicts_with_all = ["continue_last", "last"])]
    pub session: Option<String>,
    /// Continue the last session of this folder.
    #[arg(long = "continue", short = 'c', conflicts_with = "last")]
    pub continue_last: bool,
    /// Continue the last session, in whatever folder.
    #[arg(long)]
    pub last: bool,
    /// The session's working folder [default: the current folder].
    #[arg(long, value_name = "DIR")]
    pub path: Option<PathBuf>,
    /// The model, as `<provider>/<model>` [default: the configured one].
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// The permission mode [default: auto].
    #[arg(long, value_name = "MODE", value_parser = MODES)]
    pub mode: Option<String>,
    /// Leave out the diffs of the edits that ran.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// When to style the output [default: auto, which honours NO_COLOR].
    #[arg(long, value_name = "WHEN", value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
    /// Show the model's reasoning, dimmed.
    #[arg(long)]
    pub show_reasoning: bool,
    /// Run the session in a machine: a disposable one of this `@ahpd/computer` profile
    /// (`disposable:<profile>` and `computer://<id>` are taken as they are).
    #[arg(long, value_name = "PROFILE", conflicts_with_all = ["session", "continue_last", "last"])]
    pub machine: Option<String>,
    /// Keep the disposable machine this command's own host made when it ends (a daemon's go
    /// after their delay anyway).
    #[arg(long)]
    pub keep: bool,
    /// Run the host in this process even when a daemon runs.
    #[arg(long)]
    pub in_process: bool,
}

const CHAT_AFTER: &str = "\
A line starts a turn; typed while one runs, it steers it. Ctrl-C stops the running turn (a
second one leaves); at the prompt it clears the line. @path attaches a file (Tab completes
paths and /commands). /help lists the commands. History is kept in chat_history beside the
configuration.";

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
