//! JSON Schema for tool input: a checked subset of draft 2020-12, validated with the `jsonschema`
//! crate (patterns on the linear-time `regex` engine), with defaults filled and every problem
//! reported as an [`Issue`] at an instance path such as `$.list[2]`.

use crate::error::AgentError;
use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::LocationSegment;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock, Mutex, Weak};

/// Compiled schemas still in use, by the text of the schema they were compiled from.
static COMPILED: LazyLock<Mutex<HashMap<String, Weak<Compiled>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The type names a schema may use.
const TYPE_NAMES: [&str; 7] = [
    "string", "number", "integer", "boolean", "null", "object", "array",
];

/// A compiled input schema. Cheap to clone.
#[derive(Clone)]
pub struct Schema {
    inner: Arc<Compiled>,
}

struct Compiled {
    /// The schema after our own pass (nullable rewritten, ignored keywords and formats dropped).
    normalized: Value,
    validator: jsonschema::Validator,
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schema")
            .field("schema", &self.inner.normalized)
            .finish()
    }
}

/// One problem with a value: where it is, and what is wrong. Displays as `<path> <message>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// The instance path: `$`, `$.text`, `$.list[2]`, `$.a.b`.
    pub path: String,
    /// What is wrong, for example `expected integer, got string`.
    pub message: String,
}

impl fmt::Display for Issue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.path, self.message)
    }
}

