//! A plugin's options: merging layers, setting dotted keys, answering `$secret` references and
//! checking the result against the plugin's JSON Schema.
//!
//! Every message here is built from key paths and schema keywords, never from a value, so a
//! secret that landed in the wrong option is not repeated back.

use std::path::Path;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use serde_json::{Map, Value};

use crate::config::secret_ref;
use crate::locations;
use crate::vault::{self, Vault, VaultError};

/// Merges `over` into `base`: objects merge key by key, anything else replaces.
pub fn deep_merge(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    // A `$secret` reference is a leaf: merging it into an object would mix keys.
                    Some(slot) if secret_ref(v).is_none() => deep_merge(slot, v),
                    _ => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// A `--plugin-option` or `plugin config` value: JSON when it parses as JSON, else a string.
pub fn parse_value(raw: &str) -> Value {
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// Sets `value` at the dotted `key` inside `options`, creating objects on the way.
pub(crate) fn set_dotted(
    options: &mut Map<String, Value>,
    key: &str,
    value: Value,
) -> Result<(), String> {
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(format!("{key:?} is not a dotted option key"));
    }
    let mut cur = options;
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            cur.insert((*part).to_owned(), value);
            return Ok(());
        }
        let slot = cur
            .entry((*part).to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if !slot.is_object() || secret_ref(slot).is_some() {
            *slot = Value::Object(Map::new());
        }
        let Value::Object(next) = slot else {
            return Err(format!("{key:?} is not a dotted option key"));
        };
        cur = next;
    }
    Ok(())
}

/// Reads the value at a dotted key.
pub fn get_dotted<'a>(options: &'a Value, key: &str) -> Option<&'a Value> {
    key.split('.').try_fold(options, |cur, part| cur.get(part))
}

/// Removes the value at a dotted key; returns whether something was removed.
pub fn remove_dotted(options: &mut Map<String, Value>, key: &str) -> bool {
    match key.split_once('.') {
        None => options.remove(key).is_some(),
        Some((head, rest)) => match options.get_mut(head) {
            Some(Value::Object(inner)) => remove_dotted(inner, rest),
            _ => false,
        },
    }
}

/// A value taken out of the options by [`take_secret_at_use`]: its path and itself.
pub type Kept = Vec<(Vec<String>, Value)>;

/// Takes out every value whose schema is marked `x-ahpd-secret-at-use`, following
/// `properties` and `additionalProperties`, so `$secret` references in them stay as written.
pub fn take_secret_at_use(value: &mut Value, schema: &Value) -> Kept {
    fn walk(value: &mut Value, schema: &Value, path: &mut Vec<String>, out: &mut Kept) {
        let Some(obj) = value.as_object_mut() else {
            return;
        };
        let keys: Vec<String> = obj.keys().cloned().collect();
        for k in keys {
            let sub = schema
                .get("properties")
                .and_then(|p| p.get(&k))
                .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()));
            let Some(sub) = sub else { continue };
            path.push(k.clone());
            if sub.get("x-ahpd-secret-at-use") == Some(&Value::Bool(true)) {
                if let Some(v) = obj.remove(&k) {
                    out.push((path.clone(), v));
                }
            } else if let Some(v) = obj.get_mut(&k) {
                walk(v, sub, path, out);
            }
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(value, schema, &mut Vec::new(), &mut out);
    out
}

/// Puts back what [`take_secret_at_use`] took.
pub fn put_back(value: &mut Value, kept: Kept) {
    for (path, v) in kept {
        let Some((last, parents)) = path.split_last() else {
            continue;
        };
        let pointer: String = parents
            .iter()
            .map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1")))
            .collect();
        if let Some(obj) = value.pointer_mut(&pointer).and_then(Value::as_object_mut) {
            obj.insert(last.clone(), v);
        }
    }
}

/// How `$secret` references are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecretMode {
    /// Check the names only and put a placeholder in place of each value (`plugin list`).
    NamesOnly,
    /// Put each value in place (just before `apply`).
    Values,
}

