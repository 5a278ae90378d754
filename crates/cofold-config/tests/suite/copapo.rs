//! The copapo configuration (runtime cases 264–269, docs/acceptance.md) and the environment overlay.

use cofold_agents::policy::PermissionMode;
use cofold_agents::thinking::EffortLevel;
use cofold_config::{ConfigError, Mode, ProviderConfig, load_copapo, split_model};
use serde_json::json;

use super::support::World;

#[test]
fn item_264_defaults_and_tools_merged_key_by_key() {
    let w = World::new();
    let c = load_copapo(w.load(&w.path("work"), Mode::Strict)).unwrap();
    assert!(c.providers.is_empty());
    assert_eq!((c.model.clone(), c.instructions.clone()), (None, None));
    assert_eq!(
        (c.permissions, c.reasoning),
        (PermissionMode::Default, EffortLevel::Off)
    );
    assert_eq!(
        (c.context.max_tokens, c.context.auto_compact),
        (32000, true)
    );
    assert_eq!(
        c.tools,
        json!({ "files": true, "shell": true, "web": true, "memory": true })
    );

    w.user(&json!({ "tools": { "shell": false } }));
    w.write(
        "work/project/.copapo.json",
        &json!({ "tools": { "web": { "search": { "duckduckgo": true } } } }),
    );
    let c = load_copapo(w.load(&w.path("work/project"), Mode::Strict)).unwrap();
    assert_eq!(
        c.tools,
        json!({ "files": true, "shell": false, "web": { "search": { "duckduckgo": true } }, "memory": true })
    );
}

#[test]
fn item_265_project_permissions_user_providers_and_model() {
    let w = World::new();
    w.user(&json!({ "providers": [{ "id": "ds", "baseUrl": "https://api.deepseek.com/v1", "apiKey": "sk-user" }], "model": "ds/deepseek-chat", "permissions": "plan" }));
    let project = w.write(
        "work/project/.copapo.json",
        &json!({ "permissions": "acceptEdits" }),
    );
    let c = load_copapo(w.load(&w.path("work/project/sub"), Mode::Strict)).unwrap();
    assert_eq!(c.permissions, PermissionMode::AcceptEdits);
    assert_eq!(
        c.providers,
        vec![ProviderConfig {
            api_key: Some("sk-user".into()),
            ..ProviderConfig::new("ds", "https://api.deepseek.com/v1")
        }]
    );
    assert_eq!(c.model.as_deref(), Some("ds/deepseek-chat"));
    assert_eq!(
        c.resolved.source_of("permissions"),
        Some(project.display().to_string().as_str())
    );
}

#[test]
fn item_266_copapo_variables() {
    let mut w = World::new();
    w.user(&json!({ "providers": [{ "id": "or", "baseUrl": "https://openrouter.ai/api/v1" }, { "id": "default", "baseUrl": "http://old" }] }));
    w.set("COPAPO_BASE_URL", "http://127.0.0.1:8080/v1");
    w.set("COPAPO_API_KEY", "sk-env");
    w.set("COPAPO_MODEL", "qwen3");
    let c = load_copapo(w.load(&w.path("work"), Mode::Strict)).unwrap();
    let ids: Vec<&str> = c.providers.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["default", "or"]);
    assert_eq!(
        c.providers[0],
        ProviderConfig {
            api_key: Some("sk-env".into()),
            ..ProviderConfig::new("default", "http://127.0.0.1:8080/v1")
        }
    );
    assert_eq!(c.model.as_deref(), Some("default/qwen3"));

    w.set("COPAPO_MODEL", "default/deepseek/deepseek-chat");
    let c = load_copapo(w.load(&w.path("work"), Mode::Strict)).unwrap();
    assert_eq!(c.model.as_deref(), Some("default/deepseek/deepseek-chat"));
    let r = split_model(c.model.as_deref().unwrap()).unwrap();
    assert_eq!(
        (r.provider.as_str(), r.model.as_str()),
        ("default", "deepseek/deepseek-chat")
    );
    w.set("COPAPO_MODEL", "deepseek/deepseek-chat");
    let c = load_copapo(w.load(&w.path("work"), Mode::Strict)).unwrap();
    assert_eq!(
        split_model(c.model.as_deref().unwrap()).unwrap().provider,
        "deepseek"
    );
}

