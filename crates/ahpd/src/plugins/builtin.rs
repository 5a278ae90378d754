//! The table of plugins compiled into this binary.

use std::fmt;
use std::sync::Arc;

use ahpd_sdk::plugin::Plugin;

/// Something a plugin registers, declared up front so `plugin list` can show it without
/// running the plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provides {
    /// An engine of agent records.
    Engine(&'static str),
    /// A fixed agent with this provider id (no built-in plugin registers one yet).
    #[allow(dead_code)]
    Agent(&'static str),
}

impl fmt::Display for Provides {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provides::Engine(name) => write!(f, "engine {name}"),
            Provides::Agent(name) => write!(f, "agent {name}"),
        }
    }
}

/// One compiled-in plugin.
#[derive(Clone)]
pub struct BuiltIn {
    /// The plugin.
    pub plugin: Arc<dyn Plugin>,
    /// What it registers.
    pub provides: &'static [Provides],
}

impl BuiltIn {
    /// A table entry.
    pub fn new(plugin: Arc<dyn Plugin>, provides: &'static [Provides]) -> Self {
        BuiltIn { plugin, provides }
    }
}