/// Replaces every `{"$secret": "<name>"}` in `value`; the first that cannot be answered is the
/// error (`the vault holds no <name>`).
pub(crate) fn resolve_secrets(
    value: &mut Value,
    vault: &Vault,
    mode: SecretMode,
) -> Result<(), String> {
    if let Some(name) = secret_ref(value) {
        let name = name.to_owned();
        vault::check_name(&name).map_err(|e| e.to_string())?;
        *value = match mode {
            SecretMode::NamesOnly => {
                if !vault.contains(&name).map_err(|e| e.to_string())? {
                    return Err(VaultError::Missing(name).to_string());
                }
                Value::String("<set>".into())
            }
            SecretMode::Values => Value::String(
                vault
                    .read(&name)
                    .map_err(|e| e.to_string())?
                    .expose()
                    .to_owned(),
            ),
        };
        return Ok(());
    }
    match value {
        Value::Object(map) => map
            .values_mut()
            .try_for_each(|v| resolve_secrets(v, vault, mode)),
        Value::Array(items) => items
            .iter_mut()
            .try_for_each(|v| resolve_secrets(v, vault, mode)),
        _ => Ok(()),
    }
}

/// Resolves relative strings of options the schema marks `"format": "path"` against `base`.
pub fn resolve_path_options(schema: &Value, value: &mut Value, base: &Path) {
    match value {
        Value::String(s) if schema.get("format").and_then(Value::as_str) == Some("path") => {
            if let Ok(p) = locations::resolve_path(s, base) {
                *s = p.display().to_string();
            }
        }
        Value::Object(map) => {
            let props = schema.get("properties");
            for (k, v) in map.iter_mut() {
                if let Some(sub) = props.and_then(|p| p.get(k)) {
                    resolve_path_options(sub, v, base);
                }
            }
        }
        _ => {}
    }
}

/// Keys the schema marks `writeOnly` (at any depth through `properties`), as dotted paths.
pub fn write_only_keys(schema: &Value) -> Vec<String> {
    fn walk(schema: &Value, prefix: &str, out: &mut Vec<String>) {
        let Some(props) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        for (k, sub) in props {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            if sub.get("writeOnly").and_then(Value::as_bool) == Some(true) {
                out.push(path.clone());
            }
            walk(sub, &path, out);
        }
    }
    let mut out = Vec::new();
    walk(schema, "", &mut out);
    out
}

/// Replaces plain strings at the schema's `writeOnly` keys with `<set>`; references stay.
pub fn mask_write_only(schema: &Value, options: &mut Value) {
    fn mask_at(value: &mut Value, parts: &[&str]) {
        match parts.split_first() {
            None => {
                if value.is_string() {
                    *value = Value::String("<set>".into());
                }
            }
            Some((head, rest)) => {
                if let Some(next) = value.get_mut(*head) {
                    mask_at(next, rest);
                }
            }
        }
    }
    for key in write_only_keys(schema) {
        let parts: Vec<&str> = key.split('.').collect();
        mask_at(options, &parts);
    }
}

fn type_name(kind: &TypeKind) -> String {
    let one = |t: &str| -> String {
        match t {
            "boolean" => "true or false".into(),
            "integer" => "an integer".into(),
            "array" => "an array".into(),
            "object" => "an object".into(),
            "null" => "null".into(),
            other => format!("a {other}"),
        }
    };
    match kind {
        TypeKind::Single(t) => one(&t.to_string()),
        TypeKind::Multiple(set) => set
            .iter()
            .map(|t| one(&t.to_string()))
            .collect::<Vec<_>>()
            .join(" or "),
    }
}

