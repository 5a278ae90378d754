//! Sessions in a machine: [`NestedAgent`] wraps an agent that runs nested and, for a session
//! whose `computer` setting names a machine, opens a [`NestedSession`] instead of the agent's
//! own backend. That session starts an inner host (`ahpd --stdio`) in the machine through a
//! [`ComputerPort`], talks AHP to it with the official client over the process's standard
//! streams, and carries turns, approvals, answers and configuration across.
//!
//! This folder is the machines layer: [`machine`] fixes what an agent asks of a machine and the
//! port a container plugin implements; the rest runs a session's agent in one. It may use the
//! backend contract (`agent`, and the values of `session::exchange` it re-exports), the session
//! store's records and `util`; nothing in it reaches into a session's task.

pub mod machine;

mod connect;
mod index;
mod inside;
mod session;
mod transport;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ahp_types::commands::SessionConfigValueItem;
use ahp_types::common::JsonObject;
use ahp_types::state::{SessionConfigSchema, Turn};
use async_trait::async_trait;
use serde_json::Value;

use crate::agent::{
    Agent, AgentDescriptor, AgentError, PastSession, Probe, Refusal, Session, SessionStart,
};
use crate::nested::machine::{COMPUTER_KEY, ComputerPort, MachineNeed};

pub use index::NestedIndex;
pub use session::NestedSession;

/// How long an inner host has to answer `initialize` by default.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);

/// An agent whose sessions may run in a machine.
pub struct NestedAgent {
    inner: Arc<dyn Agent>,
    port: Arc<dyn ComputerPort>,
    plugin: Option<String>,
    start_timeout: Duration,
    /// Where the sessions of this daemon's nested agents live, so a past one's transcript and
    /// disposal reach its machine.
    index: Arc<NestedIndex>,
}

impl NestedAgent {
    /// Wraps `inner`; `plugin` is the plugin that registered it, which the inner host loads.
    pub fn new(
        inner: Arc<dyn Agent>,
        port: Arc<dyn ComputerPort>,
        plugin: Option<String>,
        start_timeout: Duration,
    ) -> Self {
        Self {
            inner,
            port,
            plugin,
            start_timeout,
            index: Arc::new(NestedIndex::default()),
        }
    }

    /// Shares `index` with the other agents of the daemon, so sessions found after a restart
    /// (and those another instance of this agent opened) are known here.
    pub fn with_index(mut self, index: Arc<NestedIndex>) -> Self {
        self.index = index;
        self
    }

    fn provider(&self) -> String {
        self.inner.descriptor().provider
    }

    /// What names a conversation of this agent that lives in a machine, for one question to an
    /// inner host started there.
    fn inside<'a>(
        &'a self,
        plugin: &'a str,
        provider: &'a str,
        place: &'a index::Placed,
        backend_id: &'a str,
    ) -> inside::Inside<'a> {
        inside::Inside {
            port: &self.port,
            agent: &self.inner,
            plugin,
            provider,
            machine: &place.machine,
            backend_id,
            folder: place.folder.clone(),
            timeout: self.start_timeout,
        }
    }
}

