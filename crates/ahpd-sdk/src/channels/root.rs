//! The root channel (`ahp-root://`): agents, active-session count and host configuration.
//! Changes are applied with the root reducer under one lock and published inside it, so the
//! root's snapshot and its envelopes never disagree.

use std::collections::HashMap;
use std::sync::Arc;

use ahp::reducers::{ReduceOutcome, apply_action_to_root};
use ahp_types::actions::{
    ActionOrigin, RootActiveSessionsChangedAction, RootAgentsChangedAction, StateAction,
};
use ahp_types::common::JsonObject;
use ahp_types::state::{
    AgentInfo, ConfigSchema, RootConfigState, RootState, Snapshot, SnapshotState,
};

use crate::agent::{Agent, Probe};
use crate::inner::HostInner;

pub(crate) const ROOT: &str = ahp_types::ROOT_RESOURCE_URI;

pub(crate) fn agent_info(agent: &dyn Agent, probe: Option<&Probe>) -> AgentInfo {
    let d = agent.descriptor();
    AgentInfo {
        provider: d.provider,
        display_name: d.display_name,
        description: d.description,
        models: probe.map(|p| p.models.clone()).unwrap_or_default(),
        protected_resources: d.protected_resources,
        customizations: probe.and_then(|p| p.customizations.clone()),
        capabilities: d.capabilities,
    }
}

fn agent_infos(agents: &[Arc<dyn Agent>], probes: &HashMap<String, Probe>) -> Vec<AgentInfo> {
    agents
        .iter()
        .map(|a| agent_info(a.as_ref(), probes.get(&a.descriptor().provider)))
        .collect()
}

pub(crate) fn initial_root(
    agents: &[Arc<dyn Agent>],
    probes: &HashMap<String, Probe>,
    meta: Option<JsonObject>,
) -> RootState {
    RootState {
        agents: agent_infos(agents, probes),
        active_sessions: Some(0),
        terminals: None,
        config: Some(RootConfigState {
            schema: ConfigSchema {
                r#type: "object".into(),
                properties: Default::default(),
                required: None,
            },
            values: JsonObject::new(),
        }),
        meta,
    }
}

/// Apply an action to the root state; publish it when it changed something.
pub(crate) fn apply(
    inner: &HostInner,
    action: &StateAction,
    origin: Option<&ActionOrigin>,
) -> Option<u64> {
    let mut root = inner.root.lock().unwrap_or_else(|p| p.into_inner());
    let before = root.clone();
    match apply_action_to_root(&mut root, action) {
        ReduceOutcome::Applied if *root != before => Some(inner.hub.publish(ROOT, action, origin)),
        ReduceOutcome::Applied => None,
        other => {
            tracing::debug!(
                ?other,
                "a root action changed nothing and was not published"
            );
            None
        }
    }
}

pub(crate) fn publish_agents(inner: &HostInner) {
    let agents = inner.agents();
    let probes = inner.probes.lock().map(|p| p.clone()).unwrap_or_default();
    let action = StateAction::RootAgentsChanged(RootAgentsChangedAction {
        agents: agent_infos(&agents, &probes),
    });
    apply(inner, &action, None);
}

pub(crate) fn publish_active_sessions(inner: &HostInner, count: usize) {
    let action = StateAction::RootActiveSessionsChanged(RootActiveSessionsChangedAction {
        active_sessions: count as i64,
    });
    apply(inner, &action, None);
}

/// Ask every agent not yet probed for its models, in the background.
pub(crate) fn probe_agents(inner: &Arc<HostInner>) {
    for agent in inner.agents() {
        let provider = agent.descriptor().provider;
        let known = inner
            .probes
            .lock()
            .map(|p| p.contains_key(&provider))
            .unwrap_or(true);
        if known {
            continue;
        }
        let weak = Arc::downgrade(inner);
        inner.probing.send_modify(|out| *out += 1);
        // Counted down however the probe ends, published or not.
        let done = Probing(inner.probing.clone());
        tokio::spawn(async move {
            let _done = done;
            let probe = agent.probe().await;
            if probe == Probe::default() {
                return;
            }
            let Some(inner) = weak.upgrade() else { return };
            if let Ok(mut p) = inner.probes.lock() {
                p.insert(provider, probe);
            }
            publish_agents(&inner);
        });
    }
}

/// One probe out; dropping it counts the probe done (also when its task is cancelled).
struct Probing(tokio::sync::watch::Sender<usize>);

impl Drop for Probing {
    fn drop(&mut self) {
        self.0.send_modify(|out| *out = out.saturating_sub(1));
    }
}

/// Register `conn` on the root channel and take the root snapshot in one step.
pub(crate) fn subscribe(inner: &HostInner, conn: u64) -> Snapshot {
    let root = inner.root.lock().unwrap_or_else(|p| p.into_inner());
    let from_seq = inner.hub.subscribe(conn, ROOT);
    Snapshot {
        resource: ROOT.to_owned(),
        state: SnapshotState::Root(Box::new(root.clone())),
        from_seq: from_seq as i64,
    }
}
