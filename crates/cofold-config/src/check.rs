//! Checking the merged copapo object: the strict reading stops at the first problem with a
//! sentence naming the key; the lenient reading drops what is wrong and keeps the rest.

use cofold_agents::policy::PermissionMode;
use cofold_agents::provider::ProviderConfig;
use cofold_agents::thinking::EFFORT_LEVELS;
use cofold_openai::settings::{ProviderSettings, SETTINGS_KEYS};
use serde_json::{Map, Value};

/// How the merged configuration is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// The first problem is an error naming the key and the files read.
    #[default]
    Strict,
    /// The daemon's reading: unknown keys ignored, a bad provider dropped alone, any other bad
    /// value ignored so its default stands.
    Lenient,
}

/// A problem: the key (`providers[1].id`) and what it must be.
#[derive(Debug)]
pub(crate) struct Problem {
    pub key: String,
    pub sentence: String,
}

fn problem(key: &str, what: &str) -> Problem {
    Problem {
        key: key.to_owned(),
        sentence: format!("config.{key} {what}"),
    }
}

type Check = fn(&str, &Value) -> Result<(), Problem>;

fn non_empty_string(key: &str, v: &Value) -> Result<(), Problem> {
    match v.as_str() {
        Some(s) if !s.is_empty() => Ok(()),
        _ => Err(problem(key, "must be a non-empty string")),
    }
}

fn string(key: &str, v: &Value) -> Result<(), Problem> {
    if v.is_string() {
        Ok(())
    } else {
        Err(problem(key, "must be a string"))
    }
}

fn boolean(key: &str, v: &Value) -> Result<(), Problem> {
    if v.is_boolean() {
        Ok(())
    } else {
        Err(problem(key, "must be a boolean"))
    }
}

fn integer_at_least(key: &str, v: &Value, min: i64) -> Result<(), Problem> {
    let ok = v.as_i64().is_some_and(|n| n >= min) || (min <= 0 && v.as_u64().is_some());
    if ok {
        Ok(())
    } else {
        Err(problem(
            key,
            &format!("must be an integer of at least {min}"),
        ))
    }
}

fn at_least_0(key: &str, v: &Value) -> Result<(), Problem> {
    integer_at_least(key, v, 0)
}

fn at_least_1(key: &str, v: &Value) -> Result<(), Problem> {
    integer_at_least(key, v, 1)
}

fn at_least_1000(key: &str, v: &Value) -> Result<(), Problem> {
    integer_at_least(key, v, 1000)
}

fn integer(key: &str, v: &Value) -> Result<(), Problem> {
    if v.is_i64() || v.is_u64() {
        Ok(())
    } else {
        Err(problem(key, "must be an integer"))
    }
}

fn number_between(key: &str, v: &Value, lo: f64, hi: f64) -> Result<(), Problem> {
    match v.as_f64() {
        Some(n) if (lo..=hi).contains(&n) => Ok(()),
        _ => Err(problem(key, &format!("must be a number from {lo} to {hi}"))),
    }
}

fn temperature(key: &str, v: &Value) -> Result<(), Problem> {
    number_between(key, v, 0.0, 2.0)
}

fn top_p(key: &str, v: &Value) -> Result<(), Problem> {
    number_between(key, v, 0.0, 1.0)
}

fn strings(key: &str, v: &Value) -> Result<(), Problem> {
    match v.as_array() {
        Some(list) if list.iter().all(Value::is_string) => Ok(()),
        _ => Err(problem(key, "must be a list of strings")),
    }
}

fn permissions(key: &str, v: &Value) -> Result<(), Problem> {
    if v.as_str().and_then(PermissionMode::parse).is_some() {
        return Ok(());
    }
    let names: Vec<&str> = PermissionMode::ALL.iter().map(|m| m.as_str()).collect();
    Err(problem(
        key,
        &format!("must be one of {}", names.join(", ")),
    ))
}

fn reasoning(key: &str, v: &Value) -> Result<(), Problem> {
    if EFFORT_LEVELS.iter().any(|l| v.as_str() == Some(l.as_str())) {
        return Ok(());
    }
    let names: Vec<&str> = EFFORT_LEVELS.iter().map(|l| l.as_str()).collect();
    Err(problem(
        key,
        &format!("must be one of {}", names.join(", ")),
    ))
}

fn anything(_: &str, _: &Value) -> Result<(), Problem> {
    Ok(())
}

/// Checks an object's fields against `fields`; unknown keys are problems. In lenient mode, bad
/// and unknown fields are removed instead.
fn object(key: &str, v: &mut Value, fields: &[(&str, Check)], mode: Mode) -> Result<(), Problem> {
    let Some(map) = v.as_object_mut() else {
        return Err(problem(key, "must be an object"));
    };
    let names: Vec<String> = map.keys().cloned().collect();
    for name in names {
        let sub = format!("{key}.{name}");
        let result = match fields.iter().find(|(f, _)| *f == name) {
            Some((_, check)) => map.get(&name).map_or(Ok(()), |val| check(&sub, val)),
            None => Err(problem(&sub, "is not a field")),
        };
        if let Err(p) = result {
            match mode {
                Mode::Strict => return Err(p),
                Mode::Lenient => {
                    map.shift_remove(&name);
                }
            }
        }
    }
    Ok(())
}

