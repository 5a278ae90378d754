//! The command line: the foreground daemon's options and the subcommands.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub use crate::args::{PluginCommand, RunArgs, VaultCommand};

/// The `--version` line: the crate version and the AHP versions the host speaks.
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (AHP 1.0.0, 0.9.0)");

/// Serve agent sessions on this machine over the Agent Host Protocol.
#[derive(Debug, Parser)]
#[command(
    name = "ahpd",
    version = VERSION,
    about,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    /// Read only this configuration file (it must exist); its folder holds the vault and records.
    #[arg(long, global = true, value_name = "PATH")]
    pub config_file: Option<PathBuf>,

    #[command(flatten)]
    pub run: RunArgs,

    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon detached, logging to daemon.log beside the configuration.
    Start(RunArgs),
    /// Stop the detached daemon.
    Stop,
    /// Say whether the detached daemon runs and answers (exit 3 when it does not run).
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop the detached daemon and start it again with the same command line.
    Restart {
        /// Restart even while a turn runs.
        #[arg(long)]
        force: bool,
    },
    /// Print the `chat.remoteAgentHosts` entry for VS Code's settings (address, name,
    /// connectionToken), making the token file when it does not exist yet.
    Token {
        /// Print only the address with `?tkn=`, for clients that take one URL.
        #[arg(long)]
        url: bool,
    },
    /// Show the files read and every effective value with its source.
    Config {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List, enable, disable and configure the built-in plugins.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Keep secrets in vault.json; values are read from standard input only.
    #[command(subcommand)]
    Vault(VaultCommand),
    /// MCP servers.
    #[command(subcommand)]
    Mcp(McpCommand),
    /// Ask the agent once and stream the reply (a daemon's, or a host started for the turn).
    Run(crate::term::RunOpts),
    /// Talk with the agent in a session, turn after turn.
    Chat(crate::term::ChatOpts),
    /// List, show or delete the stored sessions.
    Sessions(crate::term::SessionsOpts),
    /// Serve the daemon's sessions to an editor over the Agent Client Protocol on standard
    /// input and output (Zed, JetBrains, Neovim; see docs/editors.md).
    Acp(crate::acp::AcpOpts),
    /// Undo (or redo) what a session's turn changed in its folder; a file changed since by
    /// anyone else is left as it is and named.
    Undo(crate::undo::UndoOpts),
    /// List, stop and remove this daemon's machines (`@ahpd/computer`).
    #[command(subcommand)]
    Machines(crate::machine_commands::MachinesCommand),
    /// A machine's main process: reaps orphans and exits on SIGTERM.
    #[command(hide = true)]
    MachineInit,
    /// Print a shell completion script.
    #[command(alias = "completions")]
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `ahpd mcp …`.
#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// The configured MCP servers and, while the daemon runs, their state and tool counts; an
    /// entry that cannot be used is listed as failed with its reason.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Add a server to the configuration file, like `claude mcp add`:
    /// `ahpd mcp add time -- uvx mcp-server-time`,
    /// `ahpd mcp add --transport http notion https://mcp.notion.com/mcp`,
    /// `ahpd mcp add gh -e 'GITHUB_TOKEN=${GITHUB_TOKEN}' -- npx -y @modelcontextprotocol/server-github`.
    /// Strings may hold `${VAR}` and `${VAR:-default}`, expanded from the daemon's
    /// environment when the server starts.
    #[command(verbatim_doc_comment)]
    Add(McpAddArgs),
    /// Remove a server from the configuration file.
    Remove {
        /// The server's name.
        name: String,
    },
    /// Show one server: its entry (names of variables and headers, never their values) and,
    /// while the daemon runs, its state.
    Get {
        /// The server's name.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Let a disabled server start again (removes its `"enabled": false`).
    Enable {
        /// The server's name.
        name: String,
    },
    /// Keep a server in the configuration without starting it (`"enabled": false`).
    Disable {
        /// The server's name.
        name: String,
    },
    /// Add the servers of a Claude Code `.mcp.json` or settings file (`mcpServers`) or of VS
    /// Code's `mcp.json` (`servers`); names already configured are left as they are.
    Import {
        /// The file to read.
        file: PathBuf,
    },
}

/// `ahpd mcp add`.
#[derive(Debug, clap::Args)]
pub struct McpAddArgs {
    /// `stdio` (a command, the default), `http` (a streamable HTTP URL) or `sse` (the older
    /// HTTP+SSE transport, which this daemon cannot reach: the server is kept but fails).
    #[arg(short = 't', long, value_name = "KIND", value_parser = ["stdio", "http", "sse"])]
    pub transport: Option<String>,
    /// A variable of a stdio server, `KEY=value` (repeatable).
    #[arg(short = 'e', long = "env", value_name = "KEY=VALUE")]
    pub env: Vec<String>,
    /// A header of an HTTP server, `"Name: value"` (repeatable).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub header: Vec<String>,
    /// Run every tool of the server without asking (its read-only marks count too); modes that
    /// refuse changes still refuse them.
    #[arg(long)]
    pub trust: bool,
    /// Run this tool without asking (repeatable).
    #[arg(long, value_name = "TOOL")]
    pub allow: Vec<String>,
    /// Start the server with the daemon rather than with the first session.
    #[arg(long)]
    pub eager: bool,
    /// The whole entry as JSON instead (`claude mcp add-json`), e.g.
    /// `{"type":"http","url":"https://x/mcp","headers":{"Authorization":"Bearer ${TOKEN}"}}`.
    #[arg(long, value_name = "JSON", conflicts_with_all = ["transport", "env", "header", "command"])]
    pub json: Option<String>,
    /// The server's name (letters, digits, `-` and `_`; it prefixes its tools' names).
    pub name: String,
    /// The command and its arguments (stdio), or the URL (http, sse).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND_OR_URL"
    )]
    pub command: Vec<String>,
}

/// `ahpd completion <shell>`.
pub fn completion(shell: clap_complete::Shell) {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "ahpd", &mut std::io::stdout());
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn two_token_options_are_refused() {
        let err = Cli::try_parse_from([
            "ahpd",
            "--connection-token",
            "a",
            "--without-connection-token",
        ])
        .expect_err("conflict");
        assert_eq!(err.exit_code(), 2);
    }

    #[test]
    fn delta_window_is_bounded() {
        let err = Cli::try_parse_from(["ahpd", "--delta-window-ms", "20000"]).expect_err("range");
        assert!(err.to_string().contains("--delta-window-ms"));
    }
}