/// Checks `options` against `schema`; the error is one line `<prefix>.<dotted key>: <problem>`.
pub(crate) fn validate(schema: &Value, options: &Value, prefix: &str) -> Result<(), String> {
    let validator = jsonschema::options()
        .should_ignore_unknown_formats(true)
        .build(schema)
        .map_err(|e| {
            format!(
                "{prefix}: the plugin's options schema is broken ({})",
                e.kind().keyword()
            )
        })?;
    let Some(err) = validator.iter_errors(options).next() else {
        return Ok(());
    };
    let mut path: Vec<String> = err
        .instance_path()
        .segments()
        .map(|s| s.to_string())
        .collect();
    let problem = match err.kind() {
        ValidationErrorKind::Type { kind } => format!("must be {}", type_name(kind)),
        ValidationErrorKind::Required { property } => {
            if let Some(p) = property.as_str() {
                path.push(p.to_owned());
            }
            "is required".to_owned()
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            format!("unknown option {}", unexpected.join(", "))
        }
        ValidationErrorKind::Enum { options } => format!("must be one of {options}"),
        ValidationErrorKind::Constant { expected_value } => format!("must be {expected_value}"),
        ValidationErrorKind::Minimum { limit } => format!("must be at least {limit}"),
        ValidationErrorKind::Maximum { limit } => format!("must be at most {limit}"),
        ValidationErrorKind::ExclusiveMinimum { limit } => format!("must be more than {limit}"),
        ValidationErrorKind::ExclusiveMaximum { limit } => format!("must be less than {limit}"),
        ValidationErrorKind::MinLength { limit } => {
            format!("must be at least {limit} characters long")
        }
        ValidationErrorKind::MaxLength { limit } => {
            format!("must be at most {limit} characters long")
        }
        ValidationErrorKind::MinItems { limit } => format!("must hold at least {limit} items"),
        ValidationErrorKind::MaxItems { limit } => format!("must hold at most {limit} items"),
        ValidationErrorKind::Pattern { pattern } => format!("must match {pattern}"),
        ValidationErrorKind::Format { format } => format!("must be a {format}"),
        ValidationErrorKind::UniqueItems => "must not repeat an item".to_owned(),
        other => format!("does not fit the schema ({})", other.keyword()),
    };
    let at = if path.is_empty() {
        prefix.to_owned()
    } else {
        format!("{prefix}.{}", path.join("."))
    };
    Err(format!("{at}: {problem}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_objects_and_replace_the_rest() {
        let mut base = json!({"tools": {"files": true, "web": {"search": ["a"]}}, "n": 1});
        deep_merge(
            &mut base,
            &json!({"tools": {"web": {"search": ["b"]}}, "n": 2}),
        );
        assert_eq!(
            base,
            json!({"tools": {"files": true, "web": {"search": ["b"]}}, "n": 2})
        );
    }

    #[test]
    fn dotted_keys() {
        let mut m = Map::new();
        set_dotted(&mut m, "tools.web.search", parse_value("[\"x\"]")).expect("set");
        set_dotted(&mut m, "name", parse_value("plain words")).expect("set");
        let v = Value::Object(m.clone());
        assert_eq!(get_dotted(&v, "tools.web.search"), Some(&json!(["x"])));
        assert_eq!(get_dotted(&v, "name"), Some(&json!("plain words")));
        assert!(remove_dotted(&mut m, "tools.web.search"));
        assert!(!remove_dotted(&mut m, "tools.web.search"));
    }

    #[test]
    fn schema_errors_name_the_key_and_never_the_value() {
        let schema = json!({
            "type": "object",
            "properties": {"tools": {"type": "object", "properties": {"files": {"type": "boolean"}}}},
        });
        let err = validate(
            &schema,
            &json!({"tools": {"files": "sk-secret"}}),
            "plugins.p.options",
        )
        .expect_err("wrong type");
        assert_eq!(err, "plugins.p.options.tools.files: must be true or false");
    }

    #[test]
    fn secrets_resolve_or_name_the_missing_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vault = Vault::new(dir.path().join("vault.json"));
        vault
            .set("host:k", &vault::Secret::new("v".into()))
            .expect("set");
        let mut opts = json!({"a": {"$secret": "host:k"}, "b": [{"$secret": "host:k"}]});
        resolve_secrets(&mut opts, &vault, SecretMode::Values).expect("resolved");
        assert_eq!(opts, json!({"a": "v", "b": ["v"]}));
        let mut opts = json!({"a": {"$secret": "host:nope"}});
        let err = resolve_secrets(&mut opts, &vault, SecretMode::NamesOnly).expect_err("missing");
        assert_eq!(err, "the vault holds no host:nope");
    }
}
