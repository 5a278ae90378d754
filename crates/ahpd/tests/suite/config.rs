//! The configuration files: locations, merging, wrong values, unknown keys, relative paths.

use super::support::*;

#[test]
fn a_wrong_value_names_the_file_and_the_key() {
    let env = Env::new();
    env.write_base(r#"{"port": "x"}"#);
    let out = env.run(&["--plugin", ECHO]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim(),
        format!(
            "ahpd: {}: port: must be an integer from 0 to 65535",
            env.base_file().display()
        )
    );
    assert!(text(&out.stdout).is_empty(), "nothing listens");
}

#[test]
fn a_file_that_does_not_parse_names_line_and_column() {
    let env = Env::new();
    env.write_base("{\"port\": 9187,");
    let out = env.run(&["--plugin", ECHO]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "ahpd: {}: line 1, column 14: ",
            env.base_file().display()
        )),
        "{err}"
    );
}

#[test]
fn array_members_are_named_with_an_index() {
    let env = Env::new();
    env.write_base(r#"{"plugins": [{"name": "@ahpd/agent-echo", "enabled": "yes"}]}"#);
    let out = env.run(&[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains(": plugins[0].enabled: must be true or false"));
}

#[test]
fn an_unknown_key_warns_and_the_start_goes_on() {
    let env = Env::new();
    env.write_base(r#"{"users": {}, "port": 0, "plugins": ["@ahpd/agent-echo"]}"#);
    let daemon = env.daemon(&[], "unknown-key.log");
    assert!(daemon.address.starts_with("ws://127.0.0.1:"));
    let log = daemon.log_text();
    assert!(log.contains("WARN"), "{log}");
    assert!(log.contains("unknown key users (ignored)"), "{log}");
    assert_eq!(daemon.stop(), 0);
}

#[test]
fn ahpd_config_is_merged_over_the_base_file() {
    let env = Env::new();
    env.write_base(r#"{"port": 9999, "plugins": ["@ahpd/agent-echo"]}"#);
    let extra = env.root.path().join("extra.json");
    std::fs::write(&extra, r#"{"port": 0}"#).unwrap();
    let mut cmd = env.cmd();
    cmd.env("AHPD_CONFIG", &extra);
    let daemon = env.daemon_with(cmd, &[], "merge.log");
    assert_ne!(daemon.port(), 9999);
    assert_ne!(daemon.port(), 0);
    assert_eq!(daemon.stop(), 0);

    let out = env
        .cmd()
        .env("AHPD_CONFIG", env.root.path().join("missing.json"))
        .args(["--plugin", ECHO])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("missing.json"));
}

#[test]
fn config_file_replaces_both_other_files() {
    let env = Env::new();
    env.write_base(r#"{"port": 1}"#);
    let own = env.root.path().join("own");
    std::fs::create_dir(&own).unwrap();
    std::fs::write(own.join("c.json"), r#"{"host": "localhost"}"#).unwrap();
    let out = env
        .cmd()
        .env("AHPD_CONFIG", env.base_file())
        .args(["config", "--json", "--config-file"])
        .arg(own.join("c.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        shown["files"],
        serde_json::json!([own.join("c.json").display().to_string()])
    );
    assert_eq!(shown["values"]["port"]["value"], 9187);
    assert_eq!(shown["values"]["port"]["source"], "default");
    assert_eq!(shown["values"]["host"]["value"], "localhost");
}

#[test]
fn relative_paths_resolve_against_the_files_folder() {
    let env = Env::new();
    std::fs::create_dir_all(env.dir().join("work")).unwrap();
    env.write_base(r#"{"paths": ["work"], "connectionToken": "tok-hidden-1"}"#);
    let out = env.run(&["config", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        shown["values"]["paths"]["value"],
        serde_json::json!([env.dir().join("work").display().to_string()])
    );
    assert_eq!(shown["values"]["connectionToken"]["value"], "<set>");
    assert!(!text(&out.stdout).contains("tok-hidden-1"));

    env.write_base(r#"{"paths": ["gone"]}"#);
    let out = env.run(&["--plugin", ECHO]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains(": paths[0]: "));
}

#[test]
fn two_token_keys_in_the_merged_files_are_refused() {
    let env = Env::new();
    env.write_base(r#"{"connectionToken": "a"}"#);
    let extra = env.root.path().join("extra.json");
    std::fs::write(&extra, r#"{"connectionTokenFile": "t"}"#).unwrap();
    let out = env
        .cmd()
        .env("AHPD_CONFIG", &extra)
        .args(["--plugin", ECHO, "--port", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("connectionToken (") && err.contains("connectionTokenFile ("),
        "{err}"
    );
}

#[test]
fn the_host_limits_are_read_checked_and_shown() {
    let env = Env::new();
    env.write_base(r#"{"requestTimeoutSec": 0}"#);
    let out = env.run(&["--plugin", ECHO]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim(),
        format!(
            "ahpd: {}: requestTimeoutSec: must be an integer from 1 to 3600",
            env.base_file().display()
        )
    );

    env.write_base(r#"{"requestTimeoutSec": 5, "loadedSessionCap": 3}"#);
    let out = env.run(&["config", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let values = &v["values"];
    assert_eq!(values["requestTimeoutSec"]["value"], 5);
    assert_eq!(values["loadedSessionCap"]["value"], 3);
    assert_eq!(values["idleUnloadSec"]["value"], 600);
    assert_eq!(values["idleUnloadSec"]["source"], "default");
    assert_eq!(values["inFlightRequestCap"]["value"], 256);

    env.write_base(r#"{"inFlightRequestCap": 0}"#);
    let out = env.run(&["--plugin", ECHO]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim(),
        format!(
            "ahpd: {}: inFlightRequestCap: must be an integer from 1 to 100000",
            env.base_file().display()
        )
    );
    env.write_base(r#"{"inFlightRequestCap": 8}"#);
    let out = env.run(&["config", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["values"]["inFlightRequestCap"]["value"], 8);
}
