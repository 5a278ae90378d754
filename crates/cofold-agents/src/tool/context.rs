//! What a tool call runs with: the ids, the workspace, key-value handles and typed resources.

use crate::abort::AbortSignal;
use crate::error::AgentError;
use crate::store::{KvEntry, KvScope, Store};
use serde_json::Value;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

/// What a tool call runs with.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// The agent's id.
    pub agent_id: String,
    /// The session's id.
    pub session_id: String,
    /// The run's id.
    pub run_id: String,
    /// The call's id.
    pub call_id: String,
    /// This execution's id (the tool step's `invocationId`).
    pub invocation_id: String,
    /// The session's workspace, when it has one.
    pub workspace: Option<String>,
    /// Fires when the run is cancelled or times out.
    pub signal: AbortSignal,
    /// Key-value handles.
    pub kv: KvScopes,
    /// Host values by type.
    pub resources: Resources,
}

/// One key-value scope of the store.
#[derive(Clone)]
pub struct Kv {
    store: Arc<dyn Store>,
    scope: KvScope,
}

impl fmt::Debug for Kv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kv")
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl Kv {
    /// A handle onto `scope` of `store`.
    pub fn new(store: Arc<dyn Store>, scope: KvScope) -> Kv {
        Kv { store, scope }
    }

    /// The scope this handle reads and writes.
    pub fn scope(&self) -> &KvScope {
        &self.scope
    }

    /// The value under `key`, or `None`.
    pub async fn get(&self, key: &str) -> Result<Option<Value>, AgentError> {
        self.store.kv_get(&self.scope, key).await
    }

    /// Sets `key` to `value`.
    pub async fn set(&self, key: &str, value: Value) -> Result<(), AgentError> {
        self.store.kv_set(&self.scope, key, value).await
    }

    /// Removes `key` (a key never set is fine).
    pub async fn delete(&self, key: &str) -> Result<(), AgentError> {
        self.store.kv_delete(&self.scope, key).await
    }

    /// The entries, optionally only those whose key starts with `prefix`.
    pub async fn list(&self, prefix: Option<&str>) -> Result<Vec<KvEntry>, AgentError> {
        self.store.kv_list(&self.scope, prefix).await
    }
}

/// The key-value handles a tool, capability, hook or policy sees.
#[derive(Clone, Debug)]
pub struct KvScopes {
    /// Keys private to the agent.
    pub agent: Kv,
    /// Keys shared under the agent's namespace.
    pub shared: Kv,
    /// Keys of the session's workspace; only when the session has one.
    pub workspace: Option<Kv>,
}

impl KvScopes {
    /// The three scopes of `store` for an agent, a shared namespace and an optional workspace.
    pub fn new(
        store: Arc<dyn Store>,
        agent_id: &str,
        namespace: &str,
        workspace: Option<&str>,
    ) -> KvScopes {
        KvScopes {
            agent: Kv::new(
                store.clone(),
                KvScope::Agent {
                    agent_id: agent_id.to_owned(),
                },
            ),
            shared: Kv::new(
                store.clone(),
                KvScope::Shared {
                    namespace: namespace.to_owned(),
                },
            ),
            workspace: workspace.map(|w| {
                Kv::new(
                    store,
                    KvScope::Workspace {
                        workspace: w.to_owned(),
                    },
                )
            }),
        }
    }
}

/// Host values keyed by type (like `http::Extensions`); cheap to clone, never put in messages.
#[derive(Clone, Default)]
pub struct Resources {
    map: Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Resources")
            .field("len", &self.map.len())
            .finish()
    }
}

impl Resources {
    /// An empty map.
    pub fn new() -> Resources {
        Resources::default()
    }

    /// Puts a value, replacing one of the same type.
    pub fn insert<T: Any + Send + Sync>(&mut self, value: T) {
        Arc::make_mut(&mut self.map).insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The same map with one more value.
    pub fn with<T: Any + Send + Sync>(mut self, value: T) -> Resources {
        self.insert(value);
        self
    }

    /// The value of type `T`, if any.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.map
            .get(&TypeId::of::<T>())
            .and_then(|value| value.downcast_ref::<T>())
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// How many values there are.
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_keyed_by_type() {
        #[derive(Debug, PartialEq)]
        struct Host(&'static str);
        let resources = Resources::new().with(Host("h")).with(7u32);
        assert_eq!(resources.get::<Host>(), Some(&Host("h")));
        assert_eq!(resources.get::<u32>(), Some(&7));
        assert_eq!(resources.get::<String>(), None);
        let copy = resources.clone().with(8u32);
        assert_eq!(
            resources.get::<u32>(),
            Some(&7),
            "a clone's insert leaves the original alone"
        );
        assert_eq!(copy.get::<u32>(), Some(&8));
    }
}