/// Joins issues as `<path> <message>` separated by `; `.
pub fn issues_text(issues: &[Issue]) -> String {
    issues
        .iter()
        .map(Issue::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl Schema {
    /// Checks a schema once and compiles it. Refusals are `invalid_options` naming the schema
    /// location, for example `$.a uses $ref` or `$.a: unknown type "str"`.
    ///
    /// The same schema compiled again while an earlier compilation is still in use is shared
    /// rather than built anew: hosts rebuild the tools they lend a run (a client's tools, MCP
    /// tools) for every turn, and a compiled validator costs far more than the text it comes from.
    pub fn compile(schema: &Value) -> Result<Schema, AgentError> {
        let key = schema.to_string();
        if let Some(inner) = COMPILED
            .lock()
            .ok()
            .and_then(|cache| cache.get(&key).and_then(Weak::upgrade))
        {
            return Ok(Schema { inner });
        }
        let compiled = Schema::compile_anew(schema)?;
        if let Ok(mut cache) = COMPILED.lock() {
            // Entries whose schemas nobody holds any more go when the cache is written to, so it
            // never holds more than the schemas in use plus one sweep's worth.
            if cache.len() >= 64 {
                cache.retain(|_, weak| weak.strong_count() > 0);
            }
            cache.insert(key, Arc::downgrade(&compiled.inner));
        }
        Ok(compiled)
    }

    fn compile_anew(schema: &Value) -> Result<Schema, AgentError> {
        let normalized = normalize(schema, "$")?;
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .with_pattern_options(jsonschema::PatternOptions::regex())
            .should_validate_formats(true)
            .build(&normalized)
            .map_err(|error| {
                let at = error.schema_path().as_str().to_owned();
                AgentError::invalid_options(format!(
                    "the schema does not compile (at {})",
                    if at.is_empty() { "/" } else { &at }
                ))
            })?;
        Ok(Schema {
            inner: Arc::new(Compiled {
                normalized,
                validator,
            }),
        })
    }

    /// The schema as checked and rewritten.
    pub fn as_value(&self) -> &Value {
        &self.inner.normalized
    }

    /// Returns `value` with defaults filled, or every issue at once. Never coerces.
    pub fn validate(&self, value: &Value) -> Result<Value, Vec<Issue>> {
        let mut filled = value.clone();
        fill_defaults(&self.inner.normalized, &mut filled);
        let mut issues = Vec::new();
        for error in self.inner.validator.iter_errors(&filled) {
            let path = render_path(error.instance_path().segments());
            let schema_at = self.inner.normalized.pointer(error.schema_path().as_str());
            self.render(
                &path,
                error.kind(),
                error.instance(),
                schema_at,
                &mut issues,
            );
        }
        if issues.is_empty() {
            Ok(filled)
        } else {
            issues.dedup();
            Err(issues)
        }
    }

    // Longer than 80 lines: one arm per validation error kind, each a short sentence: the match is
    // the table of messages.
    fn render(
        &self,
        path: &str,
        kind: &ValidationErrorKind,
        instance: &Value,
        schema_at: Option<&Value>,
        out: &mut Vec<Issue>,
    ) {
        // The keyword's own value in our schema prints numbers as JSON (`3`, not `3.0`).
        let limit = |fallback: String| schema_at.map(Value::to_string).unwrap_or(fallback);
        let message = match kind {
            ValidationErrorKind::Required { property } => {
                let name = property
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| property.to_string());
                out.push(Issue {
                    path: format!("{path}.{name}"),
                    message: "required".into(),
                });
                return;
            }
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                for name in unexpected {
                    out.push(Issue {
                        path: format!("{path}.{name}"),
                        message: "unexpected property".into(),
                    });
                }
                return;
            }
            ValidationErrorKind::Type { kind } => {
                let expected = match schema_at {
                    Some(Value::String(name)) => name.clone(),
                    Some(Value::Array(names)) => names
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(" or "),
                    _ => match kind {
                        TypeKind::Single(one) => one.as_str().to_owned(),
                        TypeKind::Multiple(set) => set
                            .iter()
                            .map(|t| t.as_str())
                            .collect::<Vec<_>>()
                            .join(" or "),
                    },
                };
                format!("expected {expected}, got {}", type_of(instance))
            }
            ValidationErrorKind::MinLength { limit: n } => format!("shorter than {n}"),
            ValidationErrorKind::MaxLength { limit: n } => format!("longer than {n}"),
            ValidationErrorKind::Pattern { pattern } => format!("does not match /{pattern}/"),
            ValidationErrorKind::Minimum { limit: n } => {
                format!("less than {}", limit(n.to_string()))
            }
            ValidationErrorKind::Maximum { limit: n } => {
                format!("greater than {}", limit(n.to_string()))
            }
            ValidationErrorKind::ExclusiveMinimum { limit: n } => {
                format!("not greater than {}", limit(n.to_string()))
            }
            ValidationErrorKind::ExclusiveMaximum { limit: n } => {
                format!("not less than {}", limit(n.to_string()))
            }
            ValidationErrorKind::MultipleOf { .. } => format!(
                "not a multiple of {}",
                limit(String::from("the given number"))
            ),
            ValidationErrorKind::MinItems { limit: n } => format!("fewer than {n} items"),
            ValidationErrorKind::MaxItems { limit: n } => format!("more than {n} items"),
            ValidationErrorKind::UniqueItems => "has duplicate items".into(),
            ValidationErrorKind::Enum { options } => {
                let values = match options.as_ref() {
                    Value::Array(values) => values
                        .iter()
                        .map(Value::to_string)
                        .collect::<Vec<_>>()
                        .join(", "),
                    other => other.to_string(),
                };
                format!("must be one of [{values}]")
            }
            ValidationErrorKind::Constant { expected_value } => {
                format!("must equal {expected_value}")
            }
            ValidationErrorKind::AnyOf { .. } => "matches none of anyOf".into(),
            ValidationErrorKind::OneOfNotValid { .. } => "matches 0 of oneOf, expected 1".into(),
            ValidationErrorKind::OneOfMultipleValid { context } => {
                let valid = context.iter().filter(|branch| branch.is_empty()).count();
                format!("matches {valid} of oneOf, expected 1")
            }
            ValidationErrorKind::Format { format } => format!("is not a {format}"),
            ValidationErrorKind::FalseSchema => "is not allowed".into(),
            other => format!("fails {}", other.keyword()),
        };
        out.push(Issue {
            path: path.to_owned(),
            message,
        });
    }
}

/// The JSON type name of a value as issue messages print it (integers are `number`).
fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn render_path<'a>(segments: impl Iterator<Item = LocationSegment<'a>>) -> String {
    let mut path = String::from("$");
    for segment in segments {
        match segment {
            LocationSegment::Property(name) => {
                path.push('.');
                path.push_str(&name);
            }
            LocationSegment::Index(index) => {
                path.push('[');
                path.push_str(&index.to_string());
                path.push(']');
            }
        }
    }
    path
}

