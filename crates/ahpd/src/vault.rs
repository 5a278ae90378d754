//! The vault: named secrets in `vault.json` beside the base configuration file.
//!
//! The file is plain JSON protected only by its mode (`0600`, folder `0700`). Values never leave
//! this module except through [`Secret::expose`], and [`Secret`] prints as `<redacted>`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::fsutil;

/// A secret value; its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: String) -> Self {
        Secret(value)
    }

    /// The value itself, for the one place that must use it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// What can go wrong with the vault. No variant carries a value.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// The name does not follow the scoped naming rule.
    #[error(
        "{0:?} is not a vault name: use host:<name>, team:<team>/<name> or user:<id>/<name>, \
         where <name> uses letters, digits, '.', '_', '-' and '/'"
    )]
    BadName(String),
    /// The vault has no entry of that name.
    #[error("the vault holds no {0}")]
    Missing(String),
    /// The file exists but is not a JSON object of strings.
    #[error("the vault cannot be read: {0}")]
    Unreadable(String),
    /// Reading or writing the file failed.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// Checks a secret's name: `host:<name>`, `team:<team>/<name>` or `user:<id>/<name>`.
pub fn check_name(name: &str) -> Result<(), VaultError> {
    let bad = || VaultError::BadName(name.to_owned());
    if name.len() > 200 {
        return Err(bad());
    }
    let rest = if let Some(rest) = name.strip_prefix("host:") {
        rest
    } else if let Some(rest) = name
        .strip_prefix("team:")
        .or_else(|| name.strip_prefix("user:"))
    {
        let (scope, rest) = rest.split_once('/').ok_or_else(bad)?;
        if !is_scope_id(scope) {
            return Err(bad());
        }
        rest
    } else {
        return Err(bad());
    };
    let chars_ok = rest
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
    let segments_ok = rest.split('/').all(|s| !s.is_empty() && s != "..");
    if rest.is_empty() || !chars_ok || !segments_ok {
        return Err(bad());
    }
    Ok(())
}

/// `^[a-z0-9][a-z0-9._-]{0,62}$`: a team or person id.
pub fn is_scope_id(id: &str) -> bool {
    let mut chars = id.chars();
    match chars.next() {
        Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit() => {}
        _ => return false,
    }
    id.len() <= 63
        && chars
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

/// The vault file. Every read goes to disk, so a value set while the daemon runs is seen.
#[derive(Debug, Clone)]
pub struct Vault {
    path: PathBuf,
}

impl Vault {
    /// The vault at `path` (which need not exist).
    pub fn new(path: PathBuf) -> Self {
        Vault { path }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn load(&self) -> Result<BTreeMap<String, String>, VaultError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(source) => {
                return Err(VaultError::Io {
                    action: "read",
                    path: self.path.clone(),
                    source,
                });
            }
        };
        if fsutil::tighten(&self.path).unwrap_or(false) {
            tracing::warn!(file = %self.path.display(), "the vault was readable by others; its mode is now 0600");
        }
        let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
            VaultError::Unreadable(format!(
                "not valid JSON at line {}, column {}",
                e.line(),
                e.column()
            ))
        })?;
        let serde_json::Value::Object(map) = value else {
            return Err(VaultError::Unreadable("it is not a JSON object".into()));
        };
        let mut out = BTreeMap::new();
        for (k, v) in map {
            match v {
                serde_json::Value::String(s) => {
                    out.insert(k, s);
                }
                _ => {
                    return Err(VaultError::Unreadable(format!(
                        "the entry {k:?} is not a string"
                    )));
                }
            }
        }
        Ok(out)
    }

    fn store(&self, map: &BTreeMap<String, String>) -> Result<(), VaultError> {
        let value = serde_json::to_value(map).map_err(|e| VaultError::Io {
            action: "write",
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        fsutil::write_json(&self.path, &value, fsutil::PRIVATE_FILE).map_err(|source| {
            VaultError::Io {
                action: "write",
                path: self.path.clone(),
                source,
            }
        })
    }

    /// Reads one secret.
    pub fn read(&self, name: &str) -> Result<Secret, VaultError> {
        check_name(name)?;
        self.load()?
            .remove(name)
            .map(Secret)
            .ok_or_else(|| VaultError::Missing(name.to_owned()))
    }

    /// Whether the vault holds `name` (reads names only, for readiness checks).
    pub fn contains(&self, name: &str) -> Result<bool, VaultError> {
        Ok(self.load()?.contains_key(name))
    }

    /// The names held, sorted.
    pub fn names(&self) -> Result<Vec<String>, VaultError> {
        Ok(self.load()?.into_keys().collect())
    }

    /// Stores `value` under `name`, replacing any earlier value.
    pub fn set(&self, name: &str, value: &Secret) -> Result<(), VaultError> {
        check_name(name)?;
        let mut map = self.load()?;
        map.insert(name.to_owned(), value.0.clone());
        self.store(&map)
    }

    /// Removes `name`; an absent name is [`VaultError::Missing`].
    pub fn delete(&self, name: &str) -> Result<(), VaultError> {
        let mut map = self.load()?;
        if map.remove(name).is_none() {
            return Err(VaultError::Missing(name.to_owned()));
        }
        self.store(&map)
    }

    /// Removes every entry whose name starts with `prefix`; absent entries are fine.
    pub fn delete_prefix(&self, prefix: &str) -> Result<(), VaultError> {
        let mut map = self.load()?;
        let before = map.len();
        map.retain(|k, _| !k.starts_with(prefix));
        if map.len() != before {
            self.store(&map)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_scoped_rule() {
        for good in [
            "host:deepseek",
            "host:agent/echo-two/apiKey",
            "team:core/key",
            "user:ann.b/k_1",
        ] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "bad-name",
            "host:",
            "host:a//b",
            "host:a/../b",
            "team:/x",
            "team:Core/x",
            "user:u",
            "host:a b",
            "host:é",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert!(check_name(&format!("host:{}", "a".repeat(200))).is_err());
    }

    #[test]
    fn round_trip_and_mode() {
        let dir = tempfile::tempdir().expect("tempdir");
        let vault = Vault::new(dir.path().join("vault.json"));
        vault.set("host:k", &Secret::new("v1".into())).expect("set");
        assert_eq!(vault.read("host:k").expect("read").expose(), "v1");
        assert_eq!(fsutil::mode_of(vault.path()), Some(0o600));
        assert_eq!(
            format!("{:?}", vault.read("host:k").expect("read")),
            "<redacted>"
        );
        vault.delete("host:k").expect("delete");
        assert!(matches!(
            vault.delete("host:k"),
            Err(VaultError::Missing(_))
        ));
    }

    #[test]
    fn an_unreadable_vault_is_never_overwritten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("vault.json");
        std::fs::write(&path, "{\"host:a\": \"sec").expect("write");
        let vault = Vault::new(path.clone());
        let err = vault
            .set("host:b", &Secret::new("x".into()))
            .expect_err("refused");
        assert!(
            err.to_string()
                .starts_with("the vault cannot be read: not valid JSON at line 1")
        );
        assert!(!err.to_string().contains("sec"));
        assert_eq!(
            std::fs::read_to_string(&path).expect("read"),
            "{\"host:a\": \"sec"
        );
    }
}
