//! `@ahpd/computer`: sessions whose tools run in containers.
//!
//! The plugin reaches a Docker Engine (or Podman's Docker-compatible socket) through `bollard`,
//! makes machines (`computer://<id>`) that clients write and delete as resources, and gives the
//! host a [`ahpd_sdk::machine::ComputerPort`]: a session whose `computer` setting names a
//! machine runs its agent in an inner `ahpd --stdio` started there over an exec stream. The
//! daemon's own build is mounted read-only at `/opt/ahpd/bin` and is every machine's main
//! process (`ahpd machine-init`), so an image needs only glibc.
//!
//! Only containers labelled `ahpd.computer=1` with this daemon's `ahpd.host` are ever read or
//! touched. Need values (keys included) travel only in each inner start's exec request, never in
//! a container's configuration, a label or a log line. This crate knows nothing of cofold: what
//! an agent asks of a machine comes through `Agent::machine()`.

mod admin;
mod binary;
mod engine;
mod machines;
mod needs;
mod options;
mod plugin;
mod port;
mod resources;
mod seed;
mod spec;
mod started;

pub use admin::{Admin, MachineRow};
pub use binary::{BIN_DIR, Build};
pub use options::{AtStop, DEFAULT_IMAGE, Options};
pub use plugin::{ComputerPlugin, PLUGIN_NAME, plugin};

/// Why a machine operation failed; each is one sentence for the person.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ComputerError {
    /// The engine does not answer.
    #[error("{0}")]
    NoEngine(String),
    /// The request was wrong (`-32602`).
    #[error("{0}")]
    Invalid(String),
    /// No such machine of this daemon (`-32008`).
    #[error("{0}")]
    NotFound(String),
    /// The machine exists already (`-32010`).
    #[error("{0}")]
    Exists(String),
    /// The limit on machines (`-32011`).
    #[error("{0}")]
    Limit(String),
    /// The engine failed (`-32603`).
    #[error("{0}")]
    Failed(String),
}

impl ComputerError {
    /// The JSON-RPC error code a client gets.
    pub fn code(&self) -> i32 {
        match self {
            ComputerError::Invalid(_) => -32602,
            ComputerError::NotFound(_) => -32008,
            ComputerError::Exists(_) => -32010,
            ComputerError::Limit(_) => -32011,
            ComputerError::NoEngine(_) | ComputerError::Failed(_) => -32603,
        }
    }
}
