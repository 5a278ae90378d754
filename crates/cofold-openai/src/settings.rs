//! A provider's transport settings: time limits, retries, network and dialect, with their
//! defaults and their reading from a provider entry of the configuration.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::dialect::{Dialect, EffortParam, MaxTokensField, ReasoningEcho, ReasoningField};

/// How long a request may take at each stage; `None` means no limit. Each expiry is a retryable
/// network error naming the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeLimits {
    /// Until the TCP (and TLS) connection stands. Default 10 s.
    pub connect: Option<Duration>,
    /// From sending the request until the first byte of the answer's body. Default 120 s, as
    /// reasoning models may think that long before their first token.
    pub first_byte: Option<Duration>,
    /// The longest gap between two reads of an answer's body. Default 90 s.
    pub idle: Option<Duration>,
    /// From sending a request asked without streaming until its answer starts. Such an answer
    /// only comes once the model has finished (a long summary, a whole tool-calling turn), so
    /// it gets a limit of its own. Default 600 s.
    pub whole: Option<Duration>,
}

impl Default for TimeLimits {
    fn default() -> Self {
        TimeLimits {
            connect: Some(Duration::from_secs(10)),
            first_byte: Some(Duration::from_secs(120)),
            idle: Some(Duration::from_secs(90)),
            whole: Some(Duration::from_secs(600)),
        }
    }
}

impl TimeLimits {
    /// No limit at all (tests on a paused clock use this: a pending timer there fires as soon as
    /// the runtime has nothing else to do).
    pub const NONE: TimeLimits = TimeLimits {
        connect: None,
        first_byte: None,
        idle: None,
        whole: None,
    };
}

/// How failed attempts are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included (default 3).
    pub max_attempts: u32,
    /// The longest wait a server's `Retry-After` or `x-ratelimit-reset-*` is honoured up to;
    /// a server asking for more ends the retries (default 60 s).
    pub max_wait: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            max_wait: Duration::from_secs(60),
        }
    }
}

/// How the endpoint is reached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Network {
    /// A proxy URL for every request of this provider, over the environment's.
    pub proxy: Option<String>,
    /// A PEM file of certificates trusted besides the system's and the bundled roots.
    pub extra_ca_certs: Option<PathBuf>,
    /// Where `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` are read (either case);
    /// `None` reads the process's environment.
    pub env: Option<HashMap<String, String>>,
}

/// The settings a provider entry may carry besides its id, base URL, key and headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderSettings {
    /// The dialect: a preset by name (else the one the base URL implies) with the entry's quirks
    /// over it. `None` until [`ProviderSettings::dialect_for`] decides.
    pub dialect: Option<String>,
    /// The quirks as written, applied over the preset.
    pub quirks: Map<String, Value>,
    /// Time limits.
    pub limits: TimeLimits,
    /// Retries.
    pub retry: RetryPolicy,
    /// Proxy and certificates.
    pub network: Network,
}

/// A setting that cannot be read: the key under the provider entry and what it must be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} {must}")]
pub struct SettingsError {
    /// The key, such as `quirks.streamOptions`.
    pub key: String,
    /// What it must be (`must be a boolean`).
    pub must: String,
}

fn bad(key: &str, must: impl Into<String>) -> SettingsError {
    SettingsError {
        key: key.to_owned(),
        must: must.into(),
    }
}

/// The keys of a provider entry these settings own.
pub const SETTINGS_KEYS: [&str; 10] = [
    "dialect",
    "quirks",
    "connectTimeoutMs",
    "firstByteTimeoutMs",
    "idleTimeoutMs",
    "wholeTimeoutMs",
    "maxAttempts",
    "maxRetryWaitMs",
    "proxy",
    "extraCaCerts",
];

