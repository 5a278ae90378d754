//! Agent records on disk: one `agents/<id>.json` per record, checked against the engines that
//! run this time.
//!
//! A record that no longer fits is kept as it is and shown with one line saying why; it becomes
//! valid again by itself when the cause goes. Secret fields never stay in a record: a plain
//! value is moved to the vault and replaced by a `{"$secret": "<name>"}` reference.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use ahpd_sdk::plugin::{AgentRecord, Engine};
use serde_json::{Map, Value, json};

use crate::config::secret_ref;
use crate::fsutil;
use crate::vault::{self, Secret, Vault};

/// Why a put or delete was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The record is wrong (answered `-32602`); the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// The record or the vault could not be written (answered `-32603`).
    #[error("{0}")]
    Storage(String),
}

/// A record's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// It fits: one agent.
    Valid,
    /// It does not fit; the reason is one line.
    Invalid(String),
    /// No running plugin registers its engine.
    Unavailable(String),
}

impl Status {
    fn word(&self) -> &'static str {
        match self {
            Status::Valid => "valid",
            Status::Invalid(_) => "invalid",
            Status::Unavailable(_) => "unavailable",
        }
    }
}

/// An engine that runs this time, with the plugin that registered it.
#[derive(Clone)]
pub struct EngineSlot {
    /// The engine.
    pub engine: Arc<dyn Engine>,
    /// The plugin's name.
    pub plugin: String,
    /// The plugin's title (the name of the default record).
    pub title: String,
    /// The plugin's resolved options, handed to `Engine::agent`.
    pub options: Value,
    /// The plugin's place in the configuration, for ordering agents.
    pub order: usize,
}

