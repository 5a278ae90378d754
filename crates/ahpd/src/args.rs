//! The options of a daemon run and of the subcommands `commands` carries out, below everything
//! that reads them (the configuration applies the run's flags, the process records and parses
//! them again), so those modules need not know the whole command line: `cli` assembles it on top.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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

    /// Set on an inner host started only to read or dispose a conversation: a past session
    /// opened here leaves its unfinished runs as they are rather than reattaching them.
    #[arg(long, hide = true, requires = "stdio")]
    pub leave_unfinished: bool,
}

/// A recorded daemon's command line: a daemon run never has a subcommand (`start` is taken out
/// before the detached child is spawned), so its options parse without the rest of `cli`.
#[derive(Debug, Parser)]
#[command(name = "ahpd")]
pub struct RunLine {
    /// As `cli::Cli::config_file`.
    #[arg(long, value_name = "PATH")]
    pub config_file: Option<PathBuf>,

    #[command(flatten)]
    pub run: RunArgs,
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
