//! Live equals stored: turns of every kind, mirrored live by the official client, are read back
//! after a restart (a new host and agent on the same store, a new client) and compared whole,
//! as JSON values.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::state::SessionInputRequest;
use serde_json::{Value, json};
use testkit::{Frame, Gate, Reply, chunk};

use super::support::*;

fn action(v: Value) -> StateAction {
    serde_json::from_value(v).expect("an action")
}

/// Waits for the session's open request and gives its entry (a confirmation or a question).
async fn input_needed(w: &mut Watch) -> SessionInputRequest {
    let set = w
        .until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    match set.action {
        StateAction::SessionInputNeededSet(a) => a.request,
        _ => unreachable!(),
    }
}

async fn complete(w: &mut Watch, turn: &str) {
    let end = w.end(turn).await;
    assert!(
        matches!(end, StateAction::ChatTurnComplete(_)),
        "{turn}: {end:?}"
    );
}

/// The turns a second host, started on the same store, shows a new client, as JSON.
async fn read_back(options: &Value, place: &Place, id: &str) -> Vec<Value> {
    let again = Arc::new(agent(options.clone(), place.embedder()));
    let th = host(vec![again]).await;
    let client = client(&th.url, "after-restart").await;
    let w = Watch::subscribe(client, &format!("cofold:/{id}")).await;
    let turns = w
        .chat_state()
        .turns
        .iter()
        .map(|t| serde_json::to_value(t).expect("json"))
        .collect();
    th.host.shutdown();
    turns
}

