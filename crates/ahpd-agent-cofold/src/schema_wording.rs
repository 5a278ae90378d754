//! Schema shapes that validators word well.
//!
//! A value that may be `true`/`false` or an object of settings is naturally written as
//! `anyOf: [boolean, object]`, but a validator then reports a wrong value only as "does not fit
//! the schema (anyOf)". Written as `if object then <object schema> else boolean` instead, the
//! same values pass and a wrong one fails the branch it is closest to, whose message names the
//! expected type (`must be true or false`).

use serde_json::{Map, Value, json};

/// Rewrites, everywhere in `schema`, each `anyOf` of a boolean and an object schema into the
/// `if`/`then`/`else` form.
pub(crate) fn boolean_or_object(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if let Some(object) = boolean_or_object_pair(map) {
                map.remove("anyOf");
                map.insert("if".to_owned(), json!({ "type": "object" }));
                map.insert("then".to_owned(), object);
                map.insert("else".to_owned(), json!({ "type": "boolean" }));
            }
            for value in map.values_mut() {
                boolean_or_object(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(boolean_or_object),
        _ => {}
    }
}

/// The object branch of an `anyOf` holding exactly a plain boolean and an object schema.
fn boolean_or_object_pair(map: &Map<String, Value>) -> Option<Value> {
    let [a, b] = map.get("anyOf")?.as_array()?.as_slice() else {
        return None;
    };
    let is_boolean = |v: &Value| *v == json!({ "type": "boolean" });
    let is_object = |v: &Value| v.get("type") == Some(&json!("object"));
    if is_boolean(a) && is_object(b) {
        Some(b.clone())
    } else if is_boolean(b) && is_object(a) {
        Some(a.clone())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_boolean_or_object_pairs_are_rewritten() {
        let mut schema = json!({ "properties": {
            "files": { "anyOf": [ { "type": "boolean" }, { "type": "object", "properties": {} } ] },
            "dir": { "anyOf": [ { "type": "string" }, { "const": false } ] }
        } });
        boolean_or_object(&mut schema);
        let files = &schema["properties"]["files"];
        assert!(files.get("anyOf").is_none());
        assert_eq!(files["else"], json!({ "type": "boolean" }));
        assert_eq!(files["then"]["type"], "object");
        assert!(schema["properties"]["dir"].get("anyOf").is_some());
    }
}
