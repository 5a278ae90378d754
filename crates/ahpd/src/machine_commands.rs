//! `ahpd machines list|stop|rm|prune`: this daemon's machines on the container engine, found by
//! their labels with the engine the `@ahpd/computer` options name, whether the daemon runs or
//! not.

use ahpd_computer::{Admin, ComputerError, MachineRow, PLUGIN_NAME};
use clap::Subcommand;

use crate::commands::CommandError;
use crate::config;
use crate::locations::Locations;
use crate::plugins;
use crate::term::clean_line;

/// `ahpd machines …`.
#[derive(Debug, Clone, Subcommand)]
pub enum MachinesCommand {
    /// This daemon's machines, in any state.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop a machine; its files stay until it is removed.
    Stop {
        /// The machine's id (`computer://<id>` works too).
        id: String,
    },
    /// Remove a machine, with the volumes made for it alone.
    Rm {
        /// The machines' ids.
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Remove the stopped machines, and the disposable ones unless a daemon runs (it removes
    /// its own after their delay).
    Prune,
}

/// The daemon's id, when it ever had one: no id, no machines.
fn host_id(loc: &Locations) -> Option<String> {
    let text = std::fs::read_to_string(loc.dir.join("host-id")).ok()?;
    let id = text.trim();
    (id.len() == 16 && id.chars().all(|c| c.is_ascii_hexdigit())).then(|| id.to_owned())
}

fn admin(loc: &Locations, host_id: String) -> Result<Admin, CommandError> {
    let settings = config::load(loc)?;
    let cands = plugins::plan(&settings, None, &loc.dir)?;
    let builtin = plugins::builtin()
        .into_iter()
        .find(|b| b.plugin.name() == PLUGIN_NAME)
        .ok_or_else(|| CommandError::Failed(format!("{PLUGIN_NAME} is not built in")))?;
    let cand = cands
        .iter()
        .find(|c| c.name == PLUGIN_NAME)
        .ok_or_else(|| CommandError::Failed(format!("{PLUGIN_NAME} is not configured")))?;
    let options = plugins::merged_options(builtin.plugin.as_ref(), cand);
    Admin::new(&options, &loc.dir, host_id).map_err(|e| CommandError::Usage(e.to_string()))
}

fn failed(e: ComputerError) -> CommandError {
    CommandError::Failed(e.to_string())
}

/// Runs one `ahpd machines` command; the exit code.
pub fn machines(loc: &Locations, cmd: &MachinesCommand) -> Result<i32, CommandError> {
    let rt = crate::term::runtime()?;
    let Some(id) = host_id(loc) else {
        return match cmd {
            MachinesCommand::List { json: true } => {
                println!("[]");
                Ok(0)
            }
            MachinesCommand::List { json: false } | MachinesCommand::Prune => {
                eprintln!("no machines: this host has not made any");
                Ok(0)
            }
            MachinesCommand::Stop { id } => Err(missing(id)),
            MachinesCommand::Rm { ids } => Err(missing(&ids[0])),
        };
    };
    let admin = admin(loc, id)?;
    rt.block_on(async {
        match cmd {
            MachinesCommand::List { json } => {
                let rows = admin.list().await.map_err(failed)?;
                print_rows(&rows, *json);
                Ok(0)
            }
            MachinesCommand::Stop { id } => {
                let id = bare(id);
                admin.stop(id).await.map_err(failed)?;
                println!("stopped computer://{id}");
                Ok(0)
            }
            MachinesCommand::Rm { ids } => {
                for id in ids {
                    let id = bare(id);
                    admin.remove(id).await.map_err(failed)?;
                    println!("removed computer://{id}");
                }
                Ok(0)
            }
            MachinesCommand::Prune => {
                let daemon = crate::process::running(loc).is_some();
                let gone = admin.prune(daemon).await.map_err(failed)?;
                for id in &gone {
                    println!("removed computer://{id}");
                }
                if gone.is_empty() {
                    eprintln!("nothing to remove");
                }
                if daemon {
                    eprintln!(
                        "the daemon runs: its disposable machines go after their delay (ahpd machines rm removes one now)"
                    );
                }
                Ok(0)
            }
        }
    })
}

fn bare(id: &str) -> &str {
    id.strip_prefix("computer://").unwrap_or(id)
}

fn missing(id: &str) -> CommandError {
    CommandError::Failed(format!(
        "there is no computer called computer://{}",
        clean_line(bare(id))
    ))
}

fn print_rows(rows: &[MachineRow], json: bool) {
    if json {
        println!("{}", serde_json::to_string_pretty(rows).unwrap_or_default());
        return;
    }
    if rows.is_empty() {
        eprintln!("no machines");
        return;
    }
    // Labels are the engine's to report and may hold anything: shown on one line, cleaned.
    let table: Vec<[String; 5]> = rows
        .iter()
        .map(|r| {
            let kind = match (&r.profile, r.disposable) {
                (Some(p), true) => format!("disposable:{p}"),
                (Some(p), false) => p.clone(),
                (None, _) => "-".to_owned(),
            };
            [
                r.id.clone(),
                r.state.clone(),
                kind,
                r.folder.clone().unwrap_or_else(|| r.image.clone()),
                r.status.clone(),
            ]
            .map(|c| clean_line(&c))
        })
        .collect();
    let head = ["ID", "STATE", "PROFILE", "FOLDER/IMAGE", "STATUS"].map(str::to_owned);
    let mut widths = head.clone().map(|h| h.chars().count());
    for row in &table {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    for row in std::iter::once(&head).chain(&table) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
}
