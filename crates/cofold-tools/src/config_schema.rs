//! JSON Schemas of configuration sections, derived from the structs that read them.
//!
//! A section's struct derives `schemars::JsonSchema`; [`schema_for`] turns that into the plain
//! schema the daemon validates options with and shows to clients: every subschema written in
//! place (a section is embedded in larger schemas, where `$ref`s would point nowhere) and an
//! absent key meaning "not set" rather than `null`, and no number-width `format`s. A field's doc comment becomes its
//! `description`, so those comments are written for the person editing the file; titles and the
//! comments of enum variants (Rust names, not keys) are left out.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};

/// The `format`s schemars gives Rust's number types.
const NUMBER_FORMATS: [&str; 12] = [
    "int8", "int16", "int32", "int64", "int", "uint8", "uint16", "uint32", "uint64", "uint",
    "float", "double",
];

/// The schema of `T`, as described in the module docs.
pub fn schema_for<T: JsonSchema>() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    settings.meta_schema = None;
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    tidy(&mut schema);
    schema
}

/// Drops titles, the descriptions of `anyOf` branches and the `null` alternatives `Option`
/// fields bring.
fn tidy(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            map.remove("title");
            // The integer and float widths schemars notes are no format a validator knows.
            if map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| NUMBER_FORMATS.contains(&f))
            {
                map.remove("format");
            }
            drop_null_type(map);
            drop_null_branch(map);
            if let Some(Value::Array(branches)) = map.get_mut("anyOf") {
                for branch in branches.iter_mut().filter_map(Value::as_object_mut) {
                    branch.remove("description");
                }
            }
            map.values_mut().for_each(tidy);
        }
        Value::Array(items) => items.iter_mut().for_each(tidy),
        _ => {}
    }
}

/// `"type": ["boolean", "null"]` becomes `"type": "boolean"`.
fn drop_null_type(map: &mut Map<String, Value>) {
    let Some(Value::Array(types)) = map.get_mut("type") else {
        return;
    };
    types.retain(|t| t != "null");
    if let [only] = types.as_slice() {
        let only = only.clone();
        map.insert("type".to_owned(), only);
    }
}

/// An `anyOf` with a `{"type": "null"}` branch loses it; one branch left is merged in place.
fn drop_null_branch(map: &mut Map<String, Value>) {
    let Some(Value::Array(branches)) = map.get_mut("anyOf") else {
        return;
    };
    let before = branches.len();
    branches.retain(|b| b.get("type").and_then(Value::as_str) != Some("null"));
    if branches.len() == before || branches.len() != 1 {
        return;
    }
    if let Some(Value::Object(only)) = branches.pop() {
        map.remove("anyOf");
        for (key, value) in only {
            map.entry(key).or_insert(value);
        }
    }
}
