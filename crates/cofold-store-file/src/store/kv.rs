//! Key-value entries on disk: one JSON file per key.

use std::fs;
use std::io;
use std::path::PathBuf;

use cofold_agents::error::AgentError;
use cofold_agents::store::{KvEntry, KvScope};
use serde_json::Value;

use super::Inner;
use crate::durable::{Sync, write_json};
use crate::home::workspace_slug;
use crate::jsonl::{create_dirs, io_error, read_json, sorted_entries};
use crate::names::{decode_segment, encode_segment};

impl Inner {
    /// `kv/agent/<agentId>/`, `kv/shared/<namespace>/` or `workspaces/<slug>/kv/`.
    fn kv_folder(&self, scope: &KvScope) -> Result<PathBuf, AgentError> {
        Ok(match scope {
            KvScope::Agent { agent_id } => self
                .root
                .join("kv")
                .join("agent")
                .join(encode_segment("agent id", agent_id)?),
            KvScope::Shared { namespace } => self
                .root
                .join("kv")
                .join("shared")
                .join(encode_segment("kv namespace", namespace)?),
            KvScope::Workspace { workspace } => self
                .root
                .join("workspaces")
                .join(workspace_slug(workspace))
                .join("kv"),
        })
    }

    fn kv_path(&self, scope: &KvScope, key: &str) -> Result<PathBuf, AgentError> {
        Ok(self
            .kv_folder(scope)?
            .join(format!("{}.json", encode_segment("kv key", key)?)))
    }

    pub(crate) fn kv_get(&self, scope: &KvScope, key: &str) -> Result<Option<Value>, AgentError> {
        read_json(&self.kv_path(scope, key)?)
    }

    pub(crate) fn kv_set(
        &self,
        scope: &KvScope,
        key: &str,
        value: &Value,
    ) -> Result<(), AgentError> {
        let path = self.kv_path(scope, key)?;
        create_dirs(&self.kv_folder(scope)?)?;
        write_json(&path, value, Sync::Durable)
    }

    pub(crate) fn kv_delete(&self, scope: &KvScope, key: &str) -> Result<(), AgentError> {
        let path = self.kv_path(scope, key)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(err) => Err(io_error("remove", &path, &err)),
        }
    }

    pub(crate) fn kv_list(
        &self,
        scope: &KvScope,
        prefix: Option<&str>,
    ) -> Result<Vec<KvEntry>, AgentError> {
        let folder = self.kv_folder(scope)?;
        let mut entries = Vec::new();
        for name in sorted_entries(&folder)? {
            let Some(stem) = name.strip_suffix(".json") else {
                continue;
            };
            let Some(key) = decode_segment(stem) else {
                continue;
            };
            if prefix.is_some_and(|prefix| !key.starts_with(prefix)) {
                continue;
            }
            if let Some(value) = read_json(&folder.join(&name))? {
                entries.push(KvEntry { key, value });
            }
        }
        // File names sort by their encoding; callers expect the keys' own order.
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(entries)
    }
}
