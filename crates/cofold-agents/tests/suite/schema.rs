//! The JSON Schema subset for tool input (runtime cases A3–A8, docs/acceptance.md).

use cofold_agents::error::ErrorCode;
use cofold_agents::schema::{Issue, Schema, issues_text};
use serde_json::{Value, json};

fn object(properties: Value) -> Value {
    json!({ "type": "object", "properties": properties })
}

fn compile(schema: Value) -> Schema {
    Schema::compile(&schema).expect("the schema compiles")
}

fn refusal(schema: Value) -> String {
    let error = Schema::compile(&schema).expect_err("the schema is refused");
    assert_eq!(error.code, ErrorCode::InvalidOptions);
    error.message
}

fn issues(schema: &Schema, value: Value) -> Vec<String> {
    schema
        .validate(&value)
        .expect_err("the value is refused")
        .iter()
        .map(Issue::to_string)
        .collect()
}

fn one_issue(property: Value, value: Value) -> String {
    let schema = compile(object(json!({ "a": property })));
    let found = issues(&schema, json!({ "a": value }));
    assert_eq!(found.len(), 1, "{found:?}");
    found.into_iter().next().expect("one issue")
}

#[test]
fn unsupported_keywords_and_bad_types_are_refused_at_their_location() {
    assert_eq!(
        refusal(object(json!({ "a": { "$ref": "#/x" } }))),
        "$.a uses $ref"
    );
    assert_eq!(
        refusal(object(json!({ "a": { "not": { "type": "string" } } }))),
        "$.a uses not"
    );
    assert_eq!(
        refusal(object(json!({ "a": { "type": "str" } }))),
        "$.a: unknown type \"str\""
    );
    assert_eq!(
        refusal(json!({ "type": "object", "patternProperties": {} })),
        "$ uses patternProperties"
    );
    assert_eq!(
        refusal(json!({ "type": "object", "$defs": {} })),
        "$ uses $defs"
    );
    assert_eq!(refusal(object(json!({ "a": { "if": {} } }))), "$.a uses if");
    assert_eq!(
        refusal(object(
            json!({ "a": { "type": "object", "additionalProperties": { "type": "string" } } })
        )),
        "$.a uses additionalProperties with a schema"
    );
}

#[test]
fn locations_name_items_prefix_items_and_branches() {
    let schema = object(json!({ "list": { "type": "array", "items": { "$ref": "#" } } }));
    assert_eq!(refusal(schema), "$.list[] uses $ref");
    let schema = object(
        json!({ "pair": { "type": "array", "prefixItems": [{ "type": "string" }, { "type": "strin" }] } }),
    );
    assert_eq!(refusal(schema), "$.pair[1]: unknown type \"strin\"");
    let schema = object(json!({ "a": { "anyOf": [{ "type": "string" }, { "not": {} }] } }));
    assert_eq!(refusal(schema), "$.a/anyOf[1] uses not");
    let schema = object(
        json!({ "a": { "type": "object", "properties": { "b": { "oneOf": [{ "const": 1 }, { "type": 3 }] } } } }),
    );
    assert_eq!(
        refusal(schema),
        "$.a.b/oneOf[1]: type must be a type name or a non-empty list of type names"
    );
}

#[test]
fn keyword_values_are_checked() {
    assert_eq!(
        refusal(object(json!({ "a": { "minLength": -1 } }))),
        "$.a: minLength must be a non-negative integer"
    );
    assert_eq!(
        refusal(object(json!({ "a": { "maxItems": 1.5 } }))),
        "$.a: maxItems must be a non-negative integer"
    );
    assert_eq!(
        refusal(object(json!({ "a": { "multipleOf": 0 } }))),
        "$.a: multipleOf must be a positive number"
    );
    assert_eq!(
        refusal(json!({ "type": "object", "required": ["a", 1] })),
        "$: required must be a list of strings"
    );
    assert_eq!(
        refusal(object(json!({ "a": { "anyOf": [] } }))),
        "$.a: anyOf must be a non-empty list of schemas"
    );
    assert_eq!(
        refusal(object(json!({ "a": { "allOf": {} } }))),
        "$.a: allOf must be a non-empty list of schemas"
    );
    assert_eq!(
        refusal(object(json!({ "a": { "minimum": "1" } }))),
        "$.a: minimum must be a number"
    );
    assert_eq!(
        refusal(object(json!({ "a": { "type": [] } }))),
        "$.a: type must be a type name or a non-empty list of type names"
    );
    assert_eq!(
        refusal(object(json!({ "a": { "nullable": "yes" } }))),
        "$.a: nullable must be a boolean"
    );
    assert_eq!(
        refusal(object(json!({ "a": 3 }))),
        "$.a: a schema must be an object"
    );
}

