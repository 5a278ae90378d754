//! Plugin states, enabling, options and their checks.

use super::support::*;

fn list_json(env: &Env) -> serde_json::Value {
    let out = env.run(&["plugin", "list", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn row<'a>(rows: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no row {name} in {rows}"))
}

#[test]
fn list_has_no_side_effects_and_is_stable() {
    let env = Env::new();
    let first = env.run(&["plugin", "list"]);
    let second = env.run(&["plugin", "list"]);
    assert_eq!(first.status.code(), Some(0));
    assert_eq!(first.stdout, second.stdout);
    assert!(text(&first.stdout).contains("NAME"));
    assert!(
        !env.dir().exists(),
        "plugin list created the configuration folder"
    );
    assert_eq!(row(&list_json(&env), ECHO)["state"], "disabled");
}

#[test]
fn enable_disable_and_install() {
    let env = Env::new();
    let out = env.run(&["plugin", "install", ECHO]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let base: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(env.base_file()).unwrap()).unwrap();
    assert_eq!(base["plugins"], serde_json::json!([ECHO]));
    assert_eq!(row(&list_json(&env), ECHO)["state"], "ready");

    let out = env.run(&["plugin", "disable", ECHO]);
    assert_eq!(out.status.code(), Some(0));
    let base: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(env.base_file()).unwrap()).unwrap();
    assert_eq!(
        base["plugins"],
        serde_json::json!([{"name": ECHO, "enabled": false}])
    );
    assert_eq!(row(&list_json(&env), ECHO)["state"], "disabled");
    env.run(&["plugin", "enable", ECHO]);
    assert_eq!(row(&list_json(&env), ECHO)["state"], "ready");

    let out = env.run(&["plugin", "install", "left-pad"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains(ECHO), "failures go to stderr");
    assert!(text(&out.stdout).is_empty());
    let out = env.run(&["plugin", "remove", ECHO]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).is_empty());
}

#[test]
fn disabling_an_unknown_plugin_is_refused_and_writes_nothing() {
    let env = Env::new();
    env.write_base(r#"{"plugins": ["@ahpd/agent-echo"]}"#);
    let out = env.run(&["plugin", "disable", "@ahpd/agent-ecoh"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(text(&out.stdout).is_empty());
    let said = text(&out.stderr);
    assert!(
        said.contains("@ahpd/agent-ecoh is not a built-in plugin"),
        "{said}"
    );
    let base = std::fs::read_to_string(env.base_file()).unwrap();
    assert!(!base.contains("agent-ecoh"), "the typo stays out: {base}");
}

#[test]
fn wrong_options_make_one_plugin_error_and_the_rest_start() {
    let env = Env::new();
    env.write_base(
        r#"{"port": 0, "plugins": [{"name": "@ahpd/agent-echo-twin", "options": {"delayMs": "slow"}}, "@ahpd/agent-echo"]}"#,
    );
    let rows = list_json(&env);
    let twin = row(&rows, "@ahpd/agent-echo-twin");
    assert_eq!(twin["state"], "error");
    assert_eq!(
        twin["reason"],
        "plugins.@ahpd/agent-echo-twin.options.delayMs: must be an integer"
    );
    let daemon = env.daemon(&[], "skip.log");
    let log = daemon.log_text();
    assert!(
        log.contains("plugin @ahpd/agent-echo-twin skipped"),
        "{log}"
    );
    let rt = rt();
    rt.block_on(async {
        let (_client, init) = client(&daemon.address).await;
        let snap = &init.snapshots[0];
        let text = serde_json::to_string(&snap.state).unwrap();
        assert!(text.contains("\"provider\":\"echo\""), "{text}");
    });
    assert_eq!(daemon.stop(), 0);
}

#[test]
fn a_missing_secret_makes_the_plugin_unconfigured() {
    let env = Env::new();
    env.write_base(
        r#"{"plugins": [{"name": "@ahpd/agent-echo", "options": {"apiKey": {"$secret": "host:nope"}}}]}"#,
    );
    let rows = list_json(&env);
    assert_eq!(row(&rows, ECHO)["state"], "unconfigured");
    assert_eq!(row(&rows, ECHO)["reason"], "the vault holds no host:nope");
}

#[test]
fn two_plugins_registering_one_engine_refuse_the_start() {
    let env = Env::new();
    let out = env.run(&[
        "--plugin",
        ECHO,
        "--plugin",
        "@ahpd/agent-echo-twin",
        "--port",
        "0",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains(ECHO) && err.contains("@ahpd/agent-echo-twin") && err.contains("engine echo"),
        "{err}"
    );
}

#[test]
fn plugin_config_sets_shows_and_unsets_options() {
    let env = Env::new();
    let out = env.run(&["plugin", "config", ECHO, "delayMs", "5"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = env.run(&["plugin", "config", ECHO, "delayMs"]);
    assert_eq!(text(&out.stdout).trim(), "5");
    let out = env.run(&["plugin", "config", ECHO, "delayMs", "soon"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("plugins.@ahpd/agent-echo.options.delayMs"));
    let out = env.run(&["plugin", "config", ECHO, "apiKey", "sk-plain-1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("ahpd vault set"));
    assert!(
        !std::fs::read_to_string(env.base_file())
            .unwrap()
            .contains("sk-plain-1")
    );
    let out = env.run(&["plugin", "config", "unset", ECHO, "delayMs"]);
    assert_eq!(out.status.code(), Some(0));
    let out = env.run(&["plugin", "config", ECHO]);
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(shown.get("delayMs").is_none(), "{shown}");
    assert_eq!(
        shown["store"],
        env.dir().join("echo-store").display().to_string()
    );
}

#[test]
fn a_configured_name_that_is_not_built_in_is_shown_and_skipped() {
    let env = Env::new();
    env.write_base(r#"{"port": 0, "plugins": ["left-pad", "@ahpd/agent-echo"]}"#);
    let rows = list_json(&env);
    let row = row(&rows, "left-pad");
    assert_eq!(row["state"], "error");
    assert!(
        row["reason"]
            .as_str()
            .unwrap()
            .starts_with("left-pad is not a built-in plugin")
    );
    let daemon = env.daemon(&[], "left-pad.log");
    assert!(daemon.log_text().contains("plugin left-pad skipped"));
    assert_eq!(daemon.stop(), 0);
}
