//! A cofold session's configuration: the properties a client sees and the checks its values
//! pass.

use std::collections::HashMap;

use ahp_types::common::JsonObject;
use ahp_types::state::{SessionConfigPropertySchema, SessionConfigSchema};
use ahpd_sdk::agent::Refusal;
use cofold_agents::policy::{PermissionMode, mode_description};
use serde_json::json;

const MODES: [&str; 6] = [
    "default",
    "acceptEdits",
    "plan",
    "auto",
    "bypassPermissions",
    "dontAsk",
];
const LEVELS: [&str; 4] = ["off", "low", "medium", "high"];

/// The session's configuration schema; the approval mode is offered only without an
/// embedder's policy, the effort level only without its model adapter.
pub(crate) fn schema(offer_modes: bool, offer_levels: bool) -> SessionConfigSchema {
    let mut properties = HashMap::new();
    properties.insert("model".to_owned(), property("string", "Model", true, None));
    properties.insert(
        "baseUrl".to_owned(),
        property("string", "Endpoint", false, None),
    );
    properties.insert(
        "instructions".to_owned(),
        property("string", "Instructions", false, None),
    );
    if offer_modes {
        let labels = [
            "Ask Before Edits",
            "Edit Automatically",
            "Plan Mode",
            "Auto Mode",
            "Bypass Permissions",
            "Don't Ask",
        ];
        let descriptions = MODES
            .iter()
            .filter_map(|m| serde_json::from_value::<PermissionMode>(json!(m)).ok())
            .map(|m| mode_description(m).to_owned())
            .collect();
        properties.insert(
            "permissionMode".to_owned(),
            property(
                "string",
                "Approvals",
                true,
                Some((
                    &MODES,
                    labels.map(str::to_owned).to_vec(),
                    descriptions,
                    "auto",
                )),
            ),
        );
    }
    if offer_levels {
        let labels = ["Off", "Low", "Medium", "High"].map(str::to_owned).to_vec();
        let descriptions = [
            "No extra thinking",
            "Thinks briefly",
            "Thinks before answering",
            "Thinks hard",
        ]
        .map(str::to_owned)
        .to_vec();
        properties.insert(
            "effortLevel".to_owned(),
            property(
                "string",
                "Effort",
                true,
                Some((&LEVELS, labels, descriptions, "off")),
            ),
        );
    }
    SessionConfigSchema {
        r#type: "object".to_owned(),
        properties,
        required: None,
    }
}

/// An enum property's values, labels, descriptions and default.
type Choices<'a> = (&'a [&'a str], Vec<String>, Vec<String>, &'a str);

fn property(
    kind: &str,
    title: &str,
    mutable: bool,
    choices: Option<Choices<'_>>,
) -> SessionConfigPropertySchema {
    let (values, labels, descriptions, default) = match choices {
        Some((values, labels, descriptions, default)) => (
            Some(values.iter().map(|v| json!(v)).collect()),
            Some(labels),
            Some(descriptions),
            Some(json!(default)),
        ),
        None => (None, None, None, None),
    };
    SessionConfigPropertySchema {
        r#type: kind.to_owned(),
        title: title.to_owned(),
        description: None,
        default,
        r#enum: values,
        enum_labels: labels,
        enum_descriptions: descriptions,
        read_only: None,
        items: None,
        min_items: None,
        max_items: None,
        properties: None,
        required: None,
        additional_properties: None,
        enum_dynamic: None,
        session_mutable: Some(mutable),
    }
}

/// The refusals of a session's configuration values: unknown keys and values outside their schema.
pub(crate) fn check_config(agent_id: &str, values: &JsonObject) -> Result<(), Refusal> {
    for (key, value) in values {
        let text = || value.as_str();
        match key.as_str() {
            "model" | "instructions" => {
                if !value.is_string() {
                    return Err(Refusal::new(format!("{agent_id}: {key} takes a string")));
                }
            }
            "baseUrl" => {
                let ok = text().is_some_and(|t| {
                    url::Url::parse(t)
                        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.has_host())
                });
                if !ok {
                    return Err(Refusal::new(format!(
                        "{agent_id}: baseUrl takes an http or https URL"
                    )));
                }
            }
            "permissionMode" => {
                if !text().is_some_and(|t| MODES.contains(&t)) {
                    return Err(Refusal::new(format!(
                        "{agent_id}: permissionMode takes one of default, acceptEdits, plan, auto, bypassPermissions, dontAsk"
                    )));
                }
            }
            "effortLevel" => {
                if !text().is_some_and(|t| LEVELS.contains(&t)) {
                    return Err(Refusal::new(format!(
                        "{agent_id}: effortLevel takes one of off, low, medium, high"
                    )));
                }
            }
            _ => {
                return Err(Refusal::new(format!(
                    "{agent_id}: {key} is not a config key this agent takes"
                )));
            }
        }
    }
    Ok(())
}
