//! The `x-ahpd-agents` channel: agent records offered to clients, and the commands that put and
//! delete them. Each valid record is one agent of the host.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, OnceLock};

use std::time::Duration;

use ahpd_sdk::error::RpcError;
use ahpd_sdk::machine::ComputerPort;
use ahpd_sdk::nested::{NestedAgent, NestedIndex};
use ahpd_sdk::plugin::{SecretError, SecretReader};
use ahpd_sdk::ports::{ConnInfo, Extension};
use ahpd_sdk::{Agent, HostHandle};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::live::LiveSessions;
use crate::records::{EngineSlot, Entry, RecordError, RecordStore, Status};
use crate::vault::Vault;

/// The channel's URI.
pub const CHANNEL: &str = "x-ahpd-agents://";
/// The put command.
pub const PUT: &str = "x-ahpd/agents/put";
/// The delete command.
pub const DELETE: &str = "x-ahpd/agents/delete";

/// Answers engines' secret reads from the vault, fresh on every call.
pub struct VaultReader(pub Vault);

impl SecretReader for VaultReader {
    fn read(&self, name: &str) -> Result<ahpd_sdk::Secret, SecretError> {
        self.0
            .read(name)
            .map(|s| ahpd_sdk::Secret::new(s.expose()))
            .map_err(|e| SecretError {
                name: name.to_owned(),
                reason: e.to_string(),
            })
    }
}

/// A fixed agent a plugin registered, with the plugin's place in the configuration.
#[derive(Clone)]
pub struct FixedAgent {
    /// The plugin's place.
    pub order: usize,
    /// The agent.
    pub agent: Arc<dyn Agent>,
    /// The plugin that registered it.
    pub plugin: Option<String>,
}

struct Inner {
    entries: BTreeMap<String, Entry>,
    built: BTreeMap<String, Arc<dyn Agent>>,
}