/// Compares each live turn with its read-back twin, naming the first that differs.
fn assert_same(live: &[Value], stored: &[Value], kinds: &[&str]) {
    let ids = |turns: &[Value]| -> Vec<String> {
        turns
            .iter()
            .map(|t| format!("{}:{}", t["id"], t["message"]["text"]))
            .collect()
    };
    assert_eq!(live.len(), kinds.len(), "live turns {:?}", ids(live));
    assert_eq!(
        stored.len(),
        live.len(),
        "read-back turns {:?}",
        ids(stored)
    );
    for ((l, s), kind) in live.iter().zip(stored).zip(kinds) {
        assert_eq!(
            l, s,
            "the {kind} turn reads back as it was seen live:\n live   {l}\n stored {s}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_turn_reads_back_as_it_was_seen_live() {
    let place = Place::new();
    std::fs::write(place.work.join("a.txt"), "hello world\n").unwrap();
    let store = place.home.join("store");
    let gate = Gate::new();
    let steer_gate = Gate::new();
    let ask = json!({ "questions": [{ "id": "which", "question": "Which note?",
        "options": [{ "label": "monday" }, { "label": "tuesday" }] }] });
    let ep = endpoint(vec![
        // text
        text("hello there"),
        // reasoning, a call, reasoning and an answer
        Reply::stream(vec![
            Frame::Chunk(chunk::role()),
            Frame::Chunk(chunk::reasoning("THINK-")),
            Frame::Chunk(chunk::reasoning("1")),
            Frame::Chunk(chunk::tool_call(
                0,
                Some("c1"),
                Some("read_file"),
                &json!({ "path": "a.txt" }).to_string(),
            )),
            Frame::Chunk(chunk::finish("tool_calls")),
            Frame::Chunk(chunk::usage(10, 5)),
        ]),
        Reply::stream(vec![
            Frame::Chunk(chunk::role()),
            Frame::Chunk(chunk::reasoning("THINK-2")),
            Frame::Chunk(chunk::text(" ")),
            Frame::Chunk(chunk::text("REPLY")),
            Frame::Chunk(chunk::finish("stop")),
            Frame::Chunk(chunk::usage(20, 6)),
        ]),
        // approved
        call(
            "c2",
            "write_file",
            json!({ "path": "b.txt", "content": "new" }),
        ),
        text("written"),
        // denied
        call(
            "c3",
            "write_file",
            json!({ "path": "c.txt", "content": "no" }),
        ),
        text("fine"),
        // failed
        call("c4", "read_file", json!({ "path": "missing.txt" })),
        text("it is not there"),
        // a question
        call("c5", "ask_user", ask),
        text("noted"),
        // steering
        call("c6", "read_file", json!({ "path": "a.txt" })).held(&steer_gate),
        text("corrected"),
        // cancelled
        Reply::stream(vec![
            Frame::Chunk(chunk::role()),
            Frame::Chunk(chunk::text("partial")),
            Frame::Gate(gate.clone()),
            Frame::Chunk(chunk::text(" never")),
            Frame::Chunk(chunk::finish("stop")),
        ]),
        text("after the stop"),
        // Nothing more: the last turn meets the endpoint's 500 and fails.
    ]);
    let options =
        json!({ "store": store.display().to_string(), "baseUrl": ep.base_url(), "model": "m" });
    let id = fresh_id("readback");
    let live: Vec<Value> = {
        let first = Arc::new(agent(options.clone(), place.embedder()));
        let th = host(vec![first]).await;
        let mut w = Watch::create(
            &th,
            "cofold",
            &id,
            Some(&place.work),
            json!({ "permissionMode": "default" }),
        )
        .await;
        w.send("t1", "say hello").await;
        complete(&mut w, "t1").await;
        w.send("t2", "think, read, think").await;
        complete(&mut w, "t2").await;

        w.send("t3", "write b").await;
        input_needed(&mut w).await;
        w.client
            .dispatch(
                w.chat.clone(),
                action(json!({ "type": "chat/toolCallConfirmed", "turnId": "t3",
                    "toolCallId": "c2", "approved": true, "selectedOptionId": "allow-once",
                    "confirmed": "user-action" })),
            )
            .await
            .unwrap();
        complete(&mut w, "t3").await;

        w.send("t4", "write c").await;
        input_needed(&mut w).await;
        w.client
            .dispatch(
                w.chat.clone(),
                action(json!({ "type": "chat/toolCallConfirmed", "turnId": "t4",
                    "toolCallId": "c3", "approved": false, "reason": "denied" })),
            )
            .await
            .unwrap();
        complete(&mut w, "t4").await;

        w.send("t5", "read the missing file").await;
        complete(&mut w, "t5").await;

        w.send("t6", "ask me").await;
        let SessionInputRequest::ChatInput(question) = input_needed(&mut w).await else {
            panic!("expected a question");
        };
        w.client
            .dispatch(
                w.chat.clone(),
                action(json!({ "type": "chat/inputCompleted",
                    "requestId": question.request.id, "response": "accept",
                    "answers": { "which": { "state": "submitted",
                        "value": { "kind": "selected", "value": "monday" } } } })),
            )
            .await
            .unwrap();
        complete(&mut w, "t6").await;

        w.send("t7", "read a.txt").await;
        steer_gate.reached().await;
        w.client
            .dispatch(
                w.chat.clone(),
                action(
                    json!({ "type": "chat/pendingMessageSet", "kind": "steering",
                    "id": "s1", "message": { "text": "use the second line instead",
                    "origin": { "kind": "user" } } }),
                ),
            )
            .await
            .unwrap();
        w.until(|a| matches!(a, StateAction::ChatPendingMessageSet(_)))
            .await;
        steer_gate.open();
        complete(&mut w, "t7").await;

        w.send("t8", "talk").await;
        w.until(|a| matches!(a, StateAction::ChatDelta(d) if d.turn_id == "t8"))
            .await;
        w.client
            .dispatch(
                w.chat.clone(),
                action(json!({ "type": "chat/turnCancelled", "turnId": "t8", "duration": 1234 })),
            )
            .await
            .unwrap();
        assert!(matches!(
            w.end("t8").await,
            StateAction::ChatTurnCancelled(_)
        ));
        ep.wait_for_closed_connections(1).await;
        gate.open();
        // The next turn runs only once the stopped run has ended.
        w.send("t9", "and now").await;
        complete(&mut w, "t9").await;

        w.send("t10", "fail please").await;
        assert!(matches!(w.end("t10").await, StateAction::ChatError(_)));
        w.assert_mirror(&th).await;
        let turns = w.chat_state().turns.clone();
        th.host.shutdown();
        turns
            .iter()
            .map(|t| serde_json::to_value(t).expect("json"))
            .collect()
    };
    let mut live = live;
    // A failed turn can be resumed only by the process it failed in; read back it is not
    // offered again (case 126), which is the one difference.
    let error = live[9]["responseParts"]
        .as_array_mut()
        .and_then(|parts| parts.last_mut())
        .expect("the error part");
    assert_eq!(error["kind"], "error");
    assert_eq!(error["resumable"], true, "live, the failure is resumable");
    error.as_object_mut().unwrap().remove("resumable");

    let stored = read_back(&options, &place, &id).await;
    assert_same(
        &live,
        &stored,
        &[
            "text",
            "reasoning",
            "approved",
            "denied",
            "failed call",
            "question",
            "steering",
            "cancelled",
            "after a stop",
            "error",
        ],
    );
    // The comparison is of turns that hold what each kind shows.
    let kinds: Vec<&str> = stored[1]["responseParts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["reasoning", "toolCall", "reasoning", "markdown"]);
    assert_eq!(
        stored[2]["responseParts"][0]["toolCall"]["selectedOption"]["id"],
        "allow-once"
    );
    assert_eq!(
        stored[3]["responseParts"][0]["toolCall"]["status"],
        "cancelled"
    );
    assert_eq!(stored[4]["responseParts"][0]["toolCall"]["success"], false);
    assert_eq!(stored[7]["state"], "cancelled");
    assert_eq!(stored[7]["duration"], 1234);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_turn_reads_back_as_it_was_seen_live() {
    let place = Place::new();
    let store = place.home.join("store");
    // A listed window of 10000 tokens puts the compaction point at 8000.
    let ep = testkit::Endpoint::builder()
        .models_body(json!({ "object": "list", "data": [{ "id": "m", "context_length": 10000 }] }))
        .replies(vec![
            text("first answer"),
            Reply::completion_text("SUMMARY-OF-IT-ALL"),
            text("second answer"),
        ])
        .start()
        .unwrap();
    let options =
        json!({ "store": store.display().to_string(), "baseUrl": ep.base_url(), "model": "m" });
    let id = fresh_id("readback-compact");
    let live: Vec<Value> = {
        let first = Arc::new(agent(options.clone(), place.embedder()));
        ahpd_sdk::Agent::probe(first.as_ref()).await;
        let th = host(vec![first]).await;
        let mut w = Watch::create(&th, "cofold", &id, Some(&place.work), json!({})).await;
        w.send("t1", &"a".repeat(20000)).await;
        complete(&mut w, "t1").await;
        w.send("t2", &"b".repeat(32004)).await;
        complete(&mut w, "t2").await;
        w.assert_mirror(&th).await;
        let turns = w.chat_state().turns.clone();
        th.host.shutdown();
        turns
            .iter()
            .map(|t| serde_json::to_value(t).expect("json"))
            .collect()
    };
    assert_eq!(ep.chat_bodies().len(), 3, "the summary was asked for");
    let stored = read_back(&options, &place, &id).await;
    assert_same(&live, &stored, &["short", "compacted"]);
    let notice = stored[1]["responseParts"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["kind"] == "systemNotification");
    assert!(notice, "the compaction notice is read back: {}", stored[1]);
}
