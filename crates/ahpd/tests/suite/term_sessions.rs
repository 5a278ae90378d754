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