/// The records channel, served through the host's extension port.
pub struct AgentsChannel {
    store: RecordStore,
    engines: Vec<EngineSlot>,
    fixed: Vec<FixedAgent>,
    inner: Mutex<Inner>,
    /// Puts and deletes run one at a time so files, state and published actions agree.
    ops: tokio::sync::Mutex<()>,
    host: OnceLock<HostHandle>,
    /// Where the sessions of the agents handed to the host are tracked (closed at shutdown).
    live: Arc<LiveSessions>,
    /// The machines port and how long an inner host has to answer, when a plugin gave one.
    computers: Option<(Arc<dyn ComputerPort>, Duration, Arc<NestedIndex>)>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl AgentsChannel {
    /// Loads every record and builds the agents of the valid ones.
    pub fn new(
        store: RecordStore,
        engines: Vec<EngineSlot>,
        fixed: Vec<FixedAgent>,
        live: Arc<LiveSessions>,
    ) -> Self {
        let taken = fixed_ids(&fixed);
        let mut entries = BTreeMap::new();
        let mut built = BTreeMap::new();
        for mut entry in store.load_all(&engines, &taken) {
            if let Some(agent) = build(&store, &engines, &mut entry) {
                built.insert(entry.id.clone(), agent);
            }
            match &entry.status {
                Status::Valid => {}
                Status::Invalid(r) | Status::Unavailable(r) => {
                    tracing::warn!(record = %entry.id, "the agent record {} is {}: {r}", entry.id, entry.view()["status"].as_str().unwrap_or("invalid"));
                }
            }
            entries.insert(entry.id.clone(), entry);
        }
        AgentsChannel {
            store,
            engines,
            fixed,
            inner: Mutex::new(Inner { entries, built }),
            ops: tokio::sync::Mutex::new(()),
            host: OnceLock::new(),
            live,
            computers: None,
        }
    }

    /// Lets sessions of agents that run nested run in machines through this port; `index`
    /// knows the machines of their sessions, across the agents built again.
    pub fn with_computers(
        mut self,
        port: Arc<dyn ComputerPort>,
        start_timeout: Duration,
        index: Arc<NestedIndex>,
    ) -> Self {
        self.computers = Some((port, start_timeout, index));
        self
    }

    /// Wraps an agent so a session may name a machine; `plugin` registered it.
    fn nest(&self, agent: Arc<dyn Agent>, plugin: Option<String>) -> Arc<dyn Agent> {
        match &self.computers {
            Some((port, timeout, index)) => Arc::new(
                NestedAgent::new(agent, port.clone(), plugin, *timeout).with_index(index.clone()),
            ),
            None => agent,
        }
    }

    /// The host's agents, in order: by plugin, fixed agents first, then records by id. Each is
    /// wrapped so its sessions can be closed at shutdown.
    pub fn agents(&self) -> Vec<Arc<dyn Agent>> {
        let inner = lock(&self.inner);
        let mut keyed: Vec<(usize, u8, String, Arc<dyn Agent>)> = self
            .fixed
            .iter()
            .map(|f| {
                let agent = self.nest(f.agent.clone(), f.plugin.clone());
                (f.order, 0, f.agent.descriptor().provider, agent)
            })
            .collect();
        for (id, agent) in &inner.built {
            let slot = inner
                .entries
                .get(id)
                .and_then(|e| e.record.as_ref())
                .and_then(|r| self.engines.iter().find(|s| s.engine.name() == r.engine));
            let order = slot.map_or(usize::MAX, |s| s.order);
            let agent = self.nest(agent.clone(), slot.map(|s| s.plugin.clone()));
            keyed.push((order, 1, id.clone(), agent));
        }
        keyed.sort_by(|a, b| (a.0, a.1, &a.2).cmp(&(b.0, b.1, &b.2)));
        if let Some((port, _, _)) = &self.computers {
            port.nested_agents(
                keyed
                    .iter()
                    .filter(|k| k.3.runs_nested())
                    .map(|k| ahpd_sdk::machine::NestedNeeds {
                        provider: k.3.descriptor().provider,
                        needs: k.3.machine(),
                    })
                    .collect(),
            );
        }
        keyed.into_iter().map(|k| self.live.wrap(k.3)).collect()
    }

    /// How many records are in each state, for the start's log line.
    pub fn counts(&self) -> (usize, usize) {
        let inner = lock(&self.inner);
        let valid = inner.built.len();
        (valid, inner.entries.len() - valid)
    }

    fn state(&self) -> Value {
        let inner = lock(&self.inner);
        json!({
            "engines": self.engines.iter().map(EngineSlot::describe).collect::<Vec<_>>(),
            "records": inner.entries.values().map(Entry::view).collect::<Vec<_>>(),
        })
    }

    fn publish(&self, action: Value, agents_changed: bool) {
        let Some(host) = self.host.get() else {
            return;
        };
        host.publish_extension(CHANNEL, &action);
        if agents_changed && let Err(e) = host.set_agents(self.agents()) {
            tracing::error!("the agents could not be replaced: {e}");
        }
    }

    async fn put(&self, params: &Value) -> Result<Value, RpcError> {
        check_channel(params)?;
        let record = params
            .get("record")
            .ok_or_else(|| RpcError::invalid_params("record: required"))?;
        let _turn = self.ops.lock().await;
        let taken = fixed_ids(&self.fixed);
        let previous_owner = record.get("id").and_then(Value::as_str).and_then(|id| {
            let inner = lock(&self.inner);
            inner
                .entries
                .get(id)?
                .record
                .as_ref()
                .map(|r| r.owner.clone())
        });
        let mut entry = self
            .store
            .put(record, &self.engines, &taken, previous_owner.as_deref())
            .map_err(rpc_error)?;
        let agent = build(&self.store, &self.engines, &mut entry);
        let view = entry.view();
        let changed = {
            let mut inner = lock(&self.inner);
            let was_valid = inner.built.remove(&entry.id).is_some();
            let is_valid = agent.is_some();
            if let Some(a) = agent {
                inner.built.insert(entry.id.clone(), a);
            }
            inner.entries.insert(entry.id.clone(), entry.clone());
            was_valid || is_valid
        };
        tracing::info!(record = %entry.id, status = view["status"].as_str().unwrap_or(""), "agent record put");
        self.publish(
            json!({"type": "x-ahpd/agents/recordSet", "record": view.clone()}),
            changed,
        );
        Ok(json!({ "record": view }))
    }

    async fn delete(&self, params: &Value) -> Result<Value, RpcError> {
        check_channel(params)?;
        let id = params
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params("id: must be a record id"))?;
        let _turn = self.ops.lock().await;
        let owner = {
            let inner = lock(&self.inner);
            let entry = inner
                .entries
                .get(id)
                .ok_or_else(|| RpcError::invalid_params(format!("no record has the id {id:?}")))?;
            entry.record.as_ref().map(|r| r.owner.clone())
        };
        self.store.delete(id, owner.as_deref()).map_err(rpc_error)?;
        {
            let mut inner = lock(&self.inner);
            inner.entries.remove(id);
            inner.built.remove(id);
        }
        tracing::info!(record = %id, "agent record deleted");
        self.publish(
            json!({"type": "x-ahpd/agents/recordRemoved", "id": id}),
            true,
        );
        Ok(json!({}))
    }
}

