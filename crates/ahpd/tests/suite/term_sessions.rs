//! `ahpd sessions`: list, show and remove what `ahpd run` stored.

use serde_json::Value;
use testkit::{Endpoint, Reply};

use super::support::*;
use super::term_support::*;

fn listed_shown_and_removed(daemon: bool) {
    let env = Env::new();
    let work = work(&env);
    let ep = Endpoint::with_replies(vec![Reply::text_stream("the answer is 42")]).unwrap();
    configure(&env, &ep);
    let _daemon = daemon.then(|| Started::new(&env));
    let out = run(&env, &work, &["what is the answer?"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let uri = session_of(&text(&out.stderr));

    let list = env.run(&["sessions", "--json"]);
    assert_eq!(list.status.code(), Some(0), "{}", text(&list.stderr));
    let rows: Value = serde_json::from_slice(&list.stdout).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["uri"] == uri.as_str())
        .unwrap_or_else(|| panic!("{uri} not in {rows}"));
    assert_eq!(row["workspace"], work.display().to_string());
    assert_eq!(row["model"], "m");
    assert!(row["title"].as_str().unwrap().contains("answer"), "{row}");

    let table = env.run(&["sessions"]);
    let table = text(&table.stdout);
    assert!(table.starts_with("LAST ACTIVITY"), "{table}");
    assert!(table.contains(&uri), "{table}");

    let show = env.run(&["sessions", "show", &uri]);
    assert_eq!(show.status.code(), Some(0), "{}", text(&show.stderr));
    let shown = text(&show.stdout);
    assert!(shown.contains("> what is the answer?"), "{shown}");
    assert!(shown.contains("the answer is 42"), "{shown}");

    let rm = env.run(&["sessions", "rm", &uri]);
    assert_eq!(rm.status.code(), Some(0), "{}", text(&rm.stderr));
    let list = env.run(&["sessions", "--json"]);
    let rows: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert!(
        !rows
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["uri"] == uri.as_str()),
        "{rows}"
    );
    let again = env.run(&["sessions", "rm", &uri]);
    assert_eq!(again.status.code(), Some(2), "{}", text(&again.stderr));
}

#[test]
fn a_run_is_listed_shown_and_removed() {
    listed_shown_and_removed(false);
}

#[test]
fn a_run_is_listed_shown_and_removed_through_the_daemon() {
    listed_shown_and_removed(true);
}

#[test]
fn the_client_uses_the_token_the_daemon_was_given_not_a_leftover_default_file() {
    let env = Env::new();
    let ep = Endpoint::with_replies(Vec::new()).unwrap();
    configure(&env, &ep);
    // A default token file left from an earlier run, and the daemon told to use another.
    std::fs::write(env.dir().join("token"), "leftover-default-token\n").unwrap();
    let keys = env.root.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    std::fs::write(keys.join("tok"), "the-daemons-own-token\n").unwrap();
    let out = env.run(&[
        "start",
        "--port",
        "0",
        "--connection-token-file",
        keys.join("tok").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let list = env.run(&["sessions", "--json"]);
    let stopped = env.run(&["stop"]);
    assert_eq!(list.status.code(), Some(0), "{}", text(&list.stderr));
    assert_eq!(stopped.status.code(), Some(0), "{}", text(&stopped.stderr));
}
