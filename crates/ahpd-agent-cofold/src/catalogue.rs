//! The models an agent offers: the lists of its endpoints (its own base and copapo's
//! providers), with the thinking levels each takes, and the model in force when no list names
//! it.

use std::time::Duration;

use ahp_types::state::SessionModelInfo;
use ahpd_sdk::agent::Probe;
use serde_json::json;

use crate::build::AgentCore;
use crate::models::{KeySource, thinking_levels};

/// One endpoint the probe lists: prefix, base URL, key, headers and transport settings.
type Listed = (
    String,
    String,
    KeySource,
    Vec<(String, String)>,
    cofold_openai::ProviderSettings,
);

/// What the agent offers: every listed model, and the one in force first when no list has it.
pub(crate) async fn probe(core: &AgentCore) -> Probe {
    let mut models = if core.embedder.adapter.is_none() {
        listed(core).await
    } else {
        Vec::new()
    };
    let reference = core
        .options
        .model
        .clone()
        .or_else(|| core.copapo.model.clone());
    if let Some(reference) = reference
        && !models.iter().any(|m| m.id == reference)
    {
        models.insert(0, unlisted(core, reference));
    }
    Probe {
        models,
        customizations: None,
    }
}

/// The endpoints whose lists are asked: the record's own base first, then copapo's providers.
fn endpoints(core: &AgentCore) -> Vec<Listed> {
    let mut endpoints: Vec<Listed> = Vec::new();
    if let Some(base) = &core.options.base_url {
        let key = core
            .options
            .api_key
            .clone()
            .map(KeySource::Fixed)
            .or_else(|| core.embedder.api_key.clone().map(KeySource::Dynamic))
            .unwrap_or(KeySource::None);
        endpoints.push((
            core.id.clone(),
            base.clone(),
            key,
            Vec::new(),
            cofold_openai::ProviderSettings::default(),
        ));
    }
    for p in &core.copapo.providers {
        let key = p
            .api_key
            .clone()
            .filter(|k| !k.is_empty())
            .map(KeySource::Fixed)
            .unwrap_or(KeySource::None);
        endpoints.push((
            p.id.clone(),
            p.base_url.clone(),
            key,
            p.headers.clone().unwrap_or_default(),
            core.copapo.settings_of(Some(p)),
        ));
    }
    endpoints
}

/// Every model the endpoints list, asked at once, each named `<prefix>/<id>`.
async fn listed(core: &AgentCore) -> Vec<SessionModelInfo> {
    let timeout = Duration::from_millis(core.options.catalogue_timeout_ms);
    let endpoints = endpoints(core);
    let lists =
        futures::future::join_all(endpoints.iter().map(|(_, base, key, headers, settings)| {
            core.shared
                .list(base, key, headers.clone(), settings, timeout)
        }))
        .await;
    let mut models = Vec::new();
    for ((prefix, _, _, _, _), list) in endpoints.iter().zip(lists) {
        for info in list.iter().filter(|m| !m.id.trim().is_empty()) {
            let declared = (prefix == &core.id)
                .then(|| core.options.models.get(&info.id))
                .flatten();
            let levels = thinking_levels(declared, Some(info));
            models.push(SessionModelInfo {
                id: format!("{prefix}/{}", info.id),
                provider: core.id.clone(),
                name: if info.name.trim().is_empty() {
                    info.id.clone()
                } else {
                    info.name.clone()
                },
                max_context_window: info.context_tokens.filter(|c| *c > 0).map(|c| c as i64),
                max_output_tokens: info.max_output_tokens.filter(|c| *c > 0).map(|c| c as i64),
                max_prompt_tokens: None,
                supports_vision: None,
                policy_state: None,
                config_schema: level_schema(&levels),
                meta: None,
            });
        }
    }
    models
}

/// The model in force that no list names; it still takes the levels the record declares for it.
fn unlisted(core: &AgentCore, reference: String) -> SessionModelInfo {
    let declared = core.options.base_url.as_deref().and_then(|base| {
        crate::models::resolve_connection(&core.id, Some(&reference), Some(base), &core.copapo, &[])
            .ok()
            .filter(|c| c.provider.is_none() && c.base_url == base)
            .and_then(|c| core.options.models.get(&c.model_id))
    });
    let levels = if core.embedder.adapter.is_none() {
        thinking_levels(declared, None)
    } else {
        Vec::new()
    };
    SessionModelInfo {
        id: reference.clone(),
        provider: core.id.clone(),
        name: reference,
        max_context_window: None,
        max_output_tokens: None,
        max_prompt_tokens: None,
        supports_vision: None,
        policy_state: None,
        config_schema: level_schema(&levels),
        meta: None,
    }
}

fn level_schema(levels: &[&str]) -> Option<ahp_types::state::ConfigSchema> {
    if levels.is_empty() {
        return None;
    }
    let labels: Vec<&str> = levels
        .iter()
        .map(|l| match *l {
            "off" => "Off",
            "low" => "Low",
            "medium" => "Medium",
            _ => "High",
        })
        .collect();
    let default = if levels.contains(&"off") {
        "off"
    } else {
        levels[0]
    };
    serde_json::from_value(json!({
        "type": "object",
        "properties": { "thinkingLevel": {
            "type": "string", "title": "Thinking", "enum": levels, "enumLabels": labels, "default": default
        } }
    }))
    .ok()
}