fn fixed_ids(fixed: &[FixedAgent]) -> BTreeSet<String> {
    fixed
        .iter()
        .map(|f| f.agent.descriptor().provider)
        .collect()
}

/// Builds the agent of a valid entry; a failure turns the entry invalid with the engine's line.
fn build(store: &RecordStore, engines: &[EngineSlot], entry: &mut Entry) -> Option<Arc<dyn Agent>> {
    if entry.status != Status::Valid {
        return None;
    }
    let record = entry.record.as_ref()?;
    let slot = engines.iter().find(|s| s.engine.name() == record.engine)?;
    let reader: Arc<dyn SecretReader> = Arc::new(VaultReader(store.vault().clone()));
    // A panicking engine must not end the daemon; its record is shown invalid instead.
    let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        slot.engine.agent(record, &slot.options, reader)
    }));
    match made {
        Ok(Ok(agent)) if agent.descriptor().provider == record.id => Some(agent),
        Ok(Ok(_)) => {
            entry.status = Status::Invalid(format!(
                "the engine {} built an agent with another provider id",
                record.engine
            ));
            None
        }
        Ok(Err(ahpd_sdk::plugin::RecordError::Unavailable(reason))) => {
            entry.status = Status::Unavailable(reason);
            None
        }
        Ok(Err(reason)) => {
            entry.status = Status::Invalid(reason.to_string());
            None
        }
        Err(_) => {
            entry.status = Status::Invalid(format!(
                "the engine {} failed while building the agent",
                record.engine
            ));
            None
        }
    }
}

fn check_channel(params: &Value) -> Result<(), RpcError> {
    match params.get("channel") {
        None => Ok(()),
        Some(Value::String(c)) if c == CHANNEL => Ok(()),
        Some(_) => Err(RpcError::invalid_params(format!(
            "channel: must be {CHANNEL}"
        ))),
    }
}

fn rpc_error(e: RecordError) -> RpcError {
    match e {
        RecordError::Invalid(m) => RpcError::invalid_params(m),
        RecordError::Storage(m) => {
            tracing::error!("{m}");
            RpcError::internal(m)
        }
    }
}

#[async_trait]
impl Extension for AgentsChannel {
    fn schemes(&self) -> Vec<String> {
        vec!["x-ahpd-agents".into()]
    }

    fn methods(&self) -> Vec<String> {
        vec![PUT.into(), DELETE.into()]
    }

    fn attach(&self, host: HostHandle) {
        let _ = self.host.set(host);
    }

    async fn call(&self, method: &str, params: Value, _conn: &ConnInfo) -> Result<Value, RpcError> {
        match method {
            PUT => self.put(&params).await,
            DELETE => self.delete(&params).await,
            other => Err(RpcError::method_not_found(other)),
        }
    }

    fn snapshot(&self, channel: &str) -> Option<Value> {
        (channel == CHANNEL).then(|| self.state())
    }
}
