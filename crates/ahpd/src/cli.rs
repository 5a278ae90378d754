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
    /// The configured MCP servers and, while the daemon runs, their state and tool counts.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
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
