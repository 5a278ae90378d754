//! A session's settings as ACP config options: the host's session config schema and values,
//! with the agent's model catalogue for `model`. The approval mode is the `mode` option, the
//! model `model`, the thinking effort `thought_level`; any other setting a session may change
//! while it runs keeps its own key.

use agent_client_protocol::v1::schema::{
    SessionConfigOption, SessionConfigOptionCategory, SessionConfigSelectOption, SessionMode,
    SessionModeState,
};
use ahp_types::state::{SessionConfigPropertySchema, SessionModelInfo, SessionState};
use serde_json::Value;

/// The host keys with an ACP id and category of their own.
const NAMED: [(&str, &str); 5] = [
    ("permissionMode", "mode"),
    ("model", "model"),
    ("effortLevel", "thought_level"),
    ("thinkingLevel", "thought_level"),
    ("reasoningEffort", "thought_level"),
];

/// The ACP id of a host setting.
fn id_of(key: &str) -> &str {
    NAMED
        .iter()
        .find(|(k, _)| *k == key)
        .map_or(key, |(_, id)| id)
}

fn category_of(id: &str) -> Option<SessionConfigOptionCategory> {
    match id {
        "mode" => Some(SessionConfigOptionCategory::Mode),
        "model" => Some(SessionConfigOptionCategory::Model),
        "thought_level" => Some(SessionConfigOptionCategory::ThoughtLevel),
        _ => None,
    }
}

/// One setting the editor may change.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Setting {
    /// The ACP id.
    pub id: String,
    /// The host's key.
    pub key: String,
    name: String,
    description: Option<String>,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// `(value, name, description)` choices and the current value.
    Select(Vec<(String, String, Option<String>)>, String),
    Boolean(bool),
}

fn choices(p: &SessionConfigPropertySchema) -> Vec<(String, String, Option<String>)> {
    let values = p.r#enum.as_deref().unwrap_or_default();
    values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let value = v.as_str()?.to_owned();
            let name = p
                .enum_labels
                .as_ref()
                .and_then(|l| l.get(i))
                .cloned()
                .unwrap_or_else(|| value.clone());
            let description = p.enum_descriptions.as_ref().and_then(|d| d.get(i)).cloned();
            Some((value, name, description))
        })
        .collect()
}

/// The settings of a session, in the order an editor lists them: mode, model, thinking, then
/// the rest by key.
pub(crate) fn settings(session: &SessionState, models: &[SessionModelInfo]) -> Vec<Setting> {
    let Some(config) = &session.config else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (key, p) in &config.schema.properties {
        if p.session_mutable != Some(true) || p.read_only == Some(true) {
            continue;
        }
        let current = config.values.get(key).or(p.default.as_ref());
        let kind = if key == "model" {
            // The catalogue may list the model in force twice: as the record names it and
            // under the agent's prefix; the editor is shown the prefixed one.
            let prefixed = |id: &str| format!("{}/{id}", session.provider);
            let mut list: Vec<(String, String, Option<String>)> = models
                .iter()
                .filter(|m| m.id.contains('/') || !models.iter().any(|o| o.id == prefixed(&m.id)))
                .map(|m| (m.id.clone(), m.name.clone(), None))
                .collect();
            let now = current.and_then(Value::as_str).map(str::to_owned);
            let now = match now {
                Some(n) => n,
                None => match list.first() {
                    Some(first) => first.0.clone(),
                    None => continue,
                },
            };
            // A record names its model without the catalogue's `<agent>/` prefix.
            let now = match list.iter().find(|(v, _, _)| {
                *v == now
                    || v.strip_prefix(session.provider.as_str())
                        .and_then(|r| r.strip_prefix('/'))
                        == Some(now.as_str())
            }) {
                Some((v, _, _)) => v.clone(),
                None => {
                    list.insert(0, (now.clone(), now.clone(), None));
                    now
                }
            };
            Kind::Select(list, now)
        } else if p.r#type == "boolean" {
            Kind::Boolean(current.and_then(Value::as_bool).unwrap_or(false))
        } else {
            let list = choices(p);
            let Some(first) = list.first() else { continue };
            let now = current
                .and_then(Value::as_str)
                .map_or_else(|| first.0.clone(), str::to_owned);
            Kind::Select(list, now)
        };
        out.push(Setting {
            id: id_of(key).to_owned(),
            key: key.clone(),
            name: p.title.clone(),
            description: p.description.clone(),
            kind,
        });
    }
    let rank = |id: &str| match id {
        "mode" => 0,
        "model" => 1,
        "thought_level" => 2,
        _ => 3,
    };
    out.sort_by(|a, b| rank(&a.id).cmp(&rank(&b.id)).then(a.id.cmp(&b.id)));
    // Two host keys that both read as `thought_level` keep the first.
    out.dedup_by(|b, a| a.id == b.id);
    out
}

