//! The secrets a host knows (its connection token, stored credentials, model keys), so that none
//! of them crosses a tool boundary: a call whose input carries one is refused before it runs, and
//! a result carrying one is masked before the model reads it. The run loop applies both in every
//! permission mode, `bypassPermissions` included, because a mode decides what a person is asked,
//! not what may leave the host.
//!
//! A value is looked for as written, percent-encoded (as in a URL) and base64-encoded (standard
//! and URL-safe alphabets, at any alignment inside a longer encoding). Values shorter than
//! [`MIN_SECRET_CHARS`] are not looked for: a short value matches ordinary text too often for a
//! refusal to mean anything.

use std::fmt;
use std::sync::Arc;

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

/// The shortest value that is looked for, in characters.
pub const MIN_SECRET_CHARS: usize = 8;

/// One secret: what kind it is (said to the model) and its value (never said).
#[derive(Clone)]
struct Secret {
    kind: String,
    /// The spellings looked for, the value itself first.
    forms: Vec<String>,
}

/// The secrets of a run; cheap to clone. Its `Debug` shows kinds only.
#[derive(Clone, Default)]
pub struct Secrets {
    known: Arc<Vec<Secret>>,
}

impl fmt::Debug for Secrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.known.iter().map(|s| &s.kind))
            .finish()
    }
}

/// The stable middle of `value`'s base64 encoding when it starts `offset` bytes into a longer
/// encoded text: the characters that depend on `value`'s bytes alone.
fn base64_middle(engine: &impl base64::Engine, value: &[u8], offset: usize) -> Option<String> {
    let mut padded = vec![0u8; offset];
    padded.extend_from_slice(value);
    let text = engine.encode(&padded);
    let text = text.trim_end_matches('=');
    // The first character holding any of the value's bits also holds the padding's; so does the
    // last one when the value's end is not on a 3-byte boundary.
    let skip = (offset * 8).div_ceil(6);
    let end_bits = padded.len() * 8;
    let keep_end = end_bits / 6;
    let middle = text.get(skip..keep_end.min(text.len()))?;
    (middle.len() >= MIN_SECRET_CHARS).then(|| middle.to_owned())
}

fn forms_of(value: &str) -> Vec<String> {
    let mut forms = vec![value.to_owned()];
    let mut add = |form: String| {
        if !forms.contains(&form) {
            forms.push(form);
        }
    };
    add(utf8_percent_encode(value, NON_ALPHANUMERIC).to_string());
    for offset in 0..3 {
        let standard = base64::engine::general_purpose::STANDARD;
        let url_safe = base64::engine::general_purpose::URL_SAFE;
        if let Some(form) = base64_middle(&standard, value.as_bytes(), offset) {
            add(form);
        }
        if let Some(form) = base64_middle(&url_safe, value.as_bytes(), offset) {
            add(form);
        }
    }
    forms
}

impl Secrets {
    /// No secrets.
    pub fn none() -> Secrets {
        Secrets::default()
    }

    /// These `(kind, value)` pairs; a value shorter than [`MIN_SECRET_CHARS`] is left out. The
    /// kind is a phrase such as `the connection token` or `a stored credential (vault)`.
    pub fn new<K: Into<String>, V: AsRef<str>>(pairs: impl IntoIterator<Item = (K, V)>) -> Secrets {
        Secrets::none().with(pairs)
    }

    /// These secrets and `pairs` besides.
    pub fn with<K: Into<String>, V: AsRef<str>>(
        &self,
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Secrets {
        let mut known: Vec<Secret> = self.known.as_ref().clone();
        for (kind, value) in pairs {
            let value = value.as_ref();
            if value.chars().count() < MIN_SECRET_CHARS || known.iter().any(|s| s.forms[0] == value)
            {
                continue;
            }
            known.push(Secret {
                kind: kind.into(),
                forms: forms_of(value),
            });
        }
        // Longer values first, so a value holding a shorter one is masked whole.
        known.sort_by_key(|s| std::cmp::Reverse(s.forms[0].len()));
        Secrets {
            known: Arc::new(known),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// The kind of the first secret `text` carries, in any spelling looked for.
    pub fn found_in_text(&self, text: &str) -> Option<&str> {
        self.known
            .iter()
            .find(|s| s.forms.iter().any(|form| text.contains(form.as_str())))
            .map(|s| s.kind.as_str())
    }

    /// The kind of the first secret a JSON value carries in any string or key.
    pub fn found_in(&self, value: &Value) -> Option<&str> {
        if self.is_empty() {
            return None;
        }
        match value {
            Value::String(text) => self.found_in_text(text),
            Value::Array(items) => items.iter().find_map(|item| self.found_in(item)),
            Value::Object(map) => map
                .iter()
                .find_map(|(key, item)| self.found_in_text(key).or_else(|| self.found_in(item))),
            Value::Number(number) => self.found_in_text(&number.to_string()),
            Value::Null | Value::Bool(_) => None,
        }
    }

    /// `text` with every spelling of every secret replaced by `[secret: <kind>]`.
    pub fn mask(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in self.known.iter() {
            for form in &secret.forms {
                if out.contains(form.as_str()) {
                    out = out.replace(form.as_str(), &format!("[secret: {}]", secret.kind));
                }
            }
        }
        out
    }

    /// A JSON value with every string masked (keys too).
    pub fn mask_value(&self, value: &Value) -> Value {
        if self.is_empty() {
            return value.clone();
        }
        match value {
            Value::String(text) => Value::String(self.mask(text)),
            Value::Array(items) => Value::Array(items.iter().map(|i| self.mask_value(i)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (self.mask(k), self.mask_value(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// The refusal a tool call carrying a secret of `kind` gets.
    pub fn refusal(tool: &str, kind: &str) -> String {
        format!(
            "{tool} was not run: its input carries {kind}, and secrets never leave the host through a tool"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use serde_json::json;

    const TOKEN: &str = "tkn-7f3a9c2e41b8d05";

    fn secrets() -> Secrets {
        Secrets::new([("the connection token", TOKEN), ("a short one", "abc")])
    }

    #[test]
    fn a_value_is_found_as_written_url_encoded_and_in_base64() {
        let s = secrets();
        assert_eq!(
            s.found_in(&json!({"url": format!("https://x.example/?q={TOKEN}")})),
            Some("the connection token")
        );
        let encoded = utf8_percent_encode(TOKEN, NON_ALPHANUMERIC).to_string();
        assert_ne!(encoded, TOKEN);
        assert!(s.found_in_text(&encoded).is_some());
        let engine = base64::engine::general_purpose::STANDARD;
        for prefix in ["", "a", "ab", "Authorization: Basic user:"] {
            let text = engine.encode(format!("{prefix}{TOKEN}:rest"));
            assert!(s.found_in_text(&text).is_some(), "{prefix}: {text}");
        }
        assert!(s.found_in(&json!({"command": "echo hello"})).is_none());
    }

    #[test]
    fn short_values_are_never_looked_for() {
        let s = secrets();
        assert!(s.found_in_text("abc abc").is_none());
        assert_eq!(format!("{s:?}"), "[\"the connection token\"]");
    }

    #[test]
    fn masking_names_the_kind_and_drops_every_spelling() {
        let s = secrets();
        let masked = s.mask(&format!("a {TOKEN} b"));
        assert_eq!(masked, "a [secret: the connection token] b");
        let engine = base64::engine::general_purpose::STANDARD;
        let masked = s.mask(&engine.encode(format!("x{TOKEN}y")));
        assert!(s.found_in_text(&masked).is_none(), "{masked}");
    }
}
