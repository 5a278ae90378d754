//! Approvals that show what they will do (issue 37): the tool's own preview as the question's
//! `edits`, the policy's reason as its risk assessment, a denial's typed reason reaching the
//! model, and a call's input changed before it is approved. Through the official client, with
//! the scripted endpoint and real files.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{
    FileEdit, ToolCallPendingConfirmationState, ToolCallRiskAssessment, ToolCallState, ToolInput,
};
use ahpd_sdk::util::{data_uri_bytes, file_uri};
use cofold_agents::policy::{Rule, RuleSet, rules};
use serde_json::{Value, json};

use super::support::*;

fn action(v: Value) -> StateAction {
    serde_json::from_value(v).expect("an action")
}

fn approve(turn: &str, call: &str) -> StateAction {
    action(
        json!({ "type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call,
        "approved": true, "selectedOptionId": "allow-once" }),
    )
}

fn approve_edited(turn: &str, call: &str, edited: &str) -> StateAction {
    action(
        json!({ "type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call,
        "approved": true, "selectedOptionId": "allow-once", "editedToolInput": edited }),
    )
}

fn deny_saying(turn: &str, call: &str, why: &str) -> StateAction {
    action(
        json!({ "type": "chat/toolCallConfirmed", "turnId": turn, "toolCallId": call,
        "approved": false, "reason": "denied", "reasonMessage": why }),
    )
}

/// A session under `default` in the place's workspace, over these options.
async fn session(
    place: &Place,
    options: Value,
    embedder: ahpd_agent_cofold::Embedder,
) -> (TestHost, Watch) {
    let th = host(vec![Arc::new(agent(options, embedder))]).await;
    let w = Watch::create(
        &th,
        "cofold",
        &fresh_id("preview"),
        Some(&place.work),
        json!({ "permissionMode": "default" }),
    )
    .await;
    (th, w)
}

fn options(ep: &testkit::Endpoint) -> Value {
    json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" })
}

/// Waits for the call waiting on a person and gives its pending state as the client mirrors it.
async fn pending(w: &mut Watch) -> ToolCallPendingConfirmationState {
    w.until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    match w.last_calls().last() {
        Some(ToolCallState::PendingConfirmation(p)) => p.clone(),
        other => panic!("expected a call waiting on a person, got {other:?}"),
    }
}

/// The bytes of one side of a previewed edit.
fn side(edit: &FileEdit, after: bool) -> Option<Vec<u8>> {
    let side = if after { &edit.after } else { &edit.before };
    side.as_ref()
        .map(|s| data_uri_bytes(&s.content.uri).expect("the side's content is a data: URI"))
}

fn text_of(m: &StringOrMarkdown) -> String {
    match m {
        StringOrMarkdown::Plain(t) => t.clone(),
        StringOrMarkdown::Markdown { markdown, .. } => markdown.clone(),
    }
}

