//! The detached daemon: start, status, stop.

use super::support::*;

#[test]
fn start_status_stop() {
    let env = Env::new();
    let out = env.run(&["start", "--plugin", ECHO, "--port", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.starts_with("ahpd started (pid "), "{said}");
    let record_path = env.dir().join("daemon.json");
    assert_eq!(mode(&record_path), 0o600);
    assert_eq!(mode(&env.dir().join("daemon.log")), 0o600);
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record_path).unwrap()).unwrap();
    assert_eq!(
        record["argv"],
        serde_json::json!(["--plugin", ECHO, "--port", "0"])
    );

    let again = env.run(&["start", "--plugin", ECHO, "--port", "0"]);
    assert_eq!(again.status.code(), Some(0));
    assert!(text(&again.stdout).starts_with("ahpd is already running"));

    let status = env.run(&["status", "--json"]);
    assert_eq!(status.status.code(), Some(0));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["running"], true);
    assert_eq!(status["answers"], true);
    assert_eq!(status["pid"], record["pid"]);

    assert_eq!(env.run(&["stop"]).status.code(), Some(0));
    assert!(!record_path.exists());
    assert_eq!(env.run(&["status"]).status.code(), Some(3));
    let stop_again = env.run(&["stop"]);
    assert_eq!(stop_again.status.code(), Some(0));
    assert!(text(&stop_again.stdout).contains("ahpd is not running"));
    assert!(
        std::fs::read_to_string(env.dir().join("daemon.log"))
            .unwrap()
            .contains("ahpd starting")
    );
}

#[test]
fn start_refuses_stdio_and_reports_an_early_exit() {
    let env = Env::new();
    assert_eq!(env.run(&["start", "--stdio"]).status.code(), Some(2));
    // No plugin enabled: the child exits 2, and start passes that on with the log's tail.
    let out = env.run(&["start", "--port", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no plugin is enabled"));
}

#[test]
fn status_and_stop_see_a_foreground_daemon() {
    let env = Env::new();
    let mut daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "fg.log");
    let record_path = env.dir().join("daemon.json");
    assert_eq!(mode(&record_path), 0o600);

    let status = env.run(&["status", "--json"]);
    assert_eq!(status.status.code(), Some(0), "{}", text(&status.stderr));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["running"], true);
    assert_eq!(status["foreground"], true);
    assert_eq!(status["answers"], true);
    assert_eq!(status["pid"], daemon.child.id());
    assert_eq!(status["address"], daemon.base());
    assert_eq!(status["url"], daemon.address.as_str());
    let said = text(&env.run(&["status"]).stdout);
    assert!(said.contains("running in the foreground"), "{said}");

    // `start` does not start a second daemon beside it.
    let again = env.run(&["start", "--plugin", ECHO, "--port", "0"]);
    assert!(text(&again.stdout).starts_with("ahpd is already running"));

    let stop = env.run(&["stop"]);
    assert_eq!(stop.status.code(), Some(0), "{}", text(&stop.stderr));
    assert_eq!(daemon.child.wait().unwrap().code(), Some(0));
    assert!(!record_path.exists(), "the record goes with the daemon");
    assert_eq!(env.run(&["status"]).status.code(), Some(3));
}
