//! Faults of the engine found by reading it, each shown fixed (engine cases (docs/acceptance.md) 6, 42, 47, 54
//! and 67, unanswered requests, approvals of one call id in two chats, edited inputs, titles).

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahpd_agent_cofold::options_schema;
use ahpd_sdk::Agent;
use serde_json::{Value, json};

use super::support::*;

fn confirm(turn: &str, call: &str, edited: Option<&str>) -> StateAction {
    let mut v = json!({
        "type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call,
        "approved": true, "selectedOptionId": "allow-once"
    });
    if let Some(edited) = edited {
        v["editedToolInput"] = json!(edited);
    }
    serde_json::from_value(v).unwrap()
}

/// A second chat of the watched session, subscribed on the watch's client.
async fn second_chat(w: &mut Watch) -> String {
    let chat = format!("ahp-chat:/{}", uuid::Uuid::new_v4());
    let _: Value = w
        .client
        .request("createChat", json!({ "channel": w.session, "chat": chat }))
        .await
        .expect("createChat");
    let (res, _sub): (ahp_types::commands::SubscribeResult, _) =
        w.client.subscribe(chat.clone()).await.expect("subscribes");
    w.mirror.apply_snapshot(&res.snapshot.expect("a snapshot"));
    chat
}

fn ended(a: &StateAction, turn: &str) -> bool {
    match a {
        StateAction::ChatTurnComplete(a) => a.turn_id == turn,
        StateAction::ChatError(a) => a.turn_id == turn,
        StateAction::ChatTurnCancelled(a) => a.turn_id == turn,
        _ => false,
    }
}

/// Approves call `c1` of `turn` in `chat` and waits for that turn to complete.
async fn approve_to_completion(w: &mut Watch, chat: &str, turn: &str) {
    w.client
        .dispatch(chat.to_owned(), confirm(turn, "c1", None))
        .await
        .expect("confirm");
    let end = w.until(|a| ended(a, turn)).await;
    assert!(
        matches!(end.action, StateAction::ChatTurnComplete(_)),
        "{end:?}"
    );
}

