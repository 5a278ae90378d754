//! The command line: the foreground daemon's options and the subcommands.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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

/// The options of a daemon run (foreground, `start`).
#[derive(Debug, Clone, Default, Args)]
pub struct RunArgs {
    /// A folder to serve (repeatable); the first is the default directory [default: the home folder].
    #[arg(long = "path", value_name = "DIR")]
    pub paths: Vec<PathBuf>,

    /// Address or host name to bind [default: 127.0.0.1].
    #[arg(long, value_name = "ADDR")]
    pub host: Option<String>,

    /// Port to listen on; 0 picks a free port [default: 9187].
    #[arg(long, value_name = "N")]
    pub port: Option<u16>,

    /// A token clients present as `?tkn=` or `Authorization: Bearer`. Other users see a
    /// command line (`ps`): prefer `--connection-token-file` or `AHPD_CONNECTION_TOKEN`.
    /// [default: the `token` file in the configuration folder, made on first start]
    #[arg(long, value_name = "SECRET", group = "token")]
    pub connection_token: Option<String>,

    /// Read the token from this file, creating it with a fresh token when absent.
    #[arg(long, value_name = "PATH", group = "token")]
    pub connection_token_file: Option<PathBuf>,

    /// Run with no token: any local process (and, off loopback, anyone who can reach the port)
    /// can connect and run commands as you.
    #[arg(long, group = "token")]
    pub without_connection_token: bool,

    /// Serve one connection on standard input/output, one JSON message per line.
    #[arg(long)]
    pub stdio: bool,

    /// A plugin to run this time (repeatable); replaces the configuration file's list.
    #[arg(long = "plugin", value_name = "NAME", conflicts_with = "no_plugins")]
    pub plugins: Vec<String>,

    /// Load no plugin; the daemon starts with no agent.
    #[arg(long)]
    pub no_plugins: bool,

    /// Set one plugin option over the file's: `<plugin>.<key>[.<key>...]=<value>` (repeatable).
    #[arg(long = "plugin-option", value_name = "PLUGIN.KEY=VALUE")]
    pub plugin_options: Vec<String>,

    /// Delta coalescing window in milliseconds, 0 to 10000; 0 disables [default: 75].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub delta_window_ms: Option<u64>,

    /// Set by `ahpd start` on the detached child: start a new session and write `daemon.json`.
    #[arg(long, hide = true)]
    pub detached_child: bool,
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

/// `ahpd plugin …`.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Every built-in plugin and every configured name, with its state.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Enable a plugin in the base configuration file.
    Enable {
        /// The plugin's name.
        name: String,
    },
    /// Disable a plugin, keeping its options.
    Disable {
        /// The plugin's name.
        name: String,
    },
    /// Print a plugin's options, one option, or set one: `config <name> [<key> [<value>]]`,
    /// `config unset <name> <key>`.
    Config {
        /// `<name> [<key> [<value>]]` or `unset <name> <key>`.
        #[arg(num_args = 1..=3, value_name = "ARGS", allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Plugins are built in: enables a built-in plugin, or lists them.
    Install {
        /// The plugin's name.
        name: String,
    },
    /// Plugins are built in: points to `ahpd plugin disable`.
    Remove {
        /// The plugin's name.
        name: String,
    },
    /// Plugins are built in and update with ahpd itself.
    Update {
        /// Plugin names.
        names: Vec<String>,
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

/// `ahpd vault …`.
#[derive(Debug, Subcommand)]
pub enum VaultCommand {
    /// Store a secret read from standard input.
    Set {
        /// `host:<name>`, `team:<team>/<name>` or `user:<id>/<name>`.
        name: String,
        /// Refused: a value is never taken from the command line.
        #[arg(hide = true)]
        value: Option<String>,
    },
    /// Remove a secret.
    Delete {
        /// The secret's name.
        name: String,
    },
    /// The names held, never the values.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
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
