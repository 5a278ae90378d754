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
fn an_empty_token_file_stops_the_start_naming_the_file() {
    let env = Env::new();
    env.write_base("{}");
    std::fs::write(env.dir().join("token"), "\n").unwrap();
    let out = env.run(&["--host", "0.0.0.0", "--port", "0", "--plugin", ECHO]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert_eq!(
        err.lines().last().unwrap_or(""),
        format!(
            "ahpd: {}: the token file is empty",
            env.dir().join("token").display()
        )
    );
    // The file was left readable by others (the umask of the test): the start narrows the
    // configuration folder's files before it reads them.
    assert_eq!(mode(&env.dir().join("token")), 0o600);
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
