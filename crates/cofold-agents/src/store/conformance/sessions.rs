//! Conformance checks for sessions, messages and the writer claim (runtime cases 181-188, 198, docs/acceptance.md).

use crate::error::ErrorCode;
use crate::event::RunStatus;
use crate::message::Part;

use super::{AGENT, StoreFixture, expect_code, ids, message, ok, run, session, write_as};
use crate::store::{NewSession, RunRef, SessionQuery};

/// 181: appends need the claim; one holder at a time; order and `limit` of `list_messages`.
pub async fn claim_and_append(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    expect_code(
        store.append_messages("s1", "r1", &[message("m1")]).await,
        ErrorCode::WriterMismatch,
        "append without claim",
    );
    assert!(ok(store.claim_writer("s1", "r1").await, "claim"));
    assert!(
        !ok(store.claim_writer("s1", "r2").await, "second claim"),
        "a second run must not claim a held session"
    );
    assert!(
        ok(store.claim_writer("s1", "r1").await, "re-claim"),
        "the holder's re-claim must succeed"
    );
    let record = ok(store.get_session("s1").await, "get").expect("session exists");
    assert_eq!(record.active_writer_run_id.as_deref(), Some("r1"));
    expect_code(
        store.append_messages("s1", "r2", &[message("m0")]).await,
        ErrorCode::WriterMismatch,
        "append by non-holder",
    );
    ok(
        store
            .append_messages("s1", "r1", &[message("m1"), message("m2")])
            .await,
        "append",
    );
    ok(store.release_writer("s1", "r1").await, "release");
    let record = ok(store.get_session("s1").await, "get").expect("session exists");
    assert_eq!(
        record.active_writer_run_id, None,
        "a release clears the holder"
    );
    assert!(ok(
        store.claim_writer("s1", "r2").await,
        "claim after release"
    ));
    ok(
        store.append_messages("s1", "r2", &[message("m3")]).await,
        "append by new holder",
    );
    assert_eq!(
        ids(&ok(store.list_messages("s1", None).await, "list")),
        ["m1", "m2", "m3"]
    );
    assert_eq!(
        ids(&ok(store.list_messages("s1", Some(2)).await, "list")),
        ["m2", "m3"]
    );
    assert_eq!(
        ids(&ok(store.list_messages("s1", Some(10)).await, "list")),
        ["m1", "m2", "m3"]
    );
}

/// 182: `lastMessageId` follows each append; a run without a record still appends.
pub async fn last_message_id_follows_appends(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    run(store, "s1", "r1", RunStatus::Running).await;
    assert!(ok(store.claim_writer("s1", "r1").await, "claim"));
    ok(
        store
            .append_messages("s1", "r1", &[message("m1"), message("m2")])
            .await,
        "append",
    );
    let record = ok(store.get_run(&RunRef::new("s1", "r1")).await, "get_run").expect("run exists");
    assert_eq!(record.last_message_id.as_deref(), Some("m2"));
    ok(
        store.append_messages("s1", "r1", &[message("m3")]).await,
        "append",
    );
    let record = ok(store.get_run(&RunRef::new("s1", "r1")).await, "get_run").expect("run exists");
    assert_eq!(record.last_message_id.as_deref(), Some("m3"));
    ok(store.release_writer("s1", "r1").await, "release");
    write_as(store, "s1", "ghost", &["m4"]).await;
    assert_eq!(
        ids(&ok(store.list_messages("s1", None).await, "list")),
        ["m1", "m2", "m3", "m4"]
    );
    assert_eq!(
        ok(store.get_run(&RunRef::new("s1", "ghost")).await, "get_run"),
        None
    );
}

/// 183: no workspace key, no messages on records, unknown ids.
pub async fn session_without_workspace(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    write_as(store, "s1", "r1", &["m1"]).await;
    let record = ok(store.get_session("s1").await, "get").expect("session exists");
    let json = serde_json::to_value(&record).expect("a record serializes");
    assert!(json.get("workspace").is_none(), "no workspace key: {json}");
    assert!(
        json.get("messages").is_none(),
        "no messages on the record: {json}"
    );
    assert_eq!(record.agent_id, AGENT);
    assert_eq!(ok(store.get_session("nope").await, "get unknown"), None);
    expect_code(
        store.list_messages("nope", None).await,
        ErrorCode::NotFound,
        "list_messages of unknown",
    );
}

/// 184: the workspace is kept.
pub async fn workspace_is_kept(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", Some("/home/u/proj")).await;
    let record = ok(store.get_session("s1").await, "get").expect("session exists");
    assert_eq!(record.workspace.as_deref(), Some("/home/u/proj"));
    let again = fixture.reopen();
    let record =
        ok(again.get_session("s1").await, "get from another handle").expect("session exists");
    assert_eq!(record.workspace.as_deref(), Some("/home/u/proj"));
}

/// 185: a taken id is refused and nothing changes.
pub async fn session_created_twice(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", Some("/w1")).await;
    let before = ok(store.get_session("s1").await, "get").expect("session exists");
    let second = NewSession {
        session_id: "s1".into(),
        agent_id: "other".into(),
        workspace: Some("/w2".into()),
    };
    expect_code(
        store.create_session(second).await,
        ErrorCode::AlreadyExists,
        "second create",
    );
    let after = ok(store.get_session("s1").await, "get").expect("session exists");
    assert_eq!(before, after);
}

