//! Bad input gets one clear sentence and loses nothing.

use std::fs;

use cofold_agents::error::ErrorCode;
use cofold_agents::store::{RunRef, RunStatus, SessionQuery, Store};

use super::support::{Disk, event, message, run, session};

#[tokio::test]
async fn a_damaged_middle_line_is_skipped_and_the_rest_stays_readable() {
    let disk = Disk::new();
    session(&disk.store, "s1", None).await;
    run(&disk.store, "s1", "r1", RunStatus::Running).await;
    assert!(disk.store.claim_writer("s1", "r1").await.expect("claim"));
    disk.store
        .append_messages("s1", "r1", &[message("m1"), message("m2"), message("m3")])
        .await
        .expect("append");
    let path = disk.session_dir("s1").await.join("messages.jsonl");
    let text = fs::read_to_string(&path).expect("read");
    let mut lines: Vec<&str> = text.lines().collect();
    lines[1] = "{\"id\": this is not JSON}";
    let damaged = format!("{}\n", lines.join("\n"));
    fs::write(&path, &damaged).expect("damage the transcript");
    let ids = |messages: Vec<cofold_agents::message::Message>| -> Vec<String> {
        messages.into_iter().map(|m| m.id).collect()
    };
    let read = disk
        .store
        .list_messages("s1", None)
        .await
        .expect("the rest of a damaged transcript stays readable");
    assert_eq!(ids(read), ["m1", "m3"], "only the damaged line is skipped");
    assert_eq!(
        fs::read_to_string(&path).expect("read"),
        damaged,
        "reading changed nothing"
    );
    disk.store
        .append_messages("s1", "r1", &[message("m4")])
        .await
        .expect("appends go on");
    let after = fs::read_to_string(&path).expect("read");
    assert!(
        after.starts_with(&damaged),
        "the damaged file is kept as it was"
    );
    assert!(
        after[damaged.len()..].contains("\"id\":\"m4\""),
        "the new message follows it"
    );
    let window = disk
        .store
        .list_messages("s1", Some(2))
        .await
        .expect("a window after the damage");
    let window: Vec<String> = window.into_iter().map(|m| m.id).collect();
    assert_eq!(window, ["m3", "m4"]);
    let window = disk
        .store
        .list_messages("s1", Some(10))
        .await
        .expect("a window reaching the damage");
    assert_eq!(ids(window), ["m1", "m3", "m4"]);

    let r1 = RunRef::new("s1", "r1");
    disk.store
        .append_event(&event(&r1, 1))
        .await
        .expect("event");
    disk.store
        .append_event(&event(&r1, 2))
        .await
        .expect("event");
    let events = disk.session_dir("s1").await.join("runs/r1/events.jsonl");
    let text = fs::read_to_string(&events).expect("read");
    fs::write(&events, format!("garbage\n{text}")).expect("damage the log");
    let events = disk
        .reopen()
        .list_events(&r1, None)
        .await
        .expect("a damaged log stays readable");
    assert_eq!(events.len(), 2);
}

#[tokio::test]
async fn unknown_ids_are_named() {
    let disk = Disk::new();
    let err = disk
        .store
        .list_messages("nope", None)
        .await
        .expect_err("unknown session");
    assert_eq!(
        (err.code, err.message.as_str()),
        (ErrorCode::NotFound, "there is no session nope")
    );
    let err = disk
        .store
        .claim_writer("nope", "r1")
        .await
        .expect_err("claim in an unknown session");
    assert_eq!(err.code, ErrorCode::NotFound);
    session(&disk.store, "s1", None).await;
    let err = disk
        .store
        .list_events(&RunRef::new("s1", "r9"), None)
        .await
        .expect_err("unknown run");
    assert_eq!(
        (err.code, err.message.as_str()),
        (ErrorCode::NotFound, "session s1 has no run r9")
    );
    let err = disk
        .store
        .truncate("s1", "m9")
        .await
        .expect_err("unknown message");
    assert_eq!(
        (err.code, err.message.as_str()),
        (ErrorCode::NotFound, "session s1 has no message m9")
    );
}

#[tokio::test]
async fn one_damaged_session_does_not_hide_the_others_from_the_listing() {
    let disk = Disk::new();
    session(&disk.store, "good", None).await;
    session(&disk.store, "bad", None).await;
    let bad = disk.session_dir("bad").await.join("session.json");
    fs::write(&bad, b"{ not json").expect("damage");
    let listed = disk
        .reopen()
        .list_sessions(SessionQuery::default())
        .await
        .expect("list");
    let ids: Vec<&str> = listed.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids, ["good"]);
    let err = disk
        .reopen()
        .get_session("bad")
        .await
        .expect_err("the damaged one, asked for");
    assert!(
        err.message.contains("session.json is not a valid record"),
        "{}",
        err.message
    );
}
