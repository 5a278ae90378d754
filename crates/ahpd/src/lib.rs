//! `ahpd`: the Agent Host Protocol daemon.
//!
//! The binary adds to the `ahpd-sdk` host what a person running it needs: the command line, the
//! configuration files, compiled-in plugins, the vault, the agent records channel, the session
//! store (`sessions.json`), process management, the graceful stop and logs, and a terminal
//! client of its own (`run`, `chat`, `sessions`, in `src/term/`).
//!
//! Everything lives in this library and `src/main.rs` only calls [`run_command_line`]: that lets
//! the crate's tests depend on the crate itself with the `test-plugins` feature (the echo engine),
//! so the binary they spawn has it while a normal build does not.

mod args;
mod channel;
mod cli;
mod client;
mod commands;
mod config;
mod fsutil;
mod live;
mod locations;
mod logfile;
mod logs;
mod machines;
mod mcp;
mod memory;
mod plugins;
mod process;
mod records;
mod serve;
mod served;
mod signals;
mod sys;
mod term;
mod token;
mod undo;
mod vault;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::locations::Locations;

/// Parses the command line, runs what it asks for and returns the process exit code (see
/// docs/configuration.md). Failures are printed as one `ahpd: ...` line on standard error.
pub fn run_command_line() -> i32 {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("ahpd: {err}");
            exit_code_of(&err)
        }
    }
}

/// Maps a failure to the exit code its kind calls for.
fn exit_code_of(err: &anyhow::Error) -> i32 {
    if let Some(e) = err.downcast_ref::<serve::ServeError>() {
        e.exit_code()
    } else if let Some(e) = err.downcast_ref::<commands::CommandError>() {
        e.exit_code()
    } else if let Some(e) = err.downcast_ref::<process::ProcessError>() {
        e.exit_code()
    } else if err.downcast_ref::<config::ConfigError>().is_some() {
        2
    } else {
        1
    }
}

/// Most threads the daemon's runtime runs blocking file work on (see docs/operations.md).
const BLOCKING_THREADS: usize = 32;

/// Runs the daemon in this process, on a runtime sized for it.
fn serve_here(loc: &Locations, run: &args::RunArgs) -> anyhow::Result<i32> {
    if run.detached_child {
        sys::new_session();
        logs::init_file(&loc.daemon_log(), "info");
    } else {
        logs::init("info");
    }
    let mut builder = if run.stdio {
        // One client and, in a machine, one session: the host's own work fits on the
        // thread that reads its input, and an idle inner host keeps no worker threads
        // (their stacks and allocator arenas), of which a machine may run many.
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    };
    let runtime = builder
        // The stores' file work runs on these threads; unbounded, 100 streaming sessions kept
        // about as many threads, each with its own stack and allocator cache.
        .max_blocking_threads(BLOCKING_THREADS)
        .enable_all()
        .build()?;
    let code = runtime.block_on(serve::run(loc, run))?;
    // Backend tasks that ignore cancellation must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    Ok(code)
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    let loc = Locations::resolve(cli.config_file.as_deref())?;
    match cli.command {
        Some(Command::MachineInit) => Ok(machines::machine_init()),
        None => serve_here(&loc, &cli.run),
        Some(Command::Start(run)) => {
            logs::init("warn");
            let all: Vec<String> = std::env::args().collect();
            let cwd = std::env::current_dir()?;
            process::start(&loc, &run, process::start_argv(&all), &cwd)?;
            Ok(0)
        }
        Some(Command::Stop) => {
            logs::init("warn");
            process::stop(&loc)?;
            Ok(0)
        }
        Some(Command::Status { json }) => {
            logs::init("warn");
            Ok(process::status(&loc, json)?)
        }
        Some(Command::Restart { force }) => {
            logs::init("warn");
            process::restart(&loc, force)?;
            Ok(0)
        }
        Some(Command::Token { url }) => {
            logs::init("warn");
            commands::token(&loc, url)?;
            Ok(0)
        }
        Some(Command::Config { json }) => {
            logs::init("warn");
            commands::show_config(&loc, json)?;
            Ok(0)
        }
        Some(Command::Plugin(cmd)) => {
            logs::init("warn");
            Ok(commands::plugin(&loc, &cmd)?)
        }
        Some(Command::Vault(cmd)) => {
            logs::init("warn");
            commands::vault_cmd(&loc, &cmd)?;
            Ok(0)
        }
        Some(Command::Mcp(crate::cli::McpCommand::List { json })) => {
            logs::init("warn");
            Ok(mcp::list(&loc, json)?)
        }
        Some(Command::Run(opts)) => {
            logs::init("warn");
            Ok(term::run(&loc, &opts)?)
        }
        Some(Command::Chat(opts)) => {
            logs::init("warn");
            Ok(term::chat(&loc, &opts)?)
        }
        Some(Command::Sessions(opts)) => {
            logs::init("warn");
            Ok(term::sessions(&loc, &opts)?)
        }
        Some(Command::Undo(opts)) => {
            logs::init("warn");
            Ok(undo::undo(&loc, &opts)?)
        }
        Some(Command::Completion { shell }) => {
            cli::completion(shell);
            Ok(0)
        }
    }
}