/// Fills missing properties that have a `default`, at every object reached through
/// `properties`, `items` and `prefixItems` (never inside combinators).
fn fill_defaults(schema: &Value, value: &mut Value) {
    let Some(schema) = schema.as_object() else {
        return;
    };
    match value {
        Value::Object(map) => {
            let Some(Value::Object(properties)) = schema.get("properties") else {
                return;
            };
            for (name, sub) in properties {
                if !map.contains_key(name)
                    && let Some(default) = sub.get("default")
                {
                    map.insert(name.clone(), default.clone());
                }
                if let Some(inner) = map.get_mut(name) {
                    fill_defaults(sub, inner);
                }
            }
        }
        Value::Array(elements) => {
            let prefix = schema
                .get("prefixItems")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            for (index, element) in elements.iter_mut().enumerate() {
                match prefix.get(index) {
                    Some(sub) => fill_defaults(sub, element),
                    None => {
                        if let Some(items) = schema.get("items") {
                            fill_defaults(items, element);
                        }
                    }
                }
            }
        }
        _ => {}
    }
}

fn bad(path: &str, message: impl fmt::Display) -> AgentError {
    AgentError::invalid_options(format!("{path}: {message}"))
}

fn non_negative(path: &str, keyword: &str, value: &Value) -> Result<(), AgentError> {
    if value.as_u64().is_some() {
        Ok(())
    } else {
        Err(bad(
            path,
            format!("{keyword} must be a non-negative integer"),
        ))
    }
}

fn schema_list<'v>(
    path: &str,
    keyword: &str,
    value: &'v Value,
    non_empty: bool,
) -> Result<&'v Vec<Value>, AgentError> {
    match value.as_array() {
        Some(list) if !(non_empty && list.is_empty()) => Ok(list),
        _ => Err(bad(
            path,
            format!("{keyword} must be a non-empty list of schemas"),
        )),
    }
}

/// Our own pass over a schema: refuses what we do not support, rewrites `nullable`, drops formats
/// other than `date-time` and the ignored keywords, and checks keyword values and patterns.
fn normalize(schema: &Value, path: &str) -> Result<Value, AgentError> {
    let Some(object) = schema.as_object() else {
        return Err(bad(path, "a schema must be an object"));
    };
    let mut out = Map::new();
    let mut nullable = false;
    for (keyword, value) in object {
        if keyword == "nullable" {
            match value {
                Value::Bool(flag) => nullable = *flag,
                _ => return Err(bad(path, "nullable must be a boolean")),
            }
        } else if let Some(kept) = keyword_value(path, keyword, value)? {
            out.insert(keyword.clone(), kept);
        }
    }
    if nullable && let Some(declared) = out.get_mut("type") {
        match declared {
            Value::String(name) if name != "null" => {
                *declared = Value::Array(vec![Value::from(name.clone()), Value::from("null")])
            }
            Value::Array(list) if !list.iter().any(|name| name == "null") => {
                list.push(Value::from("null"))
            }
            _ => {}
        }
    }
    Ok(Value::Object(out))
}

/// One keyword's value as the normalized schema keeps it (subschemas normalized), or `None` for
/// a keyword that is dropped.
fn keyword_value(path: &str, keyword: &str, value: &Value) -> Result<Option<Value>, AgentError> {
    let kept = match keyword {
        "title" | "examples" | "$schema" => return Ok(None),
        "type" => {
            check_type_names(path, value)?;
            value.clone()
        }
        "properties" => {
            let Some(properties) = value.as_object() else {
                return Err(bad(path, "properties must be an object of schemas"));
            };
            let mut checked = Map::new();
            for (name, sub) in properties {
                checked.insert(name.clone(), normalize(sub, &format!("{path}.{name}"))?);
            }
            Value::Object(checked)
        }
        "additionalProperties" => match value {
            Value::Bool(_) => value.clone(),
            Value::Object(_) => {
                return Err(AgentError::invalid_options(format!(
                    "{path} uses additionalProperties with a schema"
                )));
            }
            _ => return Err(bad(path, "additionalProperties must be a boolean")),
        },
        "items" => normalize(value, &format!("{path}[]"))?,
        "prefixItems" => normalized_list(path, keyword, value, |i| format!("{path}[{i}]"))?,
        "anyOf" | "oneOf" | "allOf" => {
            normalized_list(path, keyword, value, |i| format!("{path}/{keyword}[{i}]"))?
        }
        "format" => {
            let Some(format) = value.as_str() else {
                return Err(bad(path, "format must be a string"));
            };
            // Only date-time is checked; other formats are accepted and ignored.
            if format != "date-time" {
                return Ok(None);
            }
            value.clone()
        }
        other if check_plain(path, other, value)? => value.clone(),
        other => return Err(AgentError::invalid_options(format!("{path} uses {other}"))),
    };
    Ok(Some(kept))
}

