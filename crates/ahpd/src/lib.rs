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

mod acp;
mod args;
mod channel;
mod cli;
mod client;
mod commands;
mod config;
mod environ;
mod fsutil;
mod live;
mod locations;
mod logfile;
mod logs;
mod machine_commands;
mod machines;
mod mcp;
mod mcp_edit;
mod memory;
mod ownership;
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
    // The per-call helper that contains commands and stdio servers: the daemon starts itself
    // again for it, so it is never a program found along PATH.
    let mut argv = std::env::args_os();
    if argv.nth(1).is_some_and(|a| a == CONTAIN) {
        return ahpd_agent_cofold::contain::run(&[CONTAIN], argv.collect());
    }
    install_contain_helper();
    let cli = Cli::parse();
    // Before any thread starts (see `environ`): a process that hosts agents runs commands for
    // them, which must not read its secrets out of it.
    let sealed = hosts_agents(&cli).then(environ::seal);
    match run(cli, sealed) {
        Ok(code) => code,
        Err(err) => {
            // A failure may quote what a host, a model or a file said: never raw.
            eprintln!("ahpd: {}", term::clean(&err.to_string()));
            exit_code_of(&err)
        }
    }
}

/// The hidden subcommand that runs the containing helper.
const CONTAIN: &str = "__contain";

/// Makes this executable, run as `__contain`, the helper every command and stdio server starts
/// behind.
fn install_contain_helper() {
    let Ok(me) = std::env::current_exe() else {
        return;
    };
    ahpd_agent_cofold::contain::install(ahpd_agent_cofold::contain::Helper {
        program: me.clone(),
        args: vec![CONTAIN.into()],
    });
    ahpd_mcp::contain_with(me, vec![CONTAIN.into()]);
}

/// Whether this command may build a host and run a model's tools in this process: the daemon,
/// and the terminal client when no daemon answers. `start` and `restart` are not: they hand
/// their environment to the daemon they start.
fn hosts_agents(cli: &Cli) -> bool {
    matches!(
        cli.command,
        None | Some(Command::Run(_)) | Some(Command::Chat(_)) | Some(Command::Acp(_))
    )
}

/// Logs what sealing the process did, once logging is set up.
fn report_sealed(sealed: Option<&environ::Sealed>) {
    let Some(sealed) = sealed else { return };
    for problem in &sealed.problems {
        tracing::warn!("{problem}");
    }
    if !sealed.names.is_empty() {
        tracing::debug!(names = ?sealed.names, "variables kept out of the process's environment block");
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
fn serve_here(
    loc: &Locations,
    run: &args::RunArgs,
    sealed: Option<&environ::Sealed>,
) -> anyhow::Result<i32> {
    if run.detached_child {
        sys::new_session();
        logs::init_file(&loc.daemon_log(), "info");
    } else {
        logs::init("info");
    }
    report_sealed(sealed);
    sys::raise_descriptor_limit();
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

fn run(cli: Cli, sealed: Option<environ::Sealed>) -> anyhow::Result<i32> {
    let loc = Locations::resolve(cli.config_file.as_deref())?;
    match cli.command {
        Some(Command::MachineInit) => Ok(machines::machine_init()),
        None => serve_here(&loc, &cli.run, sealed.as_ref()),
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
        Some(Command::Mcp(cmd)) => {
            use crate::cli::McpCommand;
            logs::init("warn");
            match cmd {
                McpCommand::List { json } => Ok(mcp::list(&loc, json)?),
                McpCommand::Get { name, json } => Ok(mcp::get(&loc, &name, json)?),
                McpCommand::Add(args) => Ok(mcp_edit::add(&loc, &args)?),
                McpCommand::Remove { name } => Ok(mcp_edit::remove(&loc, &name)?),
                McpCommand::Enable { name } => Ok(mcp_edit::set_enabled(&loc, &name, true)?),
                McpCommand::Disable { name } => Ok(mcp_edit::set_enabled(&loc, &name, false)?),
                McpCommand::Import { file } => Ok(mcp_edit::import(&loc, &file)?),
            }
        }
        Some(Command::Machines(cmd)) => {
            logs::init("warn");
            Ok(machine_commands::machines(&loc, &cmd)?)
        }
        Some(Command::Run(opts)) => {
            logs::init_client(&loc.dir.join("client.log"));
            report_sealed(sealed.as_ref());
            Ok(term::run(&loc, &opts)?)
        }
        Some(Command::Chat(opts)) => {
            logs::init_client(&loc.dir.join("client.log"));
            report_sealed(sealed.as_ref());
            Ok(term::chat(&loc, &opts)?)
        }
        Some(Command::Sessions(opts)) => {
            logs::init("warn");
            Ok(term::sessions(&loc, &opts)?)
        }
        Some(Command::Acp(opts)) => {
            // Standard output carries the protocol; log lines go to standard error.
            logs::init("warn");
            Ok(acp::acp(&loc, &opts)?)
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
