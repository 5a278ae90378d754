//! Session configuration: resolving values against an agent's schema, client changes with
//! the VS Code keys mapped, and mirroring a turn's model choices.

use std::path::Path;

use ahp_types::actions::{SessionConfigChangedAction, StateAction};
use ahp_types::common::JsonObject;
use ahp_types::state::{Message, SessionConfigSchema, SessionConfigState};
use serde_json::Value;

use crate::agent::Agent;
use crate::error::RpcError;
use crate::session::actor::Actor;

/// The agent's defaults with the client's values on top; keys outside the schema dropped; the
/// agent's refusal becomes `-32602`.
pub(crate) fn resolve(
    agent: &dyn Agent,
    dir: Option<&Path>,
    client: Option<&JsonObject>,
) -> Result<(SessionConfigSchema, JsonObject), RpcError> {
    let schema = agent.config_schema(dir);
    let mut values = agent.config_defaults(dir);
    values.retain(|k, _| schema.properties.contains_key(k));
    if let Some(client) = client {
        // A machine asked for is never dropped as unknown: running on the host instead would
        // give the agent more than the person chose.
        if let Some(value) = client
            .get(crate::nested::machine::COMPUTER_KEY)
            .and_then(serde_json::Value::as_str)
            .filter(|v| {
                !v.is_empty()
                    && !schema
                        .properties
                        .contains_key(crate::nested::machine::COMPUTER_KEY)
            })
        {
            return Err(RpcError::invalid_params(agent.machine_refusal(value)));
        }
        for (k, v) in client {
            if schema.properties.contains_key(k) {
                values.insert(k.clone(), v.clone());
            }
        }
    }
    agent
        .validate_config(&values)
        .map_err(|r| RpcError::invalid_params(format!("config: {}", r.0)))?;
    Ok((schema, values))
}

fn enum_has(schema: &SessionConfigSchema, key: &str, value: &str) -> bool {
    schema
        .properties
        .get(key)
        .and_then(|p| p.r#enum.as_ref())
        .is_none_or(|e| e.iter().any(|v| v.as_str() == Some(value)))
}

impl Actor {
    /// A client's `session/configChanged`: every key is checked before any is applied, and the
    /// backend's share handed to every chat's backend.
    pub(crate) fn client_config(
        &mut self,
        a: &SessionConfigChangedAction,
        origin: &ahp_types::actions::ActionOrigin,
    ) -> Result<(), String> {
        if a.replace == Some(true) {
            return Err(
                "replacing the whole configuration is not allowed; send the keys to change".into(),
            );
        }
        let Some(config) = self.state.config.clone() else {
            return Err("this session has no configuration".into());
        };
        let mut backend_changes = JsonObject::new();
        let mut mapped: Option<Value> = None;
        for (k, v) in &a.config {
            match k.as_str() {
                "mode" => {
                    if v.as_str() != Some("interactive") {
                        return Err(format!("the mode {v} is not supported by this host"));
                    }
                }
                "autoApprove" => {
                    if let Some(t) = self.auto_approve_mode(v, &config)? {
                        mapped = Some(t);
                    }
                }
                "permissions" => {}
                key => {
                    let mutable = config
                        .schema
                        .properties
                        .get(key)
                        .and_then(|p| p.session_mutable)
                        == Some(true);
                    if !mutable {
                        return Err(format!(
                            "the setting {key} cannot be changed during a session"
                        ));
                    }
                    backend_changes.insert(key.to_owned(), v.clone());
                }
            }
        }
        let mut proposed = config.values.clone();
        for (k, v) in &backend_changes {
            proposed.insert(k.clone(), v.clone());
        }
        if let Some(m) = &mapped {
            proposed.insert("permissionMode".into(), m.clone());
        }
        self.agent.validate_config(&proposed).map_err(|r| r.0)?;
        let mut to_backend = backend_changes.clone();
        if let Some(m) = &mapped {
            to_backend.insert("permissionMode".into(), m.clone());
        }
        if !to_backend.is_empty() {
            self.configure_all(&to_backend)?;
        }
        let echo = StateAction::SessionConfigChanged(a.clone());
        self.apply_session(&echo, Some(origin));
        if let Some(m) = mapped {
            let mut c = JsonObject::new();
            c.insert("permissionMode".into(), m);
            self.apply_session(
                &StateAction::SessionConfigChanged(SessionConfigChangedAction {
                    config: c,
                    replace: None,
                }),
                None,
            );
        }
        self.refresh_settings_view();
        Ok(())
    }

    /// The `permissionMode` VS Code's `autoApprove` value `v` maps to, when the session's schema
    /// has it; `default` goes back to the mode in force before `autoApprove` first moved it.
    fn auto_approve_mode(
        &mut self,
        v: &Value,
        config: &SessionConfigState,
    ) -> Result<Option<Value>, String> {
        let target = match v.as_str() {
            Some("default") => self.saved_permission_mode.clone(),
            Some("assisted") => Some(Value::from("acceptEdits")),
            Some("autoApprove") | Some("autopilot") => Some(Value::from("bypassPermissions")),
            _ => return Err(format!("autoApprove does not take the value {v}")),
        };
        if v.as_str() != Some("default") && self.saved_permission_mode.is_none() {
            self.saved_permission_mode = config.values.get("permissionMode").cloned();
        }
        if v.as_str() == Some("default") {
            self.saved_permission_mode = None;
        }
        match target {
            Some(t)
                if config.schema.properties.contains_key("permissionMode")
                    && enum_has(&config.schema, "permissionMode", t.as_str().unwrap_or("")) =>
            {
                Ok(Some(t))
            }
            _ => {
                tracing::info!(
                    "autoApprove has no permission mode to map to; stored with no effect"
                );
                Ok(None)
            }
        }
    }

    /// Hand accepted changes to every chat's backend; the first refusal wins.
    fn configure_all(&mut self, changes: &JsonObject) -> Result<(), String> {
        let chats: Vec<_> = self.chats.keys().cloned().collect();
        for chat in chats {
            // Chats whose backend is not open yet get the values when it opens.
            if let Some(Err(r)) = self.with_backend(&chat, |s| s.configure(changes)) {
                return Err(r.0);
            }
        }
        Ok(())
    }

    /// A turn's model choice and thinking level become the session's values (host actions).
    pub(crate) fn mirror_turn_settings(&mut self, message: &Message) {
        let Some(config) = self.state.config.as_ref() else {
            return;
        };
        let mut changes = JsonObject::new();
        if let Some(model) = &message.model {
            if config.schema.properties.contains_key("model")
                && config.values.get("model").and_then(Value::as_str) != Some(model.id.as_str())
            {
                changes.insert("model".into(), Value::from(model.id.clone()));
            }
            if let Some(level) = model.config.as_ref().and_then(|c| c.get("thinkingLevel"))
                && config.schema.properties.contains_key("effortLevel")
                && config.values.get("effortLevel") != Some(level)
            {
                changes.insert("effortLevel".into(), level.clone());
            }
        }
        if changes.is_empty() {
            return;
        }
        self.apply_session(
            &StateAction::SessionConfigChanged(SessionConfigChangedAction {
                config: changes,
                replace: None,
            }),
            None,
        );
        self.refresh_settings_view();
    }
}