/// The quirk keys and the values each takes.
pub const QUIRK_KEYS: [(&str, &str); 9] = [
    (
        "reasoningEcho",
        "\"never\", \"auto\", \"reasoning_content\" or \"reasoning\"",
    ),
    (
        "maxTokensField",
        "\"max_tokens\" or \"max_completion_tokens\"",
    ),
    ("streamOptions", "a boolean"),
    ("promptCacheKey", "a boolean"),
    ("parallelToolCalls", "a boolean or null"),
    (
        "reasoningEffortParam",
        "\"reasoning_effort\", \"reasoning\" or \"none\"",
    ),
    ("streamTools", "a boolean"),
    ("repairToolIndex", "a boolean"),
    ("requireDone", "a boolean"),
];

/// A millisecond count where 0 means no limit.
fn limit(key: &str, v: &Value) -> Result<Option<Duration>, SettingsError> {
    match v.as_u64() {
        Some(0) => Ok(None),
        Some(ms) => Ok(Some(Duration::from_millis(ms))),
        None => Err(bad(
            key,
            "must be a whole number of milliseconds (0 for no limit)",
        )),
    }
}

fn text(key: &str, v: &Value) -> Result<String, SettingsError> {
    match v.as_str() {
        Some(s) if !s.trim().is_empty() => Ok(s.to_owned()),
        _ => Err(bad(key, "must be a non-empty string")),
    }
}

impl ProviderSettings {
    /// Reads the settings keys of a provider entry (other keys are left to the caller). Values
    /// are checked; the first bad one is the error.
    pub fn from_entry(entry: &Map<String, Value>) -> Result<ProviderSettings, SettingsError> {
        let mut s = ProviderSettings::default();
        for (key, v) in entry {
            match key.as_str() {
                "dialect" => {
                    let name = text(key, v)?;
                    if Dialect::preset(&name).is_none() {
                        return Err(bad(
                            key,
                            format!("must be one of {}", crate::dialect::DIALECTS.join(", ")),
                        ));
                    }
                    s.dialect = Some(name);
                }
                "quirks" => {
                    let Some(map) = v.as_object() else {
                        return Err(bad(key, "must be an object"));
                    };
                    // Checked against a generic dialect so every key and value is validated now.
                    apply_quirks(&mut Dialect::default(), map)?;
                    s.quirks = map.clone();
                }
                "connectTimeoutMs" => s.limits.connect = limit(key, v)?,
                "firstByteTimeoutMs" => s.limits.first_byte = limit(key, v)?,
                "idleTimeoutMs" => s.limits.idle = limit(key, v)?,
                "wholeTimeoutMs" => s.limits.whole = limit(key, v)?,
                "maxAttempts" => {
                    s.retry.max_attempts = v
                        .as_u64()
                        .filter(|n| (1..=20).contains(n))
                        .map(|n| n as u32)
                        .ok_or_else(|| bad(key, "must be a whole number from 1 to 20"))?;
                }
                "maxRetryWaitMs" => {
                    s.retry.max_wait = v
                        .as_u64()
                        .map(Duration::from_millis)
                        .ok_or_else(|| bad(key, "must be a whole number of milliseconds"))?;
                }
                "proxy" => {
                    let url = text(key, v)?;
                    if url::Url::parse(&url).is_err() {
                        return Err(bad(key, "must be a URL such as http://proxy:3128"));
                    }
                    s.network.proxy = Some(url);
                }
                "extraCaCerts" => s.network.extra_ca_certs = Some(PathBuf::from(text(key, v)?)),
                _ => {}
            }
        }
        Ok(s)
    }

    /// The dialect for `base_url`: the named preset, else the one the URL implies, with the
    /// quirks over it.
    pub fn dialect_for(&self, base_url: &str) -> Dialect {
        let mut d = self
            .dialect
            .as_deref()
            .and_then(Dialect::preset)
            .unwrap_or_else(|| Dialect::for_base_url(base_url));
        // The quirks were checked when read; one that fails here keeps the preset's value.
        if let Err(e) = apply_quirks(&mut d, &self.quirks) {
            tracing::warn!("provider quirks: {e}");
        }
        d
    }
}

