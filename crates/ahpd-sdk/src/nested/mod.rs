//! Sessions in a machine: [`NestedAgent`] wraps an agent that runs nested and, for a session
//! whose `computer` setting names a machine, opens a [`NestedSession`] instead of the agent's
//! own backend. That session starts an inner host (`ahpd --stdio`) in the machine through a
//! [`ComputerPort`], talks AHP to it with the official client over the process's standard
//! streams, and carries turns, approvals, answers and configuration across.

mod connect;
mod dispose;
mod session;
mod transport;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ahp_types::commands::SessionConfigValueItem;
use ahp_types::common::JsonObject;
use ahp_types::state::{SessionConfigSchema, Turn};
use async_trait::async_trait;
use serde_json::Value;

use crate::agent::{
    Agent, AgentDescriptor, AgentError, PastSession, Probe, Refusal, Session, SessionStart,
};
use crate::machine::{COMPUTER_KEY, ComputerPort, MachineNeed};

pub use session::NestedSession;

/// How long an inner host has to answer `initialize` by default.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);

/// An agent whose sessions may run in a machine.
pub struct NestedAgent {
    inner: Arc<dyn Agent>,
    port: Arc<dyn ComputerPort>,
    plugin: Option<String>,
    start_timeout: Duration,
    /// Machines of the sessions opened here, by backend id, so a dispose can leave them.
    machines: Mutex<BTreeMap<String, (String, String)>>,
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
            machines: Mutex::new(BTreeMap::new()),
        }
    }

    fn remember(&self, backend_id: &str, machine: &str, session: &str) {
        if let Ok(mut m) = self.machines.lock() {
            m.insert(
                backend_id.to_owned(),
                (machine.to_owned(), session.to_owned()),
            );
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
        self.remember(
            &session.backend_id(),
            session.machine(),
            session.session_uri(),
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
        self.inner.transcript(id).await
    }

    async fn unfinished(&self, id: &str) -> bool {
        self.inner.unfinished(id).await
    }

    async fn delete(&self, id: &str) -> Result<(), AgentError> {
        let machine = self.machines.lock().ok().and_then(|mut m| m.remove(id));
        if let Some((machine, session)) = machine {
            // The conversation inside goes first, while the machine is surely still there
            // (leaving may arm a disposable machine's removal).
            if let Some(plugin) = &self.plugin {
                dispose::dispose_inside(dispose::Inside {
                    port: &self.port,
                    agent: &self.inner,
                    plugin,
                    provider: &self.inner.descriptor().provider,
                    machine: &machine,
                    backend_id: id,
                    timeout: self.start_timeout,
                })
                .await;
            }
            self.port.leave(&machine, &session).await;
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