#[test]
fn case_006_tools_files_no_is_refused_as_true_or_false() {
    // The daemon words a type error at `tools.files` as `must be true or false`; any other
    // keyword there reads `does not fit the schema (…)`.
    let schema = options_schema();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let options = json!({ "tools": { "files": "no" } });
    let first = validator.iter_errors(&options).next().expect("refused");
    assert_eq!(first.instance_path().to_string(), "/tools/files");
    assert!(
        matches!(
            first.kind(),
            jsonschema::error::ValidationErrorKind::Type {
                kind: jsonschema::error::TypeKind::Single(jsonschema::JsonType::Boolean)
            }
        ),
        "{:?}",
        first.kind()
    );
    for good in [
        json!({ "tools": { "files": false } }),
        json!({ "tools": { "files": { "requireRead": true } } }),
        json!({ "strictTools": false, "tools": { "files": true } }),
    ] {
        assert!(validator.is_valid(&good), "{good}");
    }
    assert!(!validator.is_valid(&json!({ "tools": { "files": { "requireRead": "no" } } })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_054_a_created_session_with_nothing_said_is_listed_with_an_empty_transcript() {
    let place = Place::new();
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": "http://127.0.0.1:9/v1", "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent.clone()]).await;
    let id = fresh_id("quiet");
    let _w = Watch::create(&th, "cofold", &id, Some(&place.work), json!({})).await;
    assert_eq!(agent.transcript(&id).await.map(|t| t.len()), Some(0));
    let rows = agent.list().await;
    assert_eq!(
        rows.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        [id.as_str()]
    );
    assert_eq!(
        rows[0].working_directories,
        agent.find(&id).await.expect("found").working_directories
    );
    assert!(agent.transcript("nobody").await.is_none());
    // Removed from the store by someone else: neither a transcript nor a row.
    agent.delete(&id).await.expect("deleted");
    assert!(agent.transcript(&id).await.is_none());
    assert!(agent.list().await.is_empty());
    assert!(agent.find(&id).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_047_chats_of_a_session_without_a_folder_share_its_scratch_folder() {
    let place = Place::new();
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": "http://127.0.0.1:9/v1", "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent.clone()]).await;
    let id = fresh_id("scratch");
    let mut w = Watch::create(&th, "cofold", &id, None, json!({})).await;
    second_chat(&mut w).await;
    let scratch = place.home.join(".copilot/chats").join(&id);
    assert!(scratch.is_dir());
    let rows = agent.list().await;
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in &rows {
        assert_eq!(row.working_directories.len(), 1, "{row:?}");
        assert!(
            row.working_directories[0].ends_with(&format!("/.copilot/chats/{id}")),
            "{row:?}"
        );
    }
    let folders = std::fs::read_dir(place.home.join(".copilot/chats"))
        .unwrap()
        .count();
    assert_eq!(folders, 1, "one folder for the session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_067_a_fork_point_the_store_lacks_fails_the_first_turn() {
    let place = Place::new();
    let ep = endpoint(vec![text("answer one"), text("never asked")]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent.clone()]).await;
    let id = fresh_id("lost");
    let mut w = Watch::create(&th, "cofold", &id, Some(&place.work), json!({})).await;
    w.send("t1", "question one").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    // Someone else removes the conversation: the fork point names a message no longer held.
    agent.delete(&id).await.expect("deleted");
    let fork_chat = w.fork("t1").await;
    w.client
        .dispatch(
            fork_chat.clone(),
            turn_started_with("f1", message("in the fork")),
        )
        .await
        .expect("dispatch");
    let end = w.until(|a| ended(a, "f1")).await;
    match &end.action {
        StateAction::ChatError(e) => {
            assert!(e.part.error.message.starts_with("cofold: "), "{e:?}");
            assert_eq!(e.part.resumable, None, "{e:?}");
        }
        other => panic!("the fork's first turn should fail, got {other:?}"),
    }
    assert_eq!(ep.chat_bodies().len(), 1, "no model call for the fork");
    let rows = agent.list().await;
    assert!(rows.is_empty(), "nothing stored for the fork: {rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_chats_asking_about_calls_of_one_id_are_both_answered() {
    // The host holds one open approval per call id and session: the second chat's request is
    // put to it once the first is answered, instead of taking its place.
    let place = Place::new();
    let ep = endpoint(vec![
        call(
            "c1",
            "write_file",
            json!({ "path": "a.txt", "content": "a" }),
        ),
        call(
            "c1",
            "write_file",
            json!({ "path": "b.txt", "content": "b" }),
        ),
        text("wrote a"),
        text("wrote b"),
    ]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent.clone()]).await;
    let id = fresh_id("twice");
    let mut w = Watch::create(
        &th,
        "cofold",
        &id,
        Some(&place.work),
        json!({ "permissionMode": "default" }),
    )
    .await;
    let other = second_chat(&mut w).await;
    let asked = |a: &StateAction, chat: &str| {
        matches!(a, StateAction::SessionInputNeededSet(s)
            if matches!(&s.request, ahp_types::state::SessionInputRequest::ToolConfirmation(r) if r.chat == chat))
    };
    let first = w.chat.clone();
    w.send("t1", "write a").await;
    w.until(|a| asked(a, &first)).await;
    w.client
        .dispatch(other.clone(), turn_started_with("u1", message("write b")))
        .await
        .expect("dispatch");
    // The second chat's call is under way before the first request is answered.
    w.until(|a| matches!(a, StateAction::ChatToolCallStart(s) if s.turn_id == "u1"))
        .await;
    approve_to_completion(&mut w, &first, "t1").await;
    assert_eq!(
        std::fs::read_to_string(place.work.join("a.txt")).unwrap(),
        "a"
    );
    // Asked once the first was answered, which may be before the first turn's end was read.
    if !w.envelopes.iter().any(|e| asked(&e.action, &other)) {
        w.until(|a| asked(a, &other)).await;
    }
    approve_to_completion(&mut w, &other, "u1").await;
    assert_eq!(
        std::fs::read_to_string(place.work.join("b.txt")).unwrap(),
        "b"
    );
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_input_that_is_not_json_is_refused_and_the_original_never_runs() {
    let place = Place::new();
    let ep = endpoint(vec![
        call(
            "c1",
            "write_file",
            json!({ "path": "a.txt", "content": "original" }),
        ),
        text("understood"),
    ]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent.clone()]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("edited"),
        Some(&place.work),
        json!({ "permissionMode": "default" }),
    )
    .await;
    w.send("t1", "write a").await;
    w.until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    w.client
        .dispatch(w.chat.clone(), confirm("t1", "c1", Some("{ not json")))
        .await
        .expect("confirm");
    let end = w.end("t1").await;
    assert!(matches!(end, StateAction::ChatTurnComplete(_)), "{end:?}");
    assert!(!place.work.join("a.txt").exists(), "the original ran");
    let told = request_text(&ep.chat_bodies()[1]);
    assert!(told.contains("not JSON"), "{told}");
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_042_the_configured_model_keeps_its_declared_levels_when_unlisted() {
    let place = Place::new();
    let ep = testkit::Endpoint::builder()
        .models_body(json!({ "object": "list", "data": [{ "id": "other" }] }))
        .start()
        .expect("endpoint starts");
    let levels_of = |rows: &[ahp_types::state::SessionModelInfo], id: &str| {
        let row = rows.iter().find(|m| m.id == id).expect("the row");
        row.config_schema
            .as_ref()
            .map(|s| serde_json::to_value(s).unwrap()["properties"]["thinkingLevel"].clone())
    };
    let declared = agent(
        json!({
            "baseUrl": ep.base_url(), "model": "cofold/r1", "memory": true,
            "models": { "r1": { "supportsReasoningEffort": ["low", "high", "xhigh"] } }
        }),
        place.embedder(),
    );
    let rows = declared.probe().await.models;
    assert_eq!(rows[0].id, "cofold/r1");
    let level = levels_of(&rows, "cofold/r1").expect("a thinking-level schema");
    assert_eq!(level["enum"], json!(["low", "high"]));
    assert_eq!(level["default"], "low");
    assert!(levels_of(&rows, "cofold/other").is_none());

    let plain = agent(
        json!({ "baseUrl": ep.base_url(), "model": "cofold/r2", "memory": true }),
        place.embedder(),
    );
    let rows = plain.probe().await.models;
    assert!(
        levels_of(&rows, "cofold/r2").is_none(),
        "nothing declared, nothing listed"
    );
}

fn find_file(root: &std::path::Path, name: &str, under: &str) -> Option<std::path::PathBuf> {
    for entry in std::fs::read_dir(root).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find_file(&path, name, under) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name)
            && path.parent().is_some_and(|p| p.ends_with(under))
        {
            return Some(path);
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_reads_a_kept_title_rather_than_the_messages() {
    let place = Place::new();
    let store = place.home.join("store");
    let ep = endpoint(vec![text("noted")]);
    let agent = Arc::new(agent(
        json!({ "store": store.display().to_string(), "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent.clone()]).await;
    let id = fresh_id("titled");
    let mut w = Watch::create(&th, "cofold", &id, Some(&place.work), json!({})).await;
    w.send("t1", "remember the number 41").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(agent.list().await[0].title, "remember the number 41");
    // Empty the messages (the store skips a damaged line, so damage alone would not hide
    // them): a row that read them now could not find its title.
    let messages = find_file(&store, "messages.jsonl", &id).expect("the messages file");
    std::fs::write(&messages, "").unwrap();
    let transcript = agent.transcript(&id).await;
    assert!(
        !format!("{transcript:?}").contains("remember the number 41"),
        "the messages are gone"
    );
    assert_eq!(agent.list().await[0].title, "remember the number 41");
    assert_eq!(
        agent.find(&id).await.expect("found").title,
        "remember the number 41"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_answered_cancel_without_a_stop_ends_the_turn_instead_of_waiting() {
    // The host hands back `cancel` for a question nobody will answer without the turn being
    // stopped; the run is told and the turn goes on to its end.
    let place = Place::new();
    let ep = endpoint(vec![
        call(
            "q1",
            "ask_user",
            json!({ "questions": [{ "id": "a", "question": "Which?" }] }),
        ),
        text("went on without an answer"),
    ]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent.clone()]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("asked"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "ask me").await;
    let asked = w
        .until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    let request_id = match &asked.action {
        StateAction::SessionInputNeededSet(s) => match &s.request {
            ahp_types::state::SessionInputRequest::ChatInput(r) => r.request.id.clone(),
            other => panic!("a question was expected, got {other:?}"),
        },
        _ => unreachable!(),
    };
    let cancel: StateAction = serde_json::from_value(json!({
        "type": "chat/inputCompleted", "requestId": request_id, "response": "cancel"
    }))
    .unwrap();
    w.client
        .dispatch(w.chat.clone(), cancel)
        .await
        .expect("dispatch");
    // Bounded only by the support's patience: a hang fails here.
    let end = w.end("t1").await;
    assert!(matches!(end, StateAction::ChatTurnComplete(_)), "{end:?}");
    let told = request_text(&ep.chat_bodies()[1]);
    assert!(told.contains("No one could answer"), "{told}");
    w.assert_mirror(&th).await;
}