fn flag(key: &str, v: &Value) -> Result<bool, SettingsError> {
    v.as_bool().ok_or_else(|| bad(key, "must be a boolean"))
}

/// Sets each quirk of `map` on `d`.
pub fn apply_quirks(d: &mut Dialect, map: &Map<String, Value>) -> Result<(), SettingsError> {
    for (name, v) in map {
        let key = format!("quirks.{name}");
        let one_of = || {
            let values = QUIRK_KEYS
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, vals)| *vals)
                .unwrap_or("");
            bad(&key, format!("must be {values}"))
        };
        match name.as_str() {
            "reasoningEcho" => {
                d.reasoning_echo = match v.as_str() {
                    Some("never") => ReasoningEcho::Never,
                    Some("auto") => ReasoningEcho::Auto,
                    Some("reasoning_content") => {
                        ReasoningEcho::Field(ReasoningField::ReasoningContent)
                    }
                    Some("reasoning") => ReasoningEcho::Field(ReasoningField::Reasoning),
                    _ => return Err(one_of()),
                }
            }
            "maxTokensField" => {
                d.max_tokens_field = match v.as_str() {
                    Some("max_tokens") => MaxTokensField::MaxTokens,
                    Some("max_completion_tokens") => MaxTokensField::MaxCompletionTokens,
                    _ => return Err(one_of()),
                }
            }
            "streamOptions" => d.stream_options = flag(&key, v)?,
            "promptCacheKey" => d.prompt_cache_key = flag(&key, v)?,
            "parallelToolCalls" => {
                d.parallel_tool_calls = match v {
                    Value::Null => None,
                    Value::Bool(b) => Some(*b),
                    _ => return Err(one_of()),
                }
            }
            "reasoningEffortParam" => {
                d.reasoning_effort = match v.as_str() {
                    Some("reasoning_effort") => EffortParam::ReasoningEffort,
                    Some("reasoning") => EffortParam::ReasoningObject,
                    Some("none") => EffortParam::Omit,
                    _ => return Err(one_of()),
                }
            }
            "streamTools" => d.stream_tools = flag(&key, v)?,
            "repairToolIndex" => d.repair_tool_index = flag(&key, v)?,
            "requireDone" => d.require_done = flag(&key, v)?,
            _ => {
                let names: Vec<&str> = QUIRK_KEYS.iter().map(|(k, _)| *k).collect();
                return Err(bad(
                    &key,
                    format!("is not a quirk; the quirks are {}", names.join(", ")),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Result<ProviderSettings, String> {
        ProviderSettings::from_entry(v.as_object().expect("object")).map_err(|e| e.to_string())
    }

    #[test]
    fn entries_are_read_and_checked() {
        let s = read(
            json!({ "id": "x", "dialect": "deepseek", "idleTimeoutMs": 0,
            "firstByteTimeoutMs": 300000, "maxAttempts": 5, "quirks": { "streamOptions": false } }),
        )
        .expect("valid");
        assert_eq!(s.limits.idle, None);
        assert_eq!(s.limits.first_byte, Some(Duration::from_secs(300)));
        assert_eq!(s.limits.connect, Some(Duration::from_secs(10)));
        assert_eq!(s.retry.max_attempts, 5);
        let d = s.dialect_for("http://127.0.0.1:1/v1");
        assert_eq!(d.name, "deepseek");
        assert!(!d.stream_options);
        assert_eq!(
            read(json!({ "quirks": { "streamOptions": "no" } })),
            Err("quirks.streamOptions must be a boolean".into())
        );
        assert!(
            read(json!({ "quirks": { "streamOption": true } }))
                .is_err_and(|e| e.starts_with("quirks.streamOption is not a quirk"))
        );
        assert!(read(json!({ "dialect": "gpt" })).is_err_and(|e| e.contains("deepseek")));
        assert!(read(json!({ "maxAttempts": 0 })).is_err());
        assert!(read(json!({ "proxy": "not a url" })).is_err());
    }
}