#[test]
fn ignored_keywords_are_accepted() {
    let schema = compile(json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "T",
        "examples": [{}],
        "type": "object",
        "description": "d",
    }));
    assert!(schema.as_value().get("$schema").is_none());
    assert_eq!(schema.validate(&json!({})).expect("valid"), json!({}));
}

#[test]
fn patterns_use_the_regex_crate_and_name_what_it_cannot_do() {
    assert_eq!(
        refusal(object(
            json!({ "a": { "type": "string", "pattern": "^(?=a)" } })
        )),
        "$.a: pattern does not compile: look-around is not supported"
    );
    assert_eq!(
        refusal(object(
            json!({ "a": { "type": "string", "pattern": "(?<!a)b" } })
        )),
        "$.a: pattern does not compile: look-around is not supported"
    );
    assert_eq!(
        refusal(object(
            json!({ "a": { "type": "string", "pattern": "(a)\\1" } })
        )),
        "$.a: pattern does not compile: back-references are not supported"
    );
    let other = refusal(object(
        json!({ "a": { "type": "string", "pattern": "(abc" } }),
    ));
    assert!(
        other.starts_with("$.a: pattern does not compile: "),
        "{other}"
    );
    assert!(!other.contains('\n'), "one line: {other}");

    let anchored = compile(object(
        json!({ "a": { "type": "string", "pattern": "^[a-z]+$" } }),
    ));
    assert!(anchored.validate(&json!({ "a": "abc" })).is_ok());
    assert_eq!(
        issues(&anchored, json!({ "a": "ABC" })),
        ["$.a does not match /^[a-z]+$/"]
    );
    let unanchored = compile(object(json!({ "a": { "type": "string", "pattern": "b" } })));
    assert!(unanchored.validate(&json!({ "a": "abc" })).is_ok());
}

#[test]
fn validation_never_coerces_and_reports_every_issue_with_paths() {
    let schema = compile(json!({
        "type": "object",
        "properties": {
            "text": { "type": "integer" },
            "list": { "type": "array", "items": { "type": "string" } },
            "nested": { "type": "object", "properties": { "b": { "type": "boolean" } } }
        },
        "required": ["text"]
    }));
    assert_eq!(
        issues(&schema, json!({ "text": "3" })),
        ["$.text expected integer, got string"]
    );
    let mut found = issues(
        &schema,
        json!({ "text": 1.5, "list": ["a", "b", 3], "nested": { "b": "no" } }),
    );
    found.sort();
    assert_eq!(
        found,
        [
            "$.list[2] expected string, got number",
            "$.nested.b expected boolean, got string",
            "$.text expected integer, got number"
        ]
    );
    let error = schema
        .validate(&json!({ "list": [] }))
        .expect_err("refused");
    assert_eq!(issues_text(&error), "$.text required");
}

#[test]
fn defaults_are_filled_before_validating() {
    let schema = compile(json!({
        "type": "object",
        "properties": {
            "text": { "type": "string" },
            "limit": { "type": "integer", "default": 10 },
            "mode": { "type": "string", "default": "fast" },
            "rows": { "type": "array", "items": { "type": "object", "properties": { "on": { "type": "boolean", "default": true } } } },
            "pair": { "type": "array", "prefixItems": [{ "type": "object", "properties": { "x": { "default": 1 } } }] },
            "choice": { "anyOf": [{ "type": "object", "properties": { "hidden": { "default": 1 } } }] }
        },
        "required": ["mode"]
    }));
    let filled = schema
        .validate(&json!({ "text": "t", "limit": 3, "rows": [{}, { "on": false }], "pair": [{}], "choice": {} }))
        .expect("valid");
    assert_eq!(filled["limit"], 3, "a given value stays");
    assert_eq!(
        filled["mode"], "fast",
        "a required property with a default is satisfied"
    );
    assert_eq!(filled["rows"], json!([{ "on": true }, { "on": false }]));
    assert_eq!(filled["pair"], json!([{ "x": 1 }]));
    assert_eq!(filled["choice"], json!({}), "never inside combinators");
    let filled = schema.validate(&json!({})).expect("valid");
    assert_eq!(filled["limit"], 10);
}

#[test]
fn nullable_adds_null_to_the_type() {
    let schema = compile(object(
        json!({ "a": { "type": "string", "nullable": true } }),
    ));
    assert!(schema.validate(&json!({ "a": null })).is_ok());
    assert!(schema.validate(&json!({ "a": "x" })).is_ok());
    assert_eq!(
        issues(&schema, json!({ "a": 1 })),
        ["$.a expected string or null, got number"]
    );
    let strict = compile(object(json!({ "a": { "type": "string" } })));
    assert_eq!(
        issues(&strict, json!({ "a": null })),
        ["$.a expected string, got null"]
    );
}

