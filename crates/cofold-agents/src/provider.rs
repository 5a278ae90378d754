//! Provider configuration and model references, shared by the OpenAI adapter and the
//! configuration resolver.
//!
//! A model reference is `<provider id>/<model id>`; the first slash ends the provider, so a model
//! id with slashes of its own (OpenRouter's `qwen/qwen3-8b`) keeps them: `or/qwen/qwen3-8b`.

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::schema::{Issue, Schema};

/// One OpenAI-compatible endpoint as configuration names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderConfig {
    /// The provider id: non-empty, no `/`, no whitespace.
    pub id: String,
    /// The endpoint's base URL, such as `https://api.deepseek.com/v1`.
    pub base_url: String,
    /// The bearer key; empty means none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// Extra request headers, in the order written.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "ordered_headers"
    )]
    pub headers: Option<Vec<(String, String)>>,
}

/// The JSON Schema every provider entry must meet: `id` a non-empty string with no `/` and no
/// whitespace, `baseUrl` a non-empty string, `apiKey` a string (may be empty), `headers` an object
/// of strings, nothing else.
pub static PROVIDER_SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    json!({
        "type": "object",
        "properties": {
            "id": { "type": "string", "minLength": 1, "pattern": "^[^/\\s]+$" },
            "baseUrl": { "type": "string", "minLength": 1 },
            "apiKey": { "type": "string" },
            "headers": { "type": "object", "additionalProperties": { "type": "string" } }
        },
        "required": ["id", "baseUrl"],
        "additionalProperties": false
    })
});

// `additionalProperties` with a schema is outside the subset `Schema` compiles, so the header
// values are checked by hand below; the rest goes through the shared validator.
static COMPILED: LazyLock<Result<Schema, String>> = LazyLock::new(|| {
    let mut schema = PROVIDER_SCHEMA.clone();
    if let Some(headers) = schema.pointer_mut("/properties/headers") {
        *headers = json!({ "type": "object" });
    }
    Schema::compile(&schema).map_err(|e| e.message)
});

impl ProviderConfig {
    /// A provider with just an id and a base URL.
    pub fn new(id: impl Into<String>, base_url: impl Into<String>) -> ProviderConfig {
        ProviderConfig {
            id: id.into(),
            base_url: base_url.into(),
            api_key: None,
            headers: None,
        }
    }

    /// Checks `value` against [`PROVIDER_SCHEMA`] and reads it. Issues are reported at paths such
    /// as `$.baseUrl` (`$.baseUrl shorter than 1`).
    pub fn from_value(value: &Value) -> Result<ProviderConfig, Vec<Issue>> {
        let schema = COMPILED.as_ref().map_err(|message| {
            vec![Issue {
                path: "$".into(),
                message: message.clone(),
            }]
        })?;
        let mut issues = match schema.validate(value) {
            Ok(_) => Vec::new(),
            Err(issues) => issues,
        };
        if let Some(Value::Object(headers)) = value.get("headers") {
            for (name, v) in headers {
                if !v.is_string() {
                    issues.push(Issue {
                        path: format!("$.headers.{name}"),
                        message: format!("expected string, got {}", json_type(v)),
                    });
                }
            }
        }
        if !issues.is_empty() {
            return Err(issues);
        }
        serde_json::from_value(value.clone()).map_err(|e| {
            vec![Issue {
                path: "$".into(),
                message: e.to_string(),
            }]
        })
    }
}

// Headers are a JSON object on disk and an ordered list of pairs in Rust, so their order (which
// some endpoints' proxies care about) survives without another map type.
mod ordered_headers {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};
    use serde_json::{Map, Value};

    pub(super) fn serialize<S: Serializer>(
        headers: &Option<Vec<(String, String)>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match headers {
            Some(pairs) => serializer.collect_map(pairs.iter().map(|(k, v)| (k, v))),
            None => serializer.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Vec<(String, String)>>, D::Error> {
        let Some(map) = Option::<Map<String, Value>>::deserialize(deserializer)? else {
            return Ok(None);
        };
        map.into_iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k, s)),
                _ => Err(D::Error::custom(format!("header {k} must be a string"))),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A model reference split into its provider id and the provider's own model id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModelRef {
    /// The provider id (before the first `/`).
    pub provider: String,
    /// The model id as the provider knows it (after the first `/`, slashes kept).
    pub model: String,
}