impl EngineSlot {
    /// Top-level `config` keys the record schema marks `writeOnly`.
    pub fn secret_fields(&self) -> Vec<String> {
        let schema = self.engine.record_schema();
        schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|props| {
                props
                    .iter()
                    .filter(|(_, s)| s.get("writeOnly").and_then(Value::as_bool) == Some(true))
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The channel's description of the engine.
    pub fn describe(&self) -> Value {
        json!({
            "engine": self.engine.name(),
            "plugin": self.plugin,
            "title": self.title,
            "schema": self.engine.record_schema(),
            "template": Value::Object(self.engine.template()),
            "hostOnly": self.engine.host_only_fields(),
            "secretFields": self.secret_fields(),
        })
    }
}

/// One record as loaded and judged.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The id (the file name's stem).
    pub id: String,
    /// The record as stored, when the file is a JSON object.
    pub stored: Option<Map<String, Value>>,
    /// The parsed record, when it has the record's shape.
    pub record: Option<AgentRecord>,
    /// Its status.
    pub status: Status,
}

impl Entry {
    /// The record view clients see: the record as stored plus `status` and `reason`.
    pub fn view(&self) -> Value {
        let mut out = self.stored.clone().unwrap_or_else(|| {
            let mut m = Map::new();
            m.insert("id".into(), Value::String(self.id.clone()));
            m
        });
        out.insert("status".into(), Value::String(self.status.word().into()));
        match &self.status {
            Status::Valid => {
                out.remove("reason");
            }
            Status::Invalid(r) | Status::Unavailable(r) => {
                out.insert("reason".into(), Value::String(r.clone()));
            }
        }
        Value::Object(out)
    }
}

/// `^[a-z][a-z0-9-]{0,62}$`, not `ahp-…`, `x-…` or a well-known URI scheme.
fn check_id(id: &str) -> Result<(), String> {
    let mut chars = id.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !first_ok || !rest_ok || id.len() > 63 {
        return Err(
            "id: must start with a lowercase letter and hold up to 63 lowercase letters, digits and '-'"
                .into(),
        );
    }
    if id.starts_with("ahp-") || id.starts_with("x-") {
        return Err("id: must not start with ahp- or x-".into());
    }
    if matches!(id, "file" | "http" | "https" | "ws" | "wss") {
        return Err(format!("id: {id} is a reserved URI scheme"));
    }
    Ok(())
}

fn check_owner(owner: &str) -> Result<(), String> {
    if owner == "host" {
        return Ok(());
    }
    let scoped = owner
        .strip_prefix("team:")
        .or_else(|| owner.strip_prefix("user:"));
    match scoped {
        Some(id) if vault::is_scope_id(id) => Ok(()),
        _ => Err("owner: must be host, team:<team> or user:<id>".into()),
    }
}

/// The vault prefix of an owner's own secrets: `host:`, `team:<team>/`, `user:<id>/`.
fn scope_of(owner: &str) -> String {
    if owner == "host" {
        "host:".into()
    } else {
        format!("{owner}/")
    }
}

/// Checks the shape of a record object (no engine involved) and parses it.
pub(crate) fn check_shape(value: &Map<String, Value>) -> Result<AgentRecord, String> {
    let text = |key: &str| value.get(key).and_then(Value::as_str);
    let id = text("id").ok_or("id: must be a string")?;
    check_id(id)?;
    let owner = text("owner").ok_or("owner: must be a string")?;
    check_owner(owner)?;
    let name = text("name").ok_or("name: must be a string")?;
    if name.trim().is_empty() || name.chars().count() > 200 {
        return Err("name: must hold 1 to 200 characters".into());
    }
    if text("engine").is_none_or(str::is_empty) {
        return Err("engine: must name an engine".into());
    }
    for key in ["description", "icon", "model"] {
        if value.get(key).is_some_and(|v| !v.is_string()) {
            return Err(format!("{key}: must be a string"));
        }
    }
    if text("icon").is_some_and(|i| i.chars().count() > 2048) {
        return Err("icon: must hold at most 2048 characters".into());
    }
    match value.get("config") {
        None | Some(Value::Object(_)) => {}
        Some(_) => return Err("config: must be an object".into()),
    }
    for key in value.keys() {
        if !matches!(
            key.as_str(),
            "id" | "engine" | "owner" | "name" | "description" | "icon" | "model" | "config"
        ) {
            return Err(format!("{key}: not a field of an agent record"));
        }
    }
    serde_json::from_value(Value::Object(value.clone()))
        .map_err(|e| format!("not an agent record: {}", e.to_string().replace('`', "'")))
}

/// What an engine says about a record's fields, before anything is stored.
fn check_against_engine(record: &AgentRecord, slot: &EngineSlot) -> Result<(), String> {
    if record.config.contains_key("model") {
        return Err("config.model: set the record's model field instead".into());
    }
    if record.owner != "host" {
        for field in slot.engine.host_only_fields() {
            if record.config.contains_key(&field) {
                return Err(format!("config.{field}: only a host record may set it"));
            }
        }
    }
    slot.engine
        .check_record(&record.owner, &record.config)
        .map_err(|e| e.to_string())
}

/// The records folder and the vault beside it.
#[derive(Debug, Clone)]
pub struct RecordStore {
    dir: PathBuf,
    vault: Vault,
}

impl RecordStore {
    /// The store for `agents/` and the vault.
    pub fn new(dir: PathBuf, vault: Vault) -> Self {
        RecordStore { dir, vault }
    }

    /// The vault the store moves secrets to.
    pub fn vault(&self) -> &Vault {
        &self.vault
    }