#[test]
fn every_row_of_the_issue_table() {
    let schema = compile(
        json!({ "type": "object", "properties": { "a": {} }, "required": ["a", "b"], "additionalProperties": false }),
    );
    let mut found = issues(&schema, json!({ "a": 1, "c": 2 }));
    found.sort();
    assert_eq!(found, ["$.b required", "$.c unexpected property"]);

    assert_eq!(
        one_issue(json!({ "type": ["string", "integer"] }), json!(true)),
        "$.a expected string or integer, got boolean"
    );
    assert_eq!(
        one_issue(json!({ "type": "object" }), json!([])),
        "$.a expected object, got array"
    );
    assert_eq!(
        one_issue(json!({ "minLength": 3 }), json!("ab")),
        "$.a shorter than 3"
    );
    assert_eq!(
        one_issue(json!({ "maxLength": 2 }), json!("abc")),
        "$.a longer than 2"
    );
    assert_eq!(
        one_issue(json!({ "pattern": "^x" }), json!("y")),
        "$.a does not match /^x/"
    );
    assert_eq!(
        one_issue(json!({ "minimum": 3 }), json!(2)),
        "$.a less than 3"
    );
    assert_eq!(
        one_issue(json!({ "maximum": 0.5 }), json!(1)),
        "$.a greater than 0.5"
    );
    assert_eq!(
        one_issue(json!({ "exclusiveMinimum": 3 }), json!(3)),
        "$.a not greater than 3"
    );
    assert_eq!(
        one_issue(json!({ "exclusiveMaximum": 3 }), json!(3)),
        "$.a not less than 3"
    );
    assert_eq!(
        one_issue(json!({ "multipleOf": 3 }), json!(4)),
        "$.a not a multiple of 3"
    );
    assert_eq!(
        one_issue(json!({ "minItems": 2 }), json!([1])),
        "$.a fewer than 2 items"
    );
    assert_eq!(
        one_issue(json!({ "maxItems": 1 }), json!([1, 2])),
        "$.a more than 1 items"
    );
    assert_eq!(
        one_issue(json!({ "uniqueItems": true }), json!([1, 1])),
        "$.a has duplicate items"
    );
    assert_eq!(
        one_issue(json!({ "enum": ["x", 2, null] }), json!("y")),
        "$.a must be one of [\"x\", 2, null]"
    );
    assert_eq!(
        one_issue(json!({ "const": { "k": 1 } }), json!(1)),
        "$.a must equal {\"k\":1}"
    );
    assert_eq!(
        one_issue(
            json!({ "anyOf": [{ "type": "string", "minLength": 5 }, { "type": "integer" }] }),
            json!("ab")
        ),
        "$.a matches none of anyOf"
    );
    assert_eq!(
        one_issue(
            json!({ "oneOf": [{ "type": "string" }, { "type": "integer" }] }),
            json!(true)
        ),
        "$.a matches 0 of oneOf, expected 1"
    );
    assert_eq!(
        one_issue(
            json!({ "oneOf": [{ "type": "integer" }, { "type": "number" }, { "minimum": 0 }] }),
            json!(3)
        ),
        "$.a matches 3 of oneOf, expected 1"
    );
    assert_eq!(
        one_issue(json!({ "format": "date-time" }), json!("yesterday")),
        "$.a is not a date-time"
    );
}

#[test]
fn all_of_reports_the_failing_branches_own_issues() {
    let schema = compile(object(
        json!({ "a": { "allOf": [{ "type": "string" }, { "minLength": 3 }] } }),
    ));
    assert_eq!(
        issues(&schema, json!({ "a": "ab" })),
        ["$.a shorter than 3"]
    );
}

#[test]
fn formats_other_than_date_time_are_ignored() {
    let schema = compile(object(
        json!({ "a": { "type": "string", "format": "email" } }),
    ));
    assert!(schema.validate(&json!({ "a": "not an address" })).is_ok());
    assert!(schema.as_value()["properties"]["a"].get("format").is_none());
    let dated = compile(object(
        json!({ "a": { "type": "string", "format": "date-time" } }),
    ));
    assert!(
        dated
            .validate(&json!({ "a": "2025-01-02T03:04:05.678901Z" }))
            .is_ok()
    );
    assert_eq!(
        issues(&dated, json!({ "a": "yesterday" })),
        ["$.a is not a date-time"]
    );
}