/// The `computer` value of a session's settings; empty for this host.
fn computer_of(settings: &JsonObject) -> String {
    settings
        .get(COMPUTER_KEY)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

#[async_trait]
impl Agent for NestedAgent {
    fn descriptor(&self) -> AgentDescriptor {
        self.inner.descriptor()
    }

    fn config_schema(&self, dir: Option<&Path>) -> SessionConfigSchema {
        let mut schema = self.inner.config_schema(dir);
        if self.inner.runs_nested() {
            schema
                .properties
                .insert(COMPUTER_KEY.to_owned(), self.port.setting());
        }
        schema
    }

    fn config_defaults(&self, dir: Option<&Path>) -> JsonObject {
        let mut values = self.inner.config_defaults(dir);
        if self.inner.runs_nested()
            && let Some(default) = self.port.setting().default
        {
            values.insert(COMPUTER_KEY.to_owned(), default);
        }
        values
    }

    fn validate_config(&self, values: &JsonObject) -> Result<(), Refusal> {
        let mut rest = values.clone();
        if let Some(v) = rest.remove(COMPUTER_KEY) {
            match v.as_str() {
                Some("") => {}
                Some(s) if s.starts_with("computer://") || s.starts_with("disposable:") => {}
                _ => {
                    return Err(Refusal::new(
                        "computer is \"\", computer://<id> or disposable:<profile>",
                    ));
                }
            }
        }
        self.inner.validate_config(&rest)
    }

    fn machine_refusal(&self, value: &str) -> String {
        format!(
            "{} cannot run in a machine: it cannot be started inside one (asked for {value})",
            self.inner.descriptor().provider
        )
    }

    async fn create(&self, mut start: SessionStart) -> Result<Box<dyn Session>, AgentError> {
        let computer = computer_of(&start.settings);
        start.settings.remove(COMPUTER_KEY);
        if computer.is_empty() || !self.inner.runs_nested() {
            return self.inner.create(start).await;
        }
        let Some(plugin) = self.plugin.clone() else {
            return Err(AgentError::Refused(format!(
                "{} cannot run in a machine: no plugin of this daemon registered it",
                self.inner.descriptor().provider
            )));
        };
        let provider = self.inner.descriptor().provider;
        let folder = start.working_directory.clone();
        let session = NestedSession::open(session::Opening {
            port: self.port.clone(),
            agent: self.inner.clone(),
            plugin,
            provider,
            computer,
            start,
            start_timeout: self.start_timeout,
        })
        .await?;
        self.index.put(
            &self.provider(),
            &session.backend_id(),
            index::Placed {
                machine: session.machine().to_owned(),
                session: session.session_uri().to_owned(),
                folder,
            },
        );
        Ok(Box::new(session))
    }

    fn runs_nested(&self) -> bool {
        self.inner.runs_nested()
    }

    fn machine(&self) -> BTreeMap<String, MachineNeed> {
        self.inner.machine()
    }

    async fn probe(&self) -> Probe {
        self.inner.probe().await
    }

    async fn list(&self) -> Vec<PastSession> {
        self.inner.list().await
    }

    async fn find(&self, id: &str) -> Option<PastSession> {
        self.inner.find(id).await
    }

    async fn transcript(&self, id: &str) -> Option<Vec<Turn>> {
        let provider = self.provider();
        let Some(place) = self.index.get(&provider, id) else {
            return self.inner.transcript(id).await;
        };
        let plugin = self.plugin.as_deref()?;
        if !self.port.running(&place.machine).await {
            tracing::info!(
                machine = %place.machine,
                session = %place.session,
                "computer://{} is not running: the session opens with no turns, and its next turn starts the machine",
                place.machine
            );
            return Some(Vec::new());
        }
        inside::transcript_inside(self.inside(plugin, &provider, &place, id)).await
    }

    async fn unfinished(&self, id: &str) -> bool {
        // A conversation in a machine is not this host's agent's to look at; what it left
        // unfinished is taken up inside at its next turn.
        if self.index.get(&self.provider(), id).is_some() {
            return false;
        }
        self.inner.unfinished(id).await
    }

    async fn delete(&self, id: &str) -> Result<(), AgentError> {
        let provider = self.provider();
        if let Some(place) = self.index.take(&provider, id) {
            // The conversation inside goes first, while the machine is surely still there
            // (leaving may arm a disposable machine's removal). A machine that is gone says
            // so in a line, and the session goes anyway.
            if let Some(plugin) = &self.plugin {
                inside::dispose_inside(self.inside(plugin, &provider, &place, id)).await;
            }
            self.port.leave(&place.machine, &place.session).await;
            return Ok(());
        }
        self.inner.delete(id).await
    }

    async fn config_completions(
        &self,
        property: &str,
        query: Option<&str>,
        dir: Option<&Path>,
        values: &JsonObject,
    ) -> Vec<SessionConfigValueItem> {
        if property == COMPUTER_KEY && self.inner.runs_nested() {
            return self
                .port
                .completions(&self.inner.descriptor().provider, query)
                .await;
        }
        self.inner
            .config_completions(property, query, dir, values)
            .await
    }
}