#[test]
fn item_267_cofold_fallbacks_precedence_and_empty_values() {
    let mut w = World::new();
    w.set("COFOLD_BASE_URL", "http://cofold/v1");
    w.set("COFOLD_API_KEY", "sk-cofold");
    w.set("COFOLD_MODEL", "m");
    let c = load_copapo(w.load(&w.path("work"), Mode::Strict)).unwrap();
    assert_eq!(
        c.providers[0],
        ProviderConfig {
            api_key: Some("sk-cofold".into()),
            ..ProviderConfig::new("default", "http://cofold/v1")
        }
    );
    assert_eq!(c.model.as_deref(), Some("default/m"));

    w.set("COPAPO_BASE_URL", "http://copapo/v1");
    w.set("COPAPO_MODEL", "");
    let c = load_copapo(w.load(&w.path("work"), Mode::Strict)).unwrap();
    assert_eq!(c.providers[0].base_url, "http://copapo/v1");
    assert_eq!(c.providers[0].api_key.as_deref(), Some("sk-cofold"));
    assert_eq!(
        c.model.as_deref(),
        Some("default/m"),
        "an empty COPAPO_MODEL counts as unset"
    );

    let mut only_key = World::new();
    only_key.set("COPAPO_API_KEY", "sk-alone");
    let c = load_copapo(only_key.load(&only_key.path("work"), Mode::Strict)).unwrap();
    assert!(c.providers.is_empty());
}

#[test]
fn copapo_config_variable_and_explicit_path() {
    let mut w = World::new();
    w.user(&json!({ "instructions": "user" }));
    w.write("work/machine.json", &json!({ "instructions": "machine" }));
    w.set("COPAPO_CONFIG", "machine.json");
    w.set("COFOLD_CONFIG", "/nowhere.json");
    let c = load_copapo(w.load(&w.path("work"), Mode::Strict)).unwrap();
    assert_eq!(
        c.instructions.as_deref(),
        Some("machine"),
        "COFOLD_CONFIG is not read"
    );
    let explicit = w.write("work/explicit.json", &json!({ "instructions": "explicit" }));
    let c = load_copapo(cofold_config::LoadOptions {
        path: Some(explicit),
        ..w.load(&w.path("work"), Mode::Strict)
    })
    .unwrap();
    assert_eq!(c.instructions.as_deref(), Some("explicit"));
    w.set("COPAPO_CONFIG", "gone.json");
    let e = load_copapo(w.load(&w.path("work"), Mode::Lenient)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{} was asked for and is not there",
            w.path("work/gone.json").display()
        )
    );
}

fn strict_error(w: &World, project: serde_json::Value) -> String {
    w.write("work/project/.copapo.json", &project);
    load_copapo(w.load(&w.path("work/project"), Mode::Strict))
        .unwrap_err()
        .to_string()
}

