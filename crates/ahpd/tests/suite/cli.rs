//! Flags, usage errors and exit codes.

use super::support::*;

#[test]
fn version_names_the_protocol_versions() {
    let env = Env::new();
    let out = env.run(&["--version"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        text(&out.stdout).trim(),
        format!("ahpd {} (AHP 1.0.0, 0.9.0)", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn unknown_flags_and_bad_values_exit_2() {
    let env = Env::new();
    for args in [
        vec!["--remote", "x"],
        vec!["--port", "70000"],
        vec!["--connection-token", "a", "--without-connection-token"],
    ] {
        let out = env.run(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let out = env.run(&["--delta-window-ms", "20000"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--delta-window-ms"));
}

#[test]
fn no_plugin_enabled_exits_2_with_a_hint() {
    let env = Env::new();
    let out = env.run(&["--port", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(
        err.contains("ahpd: no plugin is enabled: run ahpd plugin enable"),
        "{err}"
    );
    assert!(text(&out.stdout).is_empty());
}

#[test]
fn a_non_loopback_host_needs_a_token_option() {
    let env = Env::new();
    let out = env.run(&["--host", "0.0.0.0", "--plugin", ECHO]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr).trim(),
        "ahpd: --host 0.0.0.0 is not a loopback address: give --connection-token, \
         --connection-token-file or --without-connection-token"
    );
}

#[test]
fn an_unknown_plugin_name_lists_the_built_in_ones() {
    let env = Env::new();
    let out = env.run(&["--plugin", "left-pad"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains(ECHO));
    let out = env.run(&["--plugin", ECHO, "--plugin-option", "left-pad.x=1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("names no built-in plugin"));
}

#[test]
fn completion_scripts_are_printed() {
    let env = Env::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = env.run(&["completion", shell]);
        assert_eq!(out.status.code(), Some(0));
        assert!(text(&out.stdout).contains("ahpd"), "{shell}");
    }
    let out = env.run(&["completions", "bash"]);
    assert_eq!(out.status.code(), Some(0));
}