fn provider(key: &str, v: &Value) -> Result<(), Problem> {
    let Some(map) = v.as_object() else {
        return Err(problem(key, "must be an object"));
    };
    for (name, val) in map {
        let sub = format!("{key}.{name}");
        match name.as_str() {
            "id" => {
                non_empty_string(&sub, val)?;
                if val
                    .as_str()
                    .is_some_and(|s| s.contains('/') || s.chars().any(char::is_whitespace))
                {
                    return Err(problem(&sub, "must not contain a slash or whitespace"));
                }
            }
            "baseUrl" => non_empty_string(&sub, val)?,
            "apiKey" => string(&sub, val)?,
            "headers" => match val.as_object() {
                Some(h) => {
                    for (hn, hv) in h {
                        string(&format!("{sub}.{hn}"), hv)?;
                    }
                }
                None => return Err(problem(&sub, "must be an object of strings")),
            },
            other if SETTINGS_KEYS.contains(&other) => {}
            _ => return Err(problem(&sub, "is not a field")),
        }
    }
    ProviderSettings::from_entry(map).map_err(|e| problem(&format!("{key}.{}", e.key), &e.must))?;
    for required in ["id", "baseUrl"] {
        if !map.contains_key(required) {
            return Err(problem(
                &format!("{key}.{required}"),
                "must be a non-empty string",
            ));
        }
    }
    // The shared schema is the final word on what a provider is; the transport settings are
    // the adapter's and were checked above.
    let mut core = map.clone();
    core.retain(|k, _| !SETTINGS_KEYS.contains(&k.as_str()));
    ProviderConfig::from_value(&Value::Object(core))
        .map(|_| ())
        .map_err(|issues| {
            problem(
                key,
                &format!(
                    "is not a provider: {}",
                    cofold_agents::schema::issues_text(&issues)
                ),
            )
        })
}

fn rule(key: &str, v: &Value) -> Result<(), Problem> {
    let Some(map) = v.as_object() else {
        return Err(problem(key, "must be an object"));
    };
    match map.get("tool") {
        Some(t) => non_empty_string(&format!("{key}.tool"), t)?,
        None => {
            return Err(problem(
                &format!("{key}.tool"),
                "must be a non-empty string",
            ));
        }
    }
    for (name, val) in map {
        match name.as_str() {
            "tool" => {}
            "match" => non_empty_string(&format!("{key}.match"), val)?,
            _ => return Err(problem(&format!("{key}.{name}"), "is not a field")),
        }
    }
    Ok(())
}

/// Checks a list entry by entry; lenient mode drops bad entries alone.
fn list(key: &str, v: &mut Value, entry: Check, mode: Mode) -> Result<(), Problem> {
    let Some(items) = v.as_array_mut() else {
        return Err(problem(key, "must be a list"));
    };
    let mut kept = Vec::with_capacity(items.len());
    for (i, item) in std::mem::take(items).into_iter().enumerate() {
        match entry(&format!("{key}[{i}]"), &item) {
            Ok(()) => kept.push(item),
            Err(p) if mode == Mode::Strict => return Err(p),
            Err(p) => tracing::warn!(key = %p.key, "{}; the entry is ignored", p.sentence),
        }
    }
    *items = kept;
    Ok(())
}

fn rules(key: &str, v: &mut Value, mode: Mode) -> Result<(), Problem> {
    let Some(map) = v.as_object_mut() else {
        return Err(problem(key, "must be an object"));
    };
    let names: Vec<String> = map.keys().cloned().collect();
    for name in names {
        let sub = format!("{key}.{name}");
        let result = match name.as_str() {
            "deny" | "ask" | "allow" => match map.get_mut(&name) {
                Some(val) => list(&sub, val, rule, mode),
                None => Ok(()),
            },
            _ => Err(problem(&sub, "is not a field")),
        };
        if let Err(p) = result {
            match mode {
                Mode::Strict => return Err(p),
                Mode::Lenient => {
                    map.shift_remove(&name);
                }
            }
        }
    }
    Ok(())
}

const LIMITS: &[(&str, Check)] = &[
    ("maxSteps", at_least_1),
    ("maxToolCalls", at_least_1),
    ("maxToolOutputChars", at_least_1),
    ("timeoutMs", at_least_0),
];

const PARAMS: &[(&str, Check)] = &[
    ("temperature", temperature),
    ("topP", top_p),
    ("maxOutputTokens", at_least_1),
    ("seed", integer),
    ("stop", strings),
];

const CONTEXT: &[(&str, Check)] = &[("maxTokens", at_least_1000), ("autoCompact", boolean)];

/// Checks the merged object in place. Strict: the first problem. Lenient: never fails; what is
/// wrong is removed (and logged without its value).
pub(crate) fn check(values: &mut Map<String, Value>, mode: Mode) -> Result<(), Problem> {
    let names: Vec<String> = values.keys().cloned().collect();
    for name in names {
        let Some(v) = values.get_mut(&name) else {
            continue;
        };
        let result = match name.as_str() {
            "providers" => list(&name, v, provider, mode),
            "model" => non_empty_string(&name, v),
            "permissions" => permissions(&name, v),
            "rules" => rules(&name, v, mode),
            "reasoning" => reasoning(&name, v),
            "instructions" | "backend" | "theme" | "shell" => string(&name, v),
            "limits" => object(&name, v, LIMITS, mode),
            "params" => object(&name, v, PARAMS, mode),
            "context" => object(&name, v, CONTEXT, mode),
            "tools" => anything(&name, v),
            _ => Err(problem(&name, "is not a field")),
        };
        if let Err(p) = result {
            match mode {
                Mode::Strict => return Err(p),
                Mode::Lenient => {
                    tracing::warn!(key = %p.key, "{}; the value is ignored", p.sentence);
                    values.shift_remove(&name);
                }
            }
        }
    }
    Ok(())
}