/// 186: filters, order (an append moves a session to the front) and `limit`.
pub async fn list_sessions_filters_and_orders(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "a", Some("/w1")).await;
    session(store, "b", Some("/w1")).await;
    session(store, "c", Some("/w2")).await;
    let other = NewSession {
        session_id: "d".into(),
        agent_id: "agent-b".into(),
        workspace: None,
    };
    ok(store.create_session(other).await, "create d");
    let all = ok(store.list_sessions(SessionQuery::default()).await, "list");
    let names: Vec<&str> = all.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(names, ["d", "c", "b", "a"], "newest first");
    write_as(store, "a", "r1", &["m1"]).await;
    let all = ok(store.list_sessions(SessionQuery::default()).await, "list");
    assert_eq!(
        all[0].session_id, "a",
        "an append moves a session to the front"
    );
    let query = SessionQuery {
        workspace: Some("/w1".into()),
        ..SessionQuery::default()
    };
    let w1: Vec<String> = ok(store.list_sessions(query).await, "list")
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(w1, ["a", "b"]);
    let query = SessionQuery {
        agent_id: Some("agent-b".into()),
        ..SessionQuery::default()
    };
    let b: Vec<String> = ok(store.list_sessions(query).await, "list")
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(b, ["d"]);
    let query = SessionQuery {
        limit: Some(2),
        ..SessionQuery::default()
    };
    let limited: Vec<String> = ok(store.list_sessions(query).await, "list")
        .into_iter()
        .map(|s| s.session_id)
        .collect();
    assert_eq!(limited, ["a", "d"]);
    let json = serde_json::to_value(&all[0]).expect("a record serializes");
    assert!(json.get("messages").is_none());
}

/// 187: delete removes everything; refused while a running run holds the claim.
pub async fn delete_session_rules(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    session(store, "s2", None).await;
    write_as(store, "s2", "r9", &["x"]).await;
    run(store, "s1", "r1", RunStatus::Running).await;
    assert!(ok(store.claim_writer("s1", "r1").await, "claim"));
    expect_code(
        store.delete_session("s1").await,
        ErrorCode::WriterBusy,
        "delete while running",
    );
    let mut update = crate::store::RunUpdate::new(RunRef::new("s1", "r1"));
    update.status = Some(RunStatus::Awaiting);
    ok(store.update_run(update).await, "pause");
    ok(
        store.delete_session("s1").await,
        "delete with a paused holder",
    );
    assert_eq!(ok(store.get_session("s1").await, "get"), None);
    assert_eq!(
        ok(store.get_run(&RunRef::new("s1", "r1")).await, "get_run"),
        None
    );
    expect_code(
        store.delete_session("s1").await,
        ErrorCode::NotFound,
        "second delete",
    );
    expect_code(
        store.list_messages("s1", None).await,
        ErrorCode::NotFound,
        "list after delete",
    );
    assert_eq!(
        ids(&ok(store.list_messages("s2", None).await, "other session")),
        ["x"]
    );
}

/// 188: heartbeat needs the claim and never moves `updatedAt`.
pub async fn heartbeat_rules(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    expect_code(
        store.heartbeat("s1", "r1").await,
        ErrorCode::WriterMismatch,
        "before a claim",
    );
    assert!(ok(store.claim_writer("s1", "r1").await, "claim"));
    let before = ok(store.get_session("s1").await, "get")
        .expect("session exists")
        .updated_at;
    ok(store.heartbeat("s1", "r1").await, "heartbeat");
    let after = ok(store.get_session("s1").await, "get")
        .expect("session exists")
        .updated_at;
    assert_eq!(before, after, "a heartbeat leaves updatedAt");
    expect_code(
        store.heartbeat("s1", "r2").await,
        ErrorCode::WriterMismatch,
        "another run",
    );
    ok(store.release_writer("s1", "r1").await, "release");
    expect_code(
        store.heartbeat("s1", "r1").await,
        ErrorCode::WriterMismatch,
        "after release",
    );
    expect_code(
        store.heartbeat("nope", "r1").await,
        ErrorCode::NotFound,
        "unknown session",
    );
}

/// 198: reads hand back copies.
pub async fn reads_are_copies(fixture: &StoreFixture) {
    let store = fixture.store();
    session(store, "s1", None).await;
    run(store, "s1", "r1", RunStatus::Running).await;
    write_as(store, "s1", "r1", &["m1"]).await;
    let run_ref = RunRef::new("s1", "r1");
    ok(
        store.append_event(&super::event(&run_ref, 1)).await,
        "append_event",
    );
    let mut record = ok(store.get_session("s1").await, "get").expect("session exists");
    record.agent_id = "changed".into();
    let mut messages = ok(store.list_messages("s1", None).await, "list");
    messages[0].parts.push(Part::text("changed"));
    messages.push(message("m2"));
    let mut events = ok(store.list_events(&run_ref, None).await, "events");
    events[0].agent_id = "changed".into();
    assert_eq!(
        ok(store.get_session("s1").await, "get")
            .expect("session exists")
            .agent_id,
        AGENT
    );
    let stored = ok(store.list_messages("s1", None).await, "list");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].parts.len(), 1);
    assert_eq!(
        ok(store.list_events(&run_ref, None).await, "events")[0].agent_id,
        AGENT
    );
}
