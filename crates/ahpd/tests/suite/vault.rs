//! The vault from the command line: values from standard input only, never printed.

use super::support::*;

#[test]
fn vault_round_trip_never_prints_the_value() {
    let env = Env::new();
    let out = env.run_with_input(&["vault", "set", "host:deepseek"], "sk-123\n");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let vault = env.dir().join("vault.json");
    assert_eq!(mode(&vault), 0o600);
    let stored: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&vault).unwrap()).unwrap();
    assert_eq!(stored["host:deepseek"], "sk-123");

    let list = env.run(&["vault", "list"]);
    assert_eq!(list.status.code(), Some(0));
    assert!(text(&list.stdout).contains("host:deepseek"));
    let json = env.run(&["vault", "list", "--json"]);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&json.stdout).unwrap(),
        serde_json::json!([{"name": "host:deepseek", "set": true}])
    );
    for o in [&out, &list, &json] {
        assert!(!text(&o.stdout).contains("sk-123"));
        assert!(!text(&o.stderr).contains("sk-123"));
    }
    let config = env.run(&["config"]);
    assert!(!text(&config.stdout).contains("sk-123"));

    assert_eq!(
        env.run(&["vault", "delete", "host:deepseek"]).status.code(),
        Some(0)
    );
    let again = env.run(&["vault", "delete", "host:deepseek"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again.stderr).contains("the vault holds no host:deepseek"));
}

#[test]
fn refused_vault_commands() {
    let env = Env::new();
    let out = env.run_with_input(&["vault", "set", "host:deepseek", "sk-123"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(!text(&out.stderr).contains("sk-123"));
    let out = env.run_with_input(&["vault", "set", "bad-name"], "v\n");
    assert_eq!(out.status.code(), Some(2));
    let out = env.run_with_input(&["vault", "set", "host:empty"], "\n");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        env.run(&["vault", "delete", "host:nope"]).status.code(),
        Some(1)
    );
}

#[test]
fn an_unreadable_vault_is_kept() {
    let env = Env::new();
    std::fs::create_dir_all(env.dir()).unwrap();
    let vault = env.dir().join("vault.json");
    std::fs::write(&vault, "{\"host:a\": \"sk-9").unwrap();
    let out = env.run_with_input(&["vault", "set", "host:b"], "x");
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("not valid JSON at line 1"), "{err}");
    assert!(!err.contains("sk-9"));
    assert_eq!(
        std::fs::read_to_string(&vault).unwrap(),
        "{\"host:a\": \"sk-9"
    );
}