/// The last call of the chat, once it is done.
fn finished(w: &Watch) -> ToolCallState {
    w.last_calls().last().cloned().expect("a call")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_waiting_for_approval_shows_the_file_before_and_after_the_call_byte_for_byte() {
    let place = Place::new();
    // CRLF line breaks and a byte that is not UTF-8: the preview keeps both, as the call does.
    let original = b"one\r\ntwo\r\nthree \xff\r\n".to_vec();
    std::fs::write(place.work.join("a.txt"), &original).unwrap();
    let ep = endpoint(vec![
        call("c0", "read_file", json!({ "path": "a.txt" })),
        call(
            "c1",
            "edit_file",
            json!({ "path": "a.txt", "old": "two\nthree", "new": "2\n3" }),
        ),
        text("edited"),
    ]);
    let (th, mut w) = session(&place, options(&ep), place.embedder()).await;
    w.send("t1", "edit it").await;
    let p = pending(&mut w).await;
    assert_eq!(
        p.confirmation_title,
        Some(StringOrMarkdown::Plain("Edit a.txt?".into()))
    );
    assert_eq!(p.editable, Some(true));
    let edits = p.edits.expect("the question carries the edit");
    assert_eq!(edits.items.len(), 1);
    let edit = &edits.items[0];
    let uri = file_uri(&place.work.join("a.txt"));
    assert_eq!(
        edit.before.as_ref().map(|s| s.uri.clone()),
        Some(uri.clone())
    );
    assert_eq!(edit.after.as_ref().map(|s| s.uri.clone()), Some(uri));
    assert_eq!(side(edit, false), Some(original.clone()));
    let after = side(edit, true).expect("an after");
    let stats = edit.diff.clone().expect("diff stats");
    assert_eq!((stats.added, stats.removed), (Some(2), Some(2)));
    assert_eq!(
        std::fs::read(place.work.join("a.txt")).unwrap(),
        original,
        "nothing changed before the answer"
    );
    w.client
        .dispatch(w.chat.clone(), approve("t1", "c1"))
        .await
        .unwrap();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(
        std::fs::read(place.work.join("a.txt")).unwrap(),
        after,
        "the file after the call is the preview's after, byte for byte"
    );
    assert_eq!(after, b"one\r\n2\r\n3 \xff\r\n".to_vec());
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_creates_a_file_previews_a_creation() {
    let place = Place::new();
    let ep = endpoint(vec![
        call(
            "c1",
            "write_file",
            json!({ "path": "new/notes.md", "content": "# notes\nfirst\n" }),
        ),
        text("written"),
    ]);
    let (th, mut w) = session(&place, options(&ep), place.embedder()).await;
    w.send("t1", "write it").await;
    let p = pending(&mut w).await;
    assert_eq!(
        p.confirmation_title,
        Some(StringOrMarkdown::Plain("Write new/notes.md?".into()))
    );
    let edits = p.edits.expect("the question carries the creation");
    let edit = &edits.items[0];
    assert!(edit.before.is_none(), "a creation has no before");
    assert_eq!(side(edit, true), Some(b"# notes\nfirst\n".to_vec()));
    assert_eq!(
        edit.after.as_ref().map(|s| s.uri.clone()),
        Some(file_uri(&place.work.join("new/notes.md")))
    );
    assert!(
        !place.work.join("new").exists(),
        "the preview made no folder"
    );
    w.client
        .dispatch(w.chat.clone(), approve("t1", "c1"))
        .await
        .unwrap();
    w.end("t1").await;
    assert_eq!(
        std::fs::read(place.work.join("new/notes.md")).unwrap(),
        side(edit, true).unwrap()
    );
    w.assert_mirror(&th).await;
}

/// The turns a second host on the same store shows a new client, as JSON.
async fn read_back(options: &Value, place: &Place, session: &str) -> Vec<Value> {
    let th = host(vec![Arc::new(agent(options.clone(), place.embedder()))]).await;
    let w = Watch::subscribe(client(&th.url, "after-restart").await, session).await;
    let turns = w
        .chat_state()
        .turns
        .iter()
        .map(|t| serde_json::to_value(t).expect("json"))
        .collect();
    th.host.shutdown();
    turns
}

fn live_turns(w: &Watch) -> Vec<Value> {
    w.chat_state()
        .turns
        .iter()
        .map(|t| serde_json::to_value(t).expect("json"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_whose_old_text_is_not_unique_says_so_and_fails_the_same_way_when_approved() {
    let place = Place::new();
    std::fs::write(place.work.join("a.txt"), "x and x\n").unwrap();
    let ep = endpoint(vec![
        call("c0", "read_file", json!({ "path": "a.txt" })),
        call(
            "c1",
            "edit_file",
            json!({ "path": "a.txt", "old": "x", "new": "y" }),
        ),
        text("it failed"),
    ]);
    let store = place.home.join("store");
    let options =
        json!({ "store": store.display().to_string(), "baseUrl": ep.base_url(), "model": "m" });
    let (th, mut w) = session(&place, options.clone(), place.embedder()).await;
    w.send("t1", "edit it").await;
    let p = pending(&mut w).await;
    let refusal =
        "old text occurs 2 times in a.txt; add context to make it unique, or pass all: true";
    assert!(p.edits.is_none(), "no guessed edit: {:?}", p.edits);
    let note = p.meta.clone().unwrap_or_default();
    assert_eq!(
        note.get("ahpd.preview"),
        Some(&json!({ "status": "wouldFail", "message": refusal }))
    );
    assert_eq!(
        text_of(&p.invocation_message),
        format!("a.txt — this call would fail: {refusal}")
    );
    w.client
        .dispatch(w.chat.clone(), approve("t1", "c1"))
        .await
        .unwrap();
    w.end("t1").await;
    match finished(&w) {
        ToolCallState::Completed(c) => {
            assert!(!c.success);
            assert_eq!(c.error, Some(json!({ "message": refusal })));
        }
        other => panic!("expected a failed call, got {other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(place.work.join("a.txt")).unwrap(),
        "x and x\n"
    );
    assert!(request_text(&ep.chat_bodies()[2]).contains(refusal));
    w.assert_mirror(&th).await;
    let live = live_turns(&w);
    th.host.shutdown();
    assert_eq!(
        read_back(&options, &place, &w.session).await,
        live,
        "the turn reads back as it was seen live"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_that_cannot_be_made_says_why() {
    let place = Place::new();
    let binary = b"\x00\x01binary".to_vec();
    std::fs::write(place.work.join("blob.bin"), &binary).unwrap();
    let ep = endpoint(vec![
        call("c0", "read_file", json!({ "path": "blob.bin" })),
        call(
            "c1",
            "write_file",
            json!({ "path": "blob.bin", "content": "text now" }),
        ),
        text("replaced"),
    ]);
    let (_th, mut w) = session(&place, options(&ep), place.embedder()).await;
    w.send("t1", "replace it").await;
    let p = pending(&mut w).await;
    assert!(p.edits.is_none());
    let note = p.meta.clone().unwrap_or_default();
    assert_eq!(
        note.get("ahpd.preview"),
        Some(
            &json!({ "status": "unavailable", "message": "blob.bin is binary, so there is no preview" })
        )
    );
    // Not previewed is not refused: the call still does what it says.
    w.client
        .dispatch(w.chat.clone(), approve("t1", "c1"))
        .await
        .unwrap();
    w.end("t1").await;
    assert_eq!(
        std::fs::read(place.work.join("blob.bin")).unwrap(),
        b"text now"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_carry_their_input_a_reason_to_ask_and_no_edits() {
    let place = Place::new();
    let outside = place.home.join("elsewhere.txt");
    let ep = endpoint(vec![
        call("c1", "shell_exec", json!({ "command": "rm -rf build" })),
        text("no"),
        call(
            "c2",
            "write_file",
            json!({ "path": outside.display().to_string(), "content": "x" }),
        ),
        text("no"),
    ]);
    let (th, mut w) = session(&place, options(&ep), place.embedder()).await;
    w.send("t1", "clean").await;
    let p = pending(&mut w).await;
    assert!(p.edits.is_none());
    assert_eq!(p.tool_input, Some(ToolInput::Inline("rm -rf build".into())));
    match &p.risk_assessment {
        Some(ToolCallRiskAssessment::Complete(r)) => assert_eq!(
            text_of(&r.reason),
            "The command matches a destructive pattern: rm -r removes whole folders."
        ),
        other => panic!("expected the policy's reason, got {other:?}"),
    }
    w.client
        .dispatch(w.chat.clone(), deny_saying("t1", "c1", "not now"))
        .await
        .unwrap();
    w.end("t1").await;

    w.send("t2", "write outside").await;
    let p = pending(&mut w).await;
    match &p.risk_assessment {
        Some(ToolCallRiskAssessment::Complete(r)) => assert_eq!(
            text_of(&r.reason),
            format!("It writes outside the workspace, to {}.", outside.display())
        ),
        other => panic!("expected the policy's reason, got {other:?}"),
    }
    w.client
        .dispatch(w.chat.clone(), deny_saying("t2", "c2", "no"))
        .await
        .unwrap();
    w.end("t2").await;
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reason_typed_with_a_denial_reaches_the_model_and_the_transcript() {
    let place = Place::new();
    let store = place.home.join("store");
    let ep = endpoint(vec![
        call(
            "c1",
            "write_file",
            json!({ "path": "a.txt", "content": "v" }),
        ),
        text("understood"),
    ]);
    let options =
        json!({ "store": store.display().to_string(), "baseUrl": ep.base_url(), "model": "m" });
    let (th, mut w) = session(&place, options.clone(), place.embedder()).await;
    let id = w.session.trim_start_matches("cofold:/").to_owned();
    w.send("t1", "write it").await;
    pending(&mut w).await;
    w.client
        .dispatch(
            w.chat.clone(),
            deny_saying("t1", "c1", "put it in notes.md instead"),
        )
        .await
        .unwrap();
    w.end("t1").await;
    assert!(!place.work.join("a.txt").exists());
    let bodies = ep.chat_bodies();
    assert!(
        request_text(&bodies[1]).contains("Denied by the person: put it in notes.md instead"),
        "{}",
        request_text(&bodies[1])
    );
    let cancelled = |call: &ToolCallState| match call {
        ToolCallState::Cancelled(c) => c.reason_message.clone().map(|m| text_of(&m)),
        other => panic!("expected a cancelled call, got {other:?}"),
    };
    assert_eq!(
        cancelled(&finished(&w)).as_deref(),
        Some("put it in notes.md instead")
    );
    w.assert_mirror(&th).await;
    th.host.shutdown();

    // Read back after a restart, the transcript still says why.
    let again = Arc::new(agent(options, place.embedder()));
    let th = host(vec![again]).await;
    let w = Watch::subscribe(client(&th.url, "after").await, &format!("cofold:/{id}")).await;
    assert_eq!(
        cancelled(&finished(&w)).as_deref(),
        Some("put it in notes.md instead")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_command_runs_as_edited_and_the_transcript_shows_it() {
    let place = Place::new();
    let ep = endpoint(vec![
        call(
            "c1",
            "shell_exec",
            json!({ "command": "echo first > out.txt" }),
        ),
        text("ran"),
    ]);
    let (th, mut w) = session(&place, options(&ep), place.embedder()).await;
    w.send("t1", "run it").await;
    pending(&mut w).await;
    w.client
        .dispatch(
            w.chat.clone(),
            approve_edited("t1", "c1", "echo second > out.txt"),
        )
        .await
        .unwrap();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert_eq!(
        std::fs::read_to_string(place.work.join("out.txt")).unwrap(),
        "second\n"
    );
    match finished(&w) {
        ToolCallState::Completed(c) => {
            assert!(c.success, "{c:?}");
            assert_eq!(
                c.tool_input,
                Some(ToolInput::Inline("echo second > out.txt".into()))
            );
        }
        other => panic!("expected a completed call, got {other:?}"),
    }
    let told = request_text(&ep.chat_bodies()[1]);
    assert!(
        told.contains("The person changed this call's input before approving it")
            && told.contains("echo second > out.txt"),
        "{told}"
    );
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_input_is_checked_against_the_schema_and_judged_again_by_the_policy() {
    let place = Place::new();
    std::fs::write(place.work.join("keep.txt"), "kept").unwrap();
    let ep = endpoint(vec![
        call("c1", "shell_exec", json!({ "command": "echo hi" })),
        text("refused"),
        call(
            "c2",
            "write_file",
            json!({ "path": "a.txt", "content": "v" }),
        ),
        text("refused too"),
    ]);
    let mut embedder = place.embedder();
    embedder.policy = Some(rules(RuleSet {
        deny: vec![Rule::matching("shell_exec", "rm *")],
        ask: vec![Rule::tool("*")],
        ..RuleSet::default()
    }));
    let (th, mut w) = session(&place, options(&ep), embedder).await;
    w.send("t1", "say hi").await;
    pending(&mut w).await;
    // The person approves a command the policy refuses: the approval does not stand.
    w.client
        .dispatch(w.chat.clone(), approve_edited("t1", "c1", "rm keep.txt"))
        .await
        .unwrap();
    w.end("t1").await;
    assert!(
        place.work.join("keep.txt").exists(),
        "the refused command did not run"
    );
    let refusal = "Denied by rule: shell_exec(rm *) (the input as the person edited it)";
    match finished(&w) {
        ToolCallState::Completed(c) => {
            assert!(!c.success);
            assert_eq!(c.error, Some(json!({ "message": refusal })));
        }
        other => panic!("expected a refused call, got {other:?}"),
    }
    assert!(request_text(&ep.chat_bodies()[1]).contains(refusal));

    // An edit the tool's schema refuses runs nothing, and the call says why.
    w.send("t2", "write").await;
    pending(&mut w).await;
    w.client
        .dispatch(
            w.chat.clone(),
            approve_edited("t2", "c2", r#"{"path": 3, "content": "v"}"#),
        )
        .await
        .unwrap();
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    assert!(!place.work.join("a.txt").exists());
    match finished(&w) {
        ToolCallState::Completed(c) => {
            assert!(!c.success);
            let error = c.error.clone().unwrap_or_default().to_string();
            assert!(
                error.contains("The edited input was refused, so nothing ran: Invalid arguments"),
                "{error}"
            );
        }
        other => panic!("expected a refused call, got {other:?}"),
    }
    w.assert_mirror(&th).await;
}