impl std::fmt::Display for ModelRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

/// Splits `reference` at its first `/`. `None` when there is no slash or either side is empty
/// (`qwen`, `or/`, `/m`, the empty string).
pub fn split_model(reference: &str) -> Option<ModelRef> {
    let (provider, model) = reference.split_once('/')?;
    if provider.is_empty() || model.is_empty() {
        return None;
    }
    Some(ModelRef {
        provider: provider.to_owned(),
        model: model.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_at_the_first_slash() {
        let r = split_model("or/qwen/qwen3-8b").expect("splits");
        assert_eq!(
            (r.provider.as_str(), r.model.as_str()),
            ("or", "qwen/qwen3-8b")
        );
        assert_eq!(r.to_string(), "or/qwen/qwen3-8b");
        let d = split_model("default/deepseek/deepseek-chat").expect("splits");
        assert_eq!(
            (d.provider.as_str(), d.model.as_str()),
            ("default", "deepseek/deepseek-chat")
        );
        for bad in ["qwen", "or/", "/m", ""] {
            assert_eq!(split_model(bad), None, "{bad:?}");
        }
    }

    fn issues(value: Value) -> Vec<String> {
        ProviderConfig::from_value(&value)
            .expect_err("must be refused")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn schema_accepts_minimal_and_full_entries() {
        let min = ProviderConfig::from_value(&json!({ "id": "a", "baseUrl": "http://x" }))
            .expect("minimal");
        assert_eq!(min, ProviderConfig::new("a", "http://x"));
        let full = ProviderConfig::from_value(&json!({
            "id": "or", "baseUrl": "https://openrouter.ai/api/v1", "apiKey": "",
            "headers": { "x-title": "cofold", "http-referer": "https://x" }
        }))
        .expect("full");
        assert_eq!(full.api_key.as_deref(), Some(""));
        let names: Vec<&str> = full
            .headers
            .as_ref()
            .expect("headers")
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(names, ["x-title", "http-referer"]);
    }

    #[test]
    fn headers_round_trip_in_order() {
        let value = json!({ "id": "a", "baseUrl": "u", "headers": { "z": "1", "a": "2" } });
        let p = ProviderConfig::from_value(&value).expect("valid");
        assert_eq!(serde_json::to_value(&p).expect("json"), value);
    }

    #[test]
    fn schema_refuses_bad_entries() {
        assert_eq!(
            issues(json!({ "id": "a", "baseUrl": "" })),
            ["$.baseUrl shorter than 1"]
        );
        assert_eq!(issues(json!({ "baseUrl": "http://x" })), ["$.id required"]);
        assert_eq!(issues(json!({ "id": "a" })), ["$.baseUrl required"]);
        assert!(
            issues(json!({ "id": "a/b", "baseUrl": "http://x" }))[0]
                .starts_with("$.id does not match")
        );
        assert!(
            issues(json!({ "id": "a b", "baseUrl": "http://x" }))[0]
                .starts_with("$.id does not match")
        );
        assert!(
            issues(json!({ "id": "", "baseUrl": "http://x" }))
                .contains(&"$.id shorter than 1".to_owned())
        );
        assert_eq!(
            issues(json!({ "id": "a", "baseUrl": "http://x", "model": "m" })),
            ["$.model unexpected property"]
        );
        assert_eq!(
            issues(json!({ "id": "a", "baseUrl": "http://x", "headers": { "h": 1 } })),
            ["$.headers.h expected string, got number"]
        );
        assert_eq!(
            issues(json!({ "id": "a", "baseUrl": "http://x", "apiKey": 7 })),
            ["$.apiKey expected string, got number"]
        );
    }
}
