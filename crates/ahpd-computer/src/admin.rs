//! A daemon's machines as its command line sees them (`ahpd machines`): found by their labels
//! on the engine, stopped and removed there, whether the daemon runs or not.

use std::path::Path;
use std::sync::Mutex;

use serde::Serialize;
use serde_json::Value;

use crate::ComputerError;
use crate::binary::Build;
use crate::engine::{self, Engine};
use crate::machines::{Machines, label};
use crate::options::Options;

/// One machine, from its container's labels and state.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineRow {
    /// Its id (the container's name).
    pub id: String,
    /// The engine's state word: `running`, `exited`, `created`…
    pub state: String,
    /// The engine's status line (`Up 3 minutes`).
    pub status: String,
    /// The image.
    pub image: String,
    /// The profile it was made from.
    pub profile: Option<String>,
    /// Made for one session, removed after it.
    pub disposable: bool,
    /// The session it was made for.
    pub session: Option<String>,
    /// The host folder it shows.
    pub folder: Option<String>,
}

/// This daemon's machines, reached without the daemon.
pub struct Admin {
    m: Machines,
}

impl Admin {
    /// Over the engine the plugin's `options` name, for the daemon of this id; nothing is
    /// contacted yet.
    pub fn new(options: &Value, config_dir: &Path, host_id: String) -> Result<Self, ComputerError> {
        let opts = Options::parse(options).map_err(|e| ComputerError::Invalid(e.to_string()))?;
        let uri = engine::find(opts.engine.as_deref());
        Ok(Admin {
            m: Machines {
                engine: Engine::new(uri),
                opts,
                host_id,
                // Never made or started from here, so no build is copied.
                build: Build {
                    dir: config_dir.join("computer").join("bin"),
                    file: String::new(),
                },
                secrets: None,
                making: tokio::sync::Mutex::new(()),
                deleted: Mutex::new(Default::default()),
            },
        })
    }

    /// Every machine of this daemon, by id.
    pub async fn list(&self) -> Result<Vec<MachineRow>, ComputerError> {
        let mut rows: Vec<MachineRow> = self
            .m
            .list()
            .await?
            .into_iter()
            .filter_map(|c| {
                let id = c
                    .names
                    .as_ref()?
                    .first()?
                    .trim_start_matches('/')
                    .to_owned();
                let labels = c.labels.unwrap_or_default();
                Some(MachineRow {
                    id,
                    state: c.state.map(|s| s.to_string()).unwrap_or_default(),
                    status: c.status.unwrap_or_default(),
                    image: c.image.unwrap_or_default(),
                    profile: labels.get(label::PROFILE).cloned(),
                    disposable: labels.contains_key(label::DISPOSABLE),
                    session: labels.get(label::SESSION).cloned(),
                    folder: labels.get(label::FOLDER).cloned(),
                })
            })
            .collect();
        rows.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(rows)
    }

    /// Stops a machine; its files stay until it is removed.
    pub async fn stop(&self, id: &str) -> Result<(), ComputerError> {
        self.m.set_state(id, "stopped").await
    }

    /// Removes a machine, with the volumes made for it alone.
    pub async fn remove(&self, id: &str) -> Result<(), ComputerError> {
        self.m.inspect(id).await?;
        self.m.remove(id).await
    }

    /// Removes the machines nothing needs: the stopped ones, and the disposable ones when no
    /// daemon holds them (`daemon_runs` false); returns their ids.
    pub async fn prune(&self, daemon_runs: bool) -> Result<Vec<String>, ComputerError> {
        let mut gone = Vec::new();
        for row in self.list().await? {
            let stopped = matches!(row.state.as_str(), "exited" | "created" | "dead");
            if stopped || (row.disposable && !daemon_runs) {
                self.m.remove(&row.id).await?;
                gone.push(row.id);
            }
        }
        Ok(gone)
    }
}