    fn file_of(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Every record file, judged against `engines`; `taken` holds provider ids of fixed agents.
    pub fn load_all(&self, engines: &[EngineSlot], taken: &BTreeSet<String>) -> Vec<Entry> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = dir
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let id = name.strip_suffix(".json")?;
                (!id.starts_with('.') && e.path().is_file()).then(|| id.to_owned())
            })
            .collect();
        ids.sort();
        ids.into_iter()
            .map(|id| self.load_one(&id, engines, taken))
            .collect()
    }

    /// One record file, judged.
    pub fn load_one(&self, id: &str, engines: &[EngineSlot], taken: &BTreeSet<String>) -> Entry {
        let path = self.file_of(id);
        let invalid = |reason: String, stored: Option<Map<String, Value>>| Entry {
            id: id.to_owned(),
            stored,
            record: None,
            status: Status::Invalid(reason),
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => return invalid(format!("cannot read the file: {e}"), None),
        };
        let map = match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return invalid("not a JSON object".into(), None),
            Err(e) => {
                return invalid(
                    format!("not valid JSON at line {}, column {}", e.line(), e.column()),
                    None,
                );
            }
        };
        let record = match check_shape(&map) {
            Ok(r) => r,
            Err(reason) => return invalid(reason, Some(map)),
        };
        let status = self.judge(&record, engines, taken, Some(id));
        Entry {
            id: id.to_owned(),
            stored: Some(map),
            record: Some(record),
            status,
        }
    }

    fn judge(
        &self,
        record: &AgentRecord,
        engines: &[EngineSlot],
        taken: &BTreeSet<String>,
        file_id: Option<&str>,
    ) -> Status {
        if let Some(file_id) = file_id
            && file_id != record.id
        {
            return Status::Invalid(format!(
                "the file name {file_id}.json differs from the id {}",
                record.id
            ));
        }
        let Some(slot) = engines.iter().find(|s| s.engine.name() == record.engine) else {
            return Status::Unavailable(format!(
                "no enabled plugin registers the engine {}",
                record.engine
            ));
        };
        if let Err(reason) = check_against_engine(record, slot) {
            return Status::Invalid(reason);
        }
        if let Err(reason) = self.check_references(record, slot) {
            return Status::Invalid(reason);
        }
        if taken.contains(&record.id) {
            return Status::Invalid(format!(
                "the id {} is taken by an agent a plugin provides",
                record.id
            ));
        }
        Status::Valid
    }

    /// Every secret field holding a reference must name an entry the vault holds, inside the
    /// owner's scope.
    fn check_references(&self, record: &AgentRecord, slot: &EngineSlot) -> Result<(), String> {
        let scope = scope_of(&record.owner);
        for field in slot.secret_fields() {
            let Some(name) = record.config.get(&field).and_then(secret_ref) else {
                continue;
            };
            vault::check_name(name).map_err(|e| format!("config.{field}: {e}"))?;
            if !name.starts_with(&scope) {
                return Err(format!(
                    "config.{field}: a {} record may only name secrets under {scope}",
                    record.owner
                ));
            }
            match self.vault.contains(name) {
                Ok(true) => {}
                Ok(false) => return Err(format!("the vault holds no {name}")),
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    }

    /// Creates or replaces a record (the `x-ahpd/agents/put` command).
    pub fn put(
        &self,
        value: &Value,
        engines: &[EngineSlot],
        taken: &BTreeSet<String>,
        previous_owner: Option<&str>,
    ) -> Result<Entry, RecordError> {
        let Value::Object(map) = value else {
            return Err(RecordError::Invalid("record: must be an object".into()));
        };
        // A client may send back a view it was shown; its status fields are the daemon's own.
        let mut map = map.clone();
        map.remove("status");
        map.remove("reason");
        let map = &map;
        let mut record =
            check_shape(map).map_err(|e| RecordError::Invalid(format!("record.{e}")))?;
        let slot = engines
            .iter()
            .find(|s| s.engine.name() == record.engine)
            .ok_or_else(|| {
                RecordError::Invalid(format!(
                    "record.engine: no enabled plugin registers the engine {}",
                    record.engine
                ))
            })?;
        check_against_engine(&record, slot).map_err(RecordError::Invalid)?;
        let scope = scope_of(&record.owner);
        let own_prefix = format!("{scope}agent/{}/", record.id);
        // References must stay inside the owner's scope before anything is written.
        for field in slot.secret_fields() {
            if let Some(name) = record.config.get(&field).and_then(secret_ref) {
                vault::check_name(name)
                    .map_err(|e| RecordError::Invalid(format!("config.{field}: {e}")))?;
                if !name.starts_with(&scope) {
                    return Err(RecordError::Invalid(format!(
                        "config.{field}: a {} record may only name secrets under {scope}",
                        record.owner
                    )));
                }
            }
        }
        let storage = |e: vault::VaultError| RecordError::Storage(e.to_string());
        for field in slot.secret_fields() {
            let name = format!("{own_prefix}{field}");
            match record.config.get(&field) {
                Some(Value::String(plain)) => {
                    self.vault
                        .set(&name, &Secret::new(plain.clone()))
                        .map_err(storage)?;
                    record
                        .config
                        .insert(field.clone(), json!({ "$secret": name }));
                }
                Some(_) => {}
                None => match self.vault.delete(&name) {
                    Ok(()) | Err(vault::VaultError::Missing(_)) => {}
                    Err(e) => return Err(storage(e)),
                },
            }
        }
        // A record that changed hands leaves nothing in its former owner's scope.
        if let Some(prev) = previous_owner.filter(|p| *p != record.owner) {
            self.vault
                .delete_prefix(&format!("{}agent/{}/", scope_of(prev), record.id))
                .map_err(storage)?;
        }
        let stored = serde_json::to_value(&record)
            .map_err(|e| RecordError::Storage(format!("cannot encode the record: {e}")))?;
        fsutil::ensure_dir(&self.dir)
            .and_then(|()| {
                fsutil::write_json(&self.file_of(&record.id), &stored, fsutil::PRIVATE_FILE)
            })
            .map_err(|e| {
                RecordError::Storage(format!("cannot write the record {}: {e}", record.id))
            })?;
        let status = self.judge(&record, engines, taken, None);
        Ok(Entry {
            id: record.id.clone(),
            stored: stored.as_object().cloned(),
            record: Some(record),
            status,
        })
    }

    /// Removes a record and its own vault entries (the `x-ahpd/agents/delete` command).
    pub fn delete(&self, id: &str, owner: Option<&str>) -> Result<(), RecordError> {
        let path = self.file_of(id);
        if check_id(id).is_err() || !path.is_file() {
            return Err(RecordError::Invalid(format!("no record has the id {id:?}")));
        }
        std::fs::remove_file(&path)
            .map_err(|e| RecordError::Storage(format!("cannot remove the record {id}: {e}")))?;
        let scope = scope_of(owner.unwrap_or("host"));
        self.vault
            .delete_prefix(&format!("{scope}agent/{id}/"))
            .map_err(|e| RecordError::Storage(e.to_string()))
    }

    /// Writes a default record for each engine that has none and was never seeded.
    pub fn seed(&self, engines: &[EngineSlot]) -> std::io::Result<()> {
        let seeded_path = self.dir.join(".seeded");
        let mut seeded: Vec<String> = std::fs::read_to_string(&seeded_path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        let existing = self.load_all(&[], &BTreeSet::new());
        let mut changed = false;
        for slot in engines {
            let engine = slot.engine.name();
            if seeded.iter().any(|s| s == engine) {
                continue;
            }
            let has_record = existing
                .iter()
                .any(|e| e.record.as_ref().is_some_and(|r| r.engine == engine));
            let path = self.file_of(engine);
            if !has_record && !path.exists() && check_id(engine).is_ok() {
                let record = AgentRecord {
                    id: engine.to_owned(),
                    engine: engine.to_owned(),
                    owner: "host".into(),
                    name: slot.title.clone(),
                    description: None,
                    icon: None,
                    model: None,
                    config: slot.engine.template(),
                };
                let value = serde_json::to_value(&record).map_err(std::io::Error::other)?;
                fsutil::write_json(&path, &value, fsutil::PRIVATE_FILE)?;
                tracing::info!(
                    record = engine,
                    "wrote the default record of the engine {engine}"
                );
            }
            seeded.push(engine.to_owned());
            changed = true;
        }
        if changed {
            fsutil::write_json(&seeded_path, &json!(seeded), fsutil::PRIVATE_FILE)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_rule() {
        for good in ["echo", "echo-two", "a1"] {
            assert!(check_id(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Echo",
            "1a",
            "ahp-x",
            "x-y",
            "file",
            "a_b",
            &"a".repeat(64),
        ] {
            assert!(check_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shape_errors_name_the_field() {
        let map = |v: Value| v.as_object().cloned().expect("object");
        let err = check_shape(&map(
            json!({"id": "a", "engine": "echo", "owner": "team:Core", "name": "A"}),
        ))
        .expect_err("bad owner");
        assert!(err.starts_with("owner:"), "{err}");
        let err = check_shape(&map(
            json!({"id": "a", "engine": "echo", "owner": "host", "name": ""}),
        ))
        .expect_err("empty name");
        assert!(err.starts_with("name:"), "{err}");
        let ok = check_shape(&map(
            json!({"id": "a", "engine": "echo", "owner": "user:ann", "name": "A", "config": {}}),
        ))
        .expect("valid");
        assert_eq!(ok.owner, "user:ann");
    }
}