/// The settings as ACP config options.
pub(crate) fn options(settings: &[Setting]) -> Vec<SessionConfigOption> {
    settings
        .iter()
        .map(|s| {
            let option = match &s.kind {
                Kind::Select(list, now) => SessionConfigOption::select(
                    s.id.clone(),
                    s.name.clone(),
                    now.clone(),
                    list.iter()
                        .map(|(v, n, d)| {
                            SessionConfigSelectOption::new(v.clone(), n.clone())
                                .description(d.clone())
                        })
                        .collect::<Vec<_>>(),
                ),
                Kind::Boolean(now) => {
                    SessionConfigOption::boolean(s.id.clone(), s.name.clone(), *now)
                }
            };
            option
                .description(s.description.clone())
                .category(category_of(&s.id))
        })
        .collect()
}

/// The approval modes as ACP's older session modes, for editors without config options.
pub(crate) fn modes(settings: &[Setting]) -> Option<SessionModeState> {
    let s = settings.iter().find(|s| s.id == "mode")?;
    let Kind::Select(list, now) = &s.kind else {
        return None;
    };
    Some(SessionModeState::new(
        now.clone(),
        list.iter()
            .map(|(v, n, d)| SessionMode::new(v.clone(), n.clone()).description(d.clone()))
            .collect(),
    ))
}

/// The host key and value an editor's choice stands for, or the sentence why it cannot be set.
pub(crate) fn choose(
    settings: &[Setting],
    id: &str,
    value: &agent_client_protocol::v1::schema::SessionConfigOptionValue,
) -> Result<(String, Value), String> {
    let Some(s) = settings.iter().find(|s| s.id == id) else {
        let ids: Vec<&str> = settings.iter().map(|s| s.id.as_str()).collect();
        return Err(format!(
            "{id} is not a setting of this session (it has {})",
            ids.join(", ")
        ));
    };
    match &s.kind {
        Kind::Select(list, _) => {
            let Some(v) = value.as_value_id() else {
                return Err(format!("{id} takes one of its listed values"));
            };
            let v = v.0.to_string();
            if !list.iter().any(|(x, _, _)| *x == v) {
                let names: Vec<&str> = list.iter().map(|(x, _, _)| x.as_str()).collect();
                return Err(format!("{id}: {v} is not one of {}", names.join(", ")));
            }
            Ok((s.key.clone(), Value::String(v)))
        }
        Kind::Boolean(_) => match value.as_bool() {
            Some(b) => Ok((s.key.clone(), Value::Bool(b))),
            None => Err(format!("{id} takes true or false")),
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn session() -> SessionState {
        serde_json::from_value(json!({
            "provider": "cofold", "title": "", "status": 0, "lifecycle": "ready",
            "activeClients": [], "chats": [],
            "config": {
                "schema": { "type": "object", "properties": {
                    "permissionMode": { "type": "string", "title": "Approvals", "enum": ["default", "auto"],
                        "enumLabels": ["Ask", "Auto"], "default": "auto", "sessionMutable": true },
                    "model": { "type": "string", "title": "Model", "sessionMutable": true },
                    "effortLevel": { "type": "string", "title": "Effort", "enum": ["off", "high"], "sessionMutable": true },
                    "baseUrl": { "type": "string", "title": "Endpoint", "sessionMutable": false }
                }},
                "values": { "model": "p/m2" }
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_model_named_without_its_prefix_is_the_catalogue_entry() {
        let mut state = session();
        if let Some(c) = &mut state.config {
            c.values.insert("model".into(), json!("m"));
        }
        let models: Vec<SessionModelInfo> = serde_json::from_value(json!([
            { "id": "m", "provider": "cofold", "name": "m" },
            { "id": "cofold/m", "provider": "cofold", "name": "m" },
            { "id": "cofold/m2", "provider": "cofold", "name": "m2" }
        ]))
        .unwrap();
        let opts = serde_json::to_value(options(&settings(&state, &models))).unwrap();
        assert_eq!(opts[1]["currentValue"], "cofold/m", "{opts}");
        assert_eq!(opts[1]["options"].as_array().unwrap().len(), 2, "{opts}");
    }

    #[test]
    fn settings_become_mode_model_and_thought_level() {
        let models: Vec<SessionModelInfo> =
            serde_json::from_value(json!([{ "id": "p/m1", "provider": "cofold", "name": "M1" }]))
                .unwrap();
        let s = settings(&session(), &models);
        let opts = serde_json::to_value(options(&s)).unwrap();
        assert_eq!(opts[0]["id"], "mode");
        assert_eq!(opts[0]["category"], "mode");
        assert_eq!(opts[0]["currentValue"], "auto");
        assert_eq!(opts[1]["id"], "model");
        assert_eq!(opts[1]["currentValue"], "p/m2");
        assert_eq!(opts[1]["options"].as_array().unwrap().len(), 2);
        assert_eq!(opts[2]["id"], "thought_level");
        assert_eq!(opts.as_array().unwrap().len(), 3);
        let (key, value) = choose(&s, "mode", &"default".into()).unwrap();
        assert_eq!((key.as_str(), value), ("permissionMode", json!("default")));
        assert!(choose(&s, "mode", &"loud".into()).is_err());
        assert!(choose(&s, "baseUrl", &"x".into()).is_err());
        assert_eq!(
            serde_json::to_value(modes(&s).unwrap()).unwrap()["currentModeId"],
            "auto"
        );
    }
}