#[test]
fn item_268_strict_names_the_key_and_the_files() {
    let w = World::new();
    let user = w.user(&json!({ "model": "a/b" }));
    let project = w.path("work/project/.copapo.json");
    let read = format!(" (read: {}, {})", user.display(), project.display());
    assert_eq!(
        strict_error(&w, json!({ "permissions": "sometimes" })),
        format!(
            "config.permissions must be one of default, acceptEdits, plan, auto, bypassPermissions, dontAsk{read}"
        )
    );
    assert_eq!(
        strict_error(
            &w,
            json!({ "providers": [{ "id": "a", "baseUrl": "u" }, { "id": "b/c", "baseUrl": "u" }] })
        ),
        format!("config.providers[1].id must not contain a slash or whitespace{read}")
    );
    assert_eq!(
        strict_error(&w, json!({ "colour": "red" })),
        format!("config.colour is not a field{read}")
    );
    assert_eq!(
        strict_error(&w, json!({ "rules": { "deny": [{ "match": "x" }] } })),
        format!("config.rules.deny[0].tool must be a non-empty string{read}")
    );
    assert_eq!(
        strict_error(&w, json!({ "rules": { "ask": [{ "tool": "" }] } })),
        format!("config.rules.ask[0].tool must be a non-empty string{read}")
    );
    assert_eq!(
        strict_error(&w, json!({ "rules": { "sometimes": [] } })),
        format!("config.rules.sometimes is not a field{read}")
    );
    assert_eq!(
        strict_error(&w, json!({ "context": { "maxTokens": 10 } })),
        format!("config.context.maxTokens must be an integer of at least 1000{read}")
    );
    assert_eq!(
        strict_error(&w, json!({ "limits": { "maxSteps": "ten" } })),
        format!("config.limits.maxSteps must be an integer of at least 1{read}")
    );
    assert_eq!(
        strict_error(&w, json!({ "params": { "temperature": 3 } })),
        format!("config.params.temperature must be a number from 0 to 2{read}")
    );
    assert_eq!(
        strict_error(&w, json!({ "reasoning": "max" })),
        format!("config.reasoning must be one of off, low, medium, high{read}")
    );
    assert_eq!(
        strict_error(&w, json!({ "model": 7 })),
        format!("config.model must be a non-empty string{read}")
    );

    let e = {
        w.write(
            "work/project/.copapo.json",
            &json!({ "instructions": false }),
        );
        load_copapo(w.load(&w.path("work/project"), Mode::Strict)).unwrap_err()
    };
    assert!(matches!(&e, ConfigError::Invalid { key, .. } if key == "instructions"));

    let alone = World::new();
    let e = load_copapo(alone.load(&alone.path("work"), Mode::Strict));
    assert!(e.is_ok());
}

#[test]
fn item_268_no_files_means_no_suffix() {
    let mut w = World::new();
    w.set("COPAPO_MODEL", "m");
    // Nothing wrong here; an error without files would carry no "(read: …)".
    assert!(load_copapo(w.load(&w.path("work"), Mode::Strict)).is_ok());
}

#[test]
fn item_269_lenient_drops_only_what_is_wrong() {
    let w = World::new();
    w.write(
        "work/project/.copapo.json",
        &json!({
            "colour": "red",
            "providers": [
                { "id": "good", "baseUrl": "http://good/v1" },
                { "id": "b/c", "baseUrl": "http://bad/v1" },
                { "id": "nourl" },
                { "id": "also", "baseUrl": "http://also/v1", "apiKey": "" }
            ],
            "model": "good/m",
            "instructions": "be kind",
            "permissions": "sometimes",
            "context": { "maxTokens": 5, "autoCompact": false },
            "rules": { "deny": [{ "tool": "shell_exec" }, { "tool": "" }], "weird": [] }
        }),
    );
    let c = load_copapo(w.load(&w.path("work/project"), Mode::Lenient)).unwrap();
    let ids: Vec<&str> = c.providers.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["good", "also"]);
    assert_eq!(
        (c.model.as_deref(), c.instructions.as_deref()),
        (Some("good/m"), Some("be kind"))
    );
    assert_eq!(c.permissions, PermissionMode::Default);
    assert_eq!(
        (c.context.max_tokens, c.context.auto_compact),
        (32000, false)
    );
    let rules = c.rules.unwrap();
    assert_eq!(rules.deny.len(), 1);
    assert_eq!(rules.deny[0].tool, "shell_exec");
    // The same file refused in strict mode.
    assert!(load_copapo(w.load(&w.path("work/project"), Mode::Strict)).is_err());
}

#[test]
fn a_file_of_the_wrong_type_is_one_sentence_naming_the_file() {
    let w = World::new();
    let user = w.write_text(
        "home/.config/copapo/config.json",
        "[\"not\", \"an object\"]",
    );
    let e = load_copapo(w.load(&w.path("work"), Mode::Lenient)).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{} is not an object, so it is not a configuration file",
            user.display()
        )
    );
}

#[test]
fn secrets_from_files_never_appear_in_errors() {
    let w = World::new();
    w.user(&json!({ "providers": [{ "id": "a b", "baseUrl": "http://x", "apiKey": "sk-very-secret" }] }));
    let e = load_copapo(w.load(&w.path("work"), Mode::Strict)).unwrap_err();
    assert!(!e.to_string().contains("sk-very-secret"), "{e}");
    assert!(!format!("{e:?}").contains("sk-very-secret"));
}