/// `type`: a type name or a non-empty list of them.
fn check_type_names(path: &str, value: &Value) -> Result<(), AgentError> {
    let wrong = || {
        bad(
            path,
            "type must be a type name or a non-empty list of type names",
        )
    };
    let names: Vec<&Value> = match value {
        Value::String(_) => vec![value],
        Value::Array(list) if !list.is_empty() => list.iter().collect(),
        _ => return Err(wrong()),
    };
    for name in names {
        match name.as_str() {
            Some(name) if TYPE_NAMES.contains(&name) => {}
            Some(name) => return Err(bad(path, format!("unknown type \"{name}\""))),
            None => return Err(wrong()),
        }
    }
    Ok(())
}

/// A list of subschemas, each normalized at the path `at` gives its index.
fn normalized_list(
    path: &str,
    keyword: &str,
    value: &Value,
    at: impl Fn(usize) -> String,
) -> Result<Value, AgentError> {
    let list = schema_list(path, keyword, value, true)?;
    let checked = list
        .iter()
        .enumerate()
        .map(|(index, sub)| normalize(sub, &at(index)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Value::Array(checked))
}

/// Checks the value of a keyword that is kept as written; false for a keyword this pass does
/// not know.
fn check_plain(path: &str, keyword: &str, value: &Value) -> Result<bool, AgentError> {
    let require = |fine: bool, problem: String| {
        if fine {
            Ok(true)
        } else {
            Err(bad(path, problem))
        }
    };
    match keyword {
        "description" => require(value.is_string(), "description must be a string".into()),
        "required" => require(
            value
                .as_array()
                .is_some_and(|list| list.iter().all(Value::is_string)),
            "required must be a list of strings".into(),
        ),
        "enum" => require(value.is_array(), "enum must be a list".into()),
        "const" | "default" => Ok(true),
        "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => {
            require(value.is_number(), format!("{keyword} must be a number"))
        }
        "multipleOf" => require(
            value.as_f64().is_some_and(|n| n > 0.0),
            "multipleOf must be a positive number".into(),
        ),
        "minLength" | "maxLength" | "minItems" | "maxItems" => {
            non_negative(path, keyword, value)?;
            Ok(true)
        }
        "uniqueItems" => require(value.is_boolean(), "uniqueItems must be a boolean".into()),
        "pattern" => {
            let Some(pattern) = value.as_str() else {
                return Err(bad(path, "pattern must be a string"));
            };
            check_pattern(path, pattern)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Compiles a pattern with the `regex` crate, naming look-around and back-references from the
/// parser's error kind.
fn check_pattern(path: &str, pattern: &str) -> Result<(), AgentError> {
    if let Err(error) = regex_syntax::ast::parse::Parser::new().parse(pattern) {
        let reason = match error.kind() {
            regex_syntax::ast::ErrorKind::UnsupportedLookAround => {
                "look-around is not supported".to_owned()
            }
            regex_syntax::ast::ErrorKind::UnsupportedBackreference => {
                "back-references are not supported".to_owned()
            }
            kind => kind.to_string(),
        };
        return Err(bad(path, format!("pattern does not compile: {reason}")));
    }
    if let Err(error) = regex::Regex::new(pattern) {
        let text = error.to_string();
        let first = text
            .lines()
            .find(|line| !line.trim().is_empty())
            .unwrap_or("invalid pattern")
            .trim();
        let first = first.strip_prefix("error: ").unwrap_or(first);
        return Err(bad(path, format!("pattern does not compile: {first}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Schema;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn a_schema_in_use_is_compiled_once_and_freed_when_unused() {
        let text =
            json!({ "type": "object", "properties": { "cache_probe_7f3a": { "type": "string" } } });
        let first = Schema::compile(&text).expect("compiles");
        let second = Schema::compile(&text).expect("compiles");
        assert!(
            Arc::ptr_eq(&first.inner, &second.inner),
            "shared while in use"
        );
        let weak = Arc::downgrade(&first.inner);
        drop((first, second));
        assert!(weak.upgrade().is_none(), "the cache keeps no schema alive");
        let other = json!({ "type": "object", "required": ["cache_probe_7f3a"] });
        let third = Schema::compile(&other).expect("compiles");
        assert!(
            third.validate(&json!({})).is_err(),
            "a different schema is its own"
        );
    }
}
