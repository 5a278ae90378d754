//! Rewinding a conversation, and listing and reading it back from the store (engine cases (docs/acceptance.md)
//! 44, 52, 62, 65, 66).

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahpd_sdk::Agent;
use serde_json::json;

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_065_a_truncated_chat_is_cut_in_the_store_and_goes_on() {
    let place = Place::new();
    let ep = endpoint(vec![
        text("one"),
        text("two"),
        text("three"),
        text("after the cut"),
    ]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent.clone()]).await;
    let id = fresh_id("cut");
    let mut w = Watch::create(&th, "cofold", &id, Some(&place.work), json!({})).await;
    for (turn, text) in [("t1", "first"), ("t2", "second"), ("t3", "third")] {
        w.send(turn, text).await;
        assert!(matches!(
            w.end(turn).await,
            StateAction::ChatTurnComplete(_)
        ));
    }
    let row = agent.find(&id).await.expect("listed");
    assert_eq!(row.title, "first");
    assert_eq!(agent.transcript(&id).await.unwrap().len(), 3);
    let cut: StateAction =
        serde_json::from_value(json!({ "type": "chat/truncated", "turnId": "t2" })).unwrap();
    w.client.dispatch(w.chat.clone(), cut).await.unwrap();
    w.until(|a| matches!(a, StateAction::ChatTruncated(_)))
        .await;
    w.send("t4", "fourth").await;
    assert!(matches!(
        w.end("t4").await,
        StateAction::ChatTurnComplete(_)
    ));
    let last = ep.chat_bodies().last().cloned().unwrap();
    let text = request_text(&last);
    assert!(text.contains("second") && !text.contains("third"), "{text}");
    let turns = agent.transcript(&id).await.unwrap();
    let ids: Vec<&str> = turns.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["t1", "t2", "t4"]);
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_sessions_stream_every_delta_in_order() {
    let place = Place::new();
    let answers: Vec<String> = (0..20)
        .map(|i| (0..200).map(|j| format!("s{i}w{j} ")).collect())
        .collect();
    // Each session's first request names its session; the endpoint answers with that one's text.
    let texts = answers.clone();
    let ep = testkit::Endpoint::builder()
        .respond_with(move |req: &testkit::RecordedRequest| {
            let body = req.json["messages"].to_string();
            let i = (0..20)
                .find(|i| body.contains(&format!("session number {i}.")))
                .unwrap_or(0);
            let mut frames = vec![testkit::Frame::Chunk(testkit::chunk::role())];
            for piece in texts[i].split_inclusive(' ') {
                frames.push(testkit::Frame::Chunk(testkit::chunk::text(piece)));
            }
            frames.push(testkit::Frame::Chunk(testkit::chunk::finish("stop")));
            testkit::Reply::stream(frames)
        })
        .start()
        .unwrap();
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent]).await;
    let mut watches = Vec::new();
    for i in 0..20 {
        let w = Watch::create(
            &th,
            "cofold",
            &fresh_id("many"),
            Some(&place.work),
            json!({}),
        )
        .await;
        watches.push((i, w));
    }
    for (i, w) in &mut watches {
        w.send("t1", &format!("session number {i}.")).await;
    }
    for (i, w) in &mut watches {
        assert!(matches!(
            w.end("t1").await,
            StateAction::ChatTurnComplete(_)
        ));
        let deltas: String = w
            .chat_actions()
            .iter()
            .filter_map(|a| match a {
                StateAction::ChatDelta(d) => Some(d.content.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, answers[*i], "session {i}");
        let parts = w
            .chat_actions()
            .iter()
            .filter(|a| matches!(a, StateAction::ChatResponsePart(_)))
            .count();
        assert_eq!(parts, 1);
        w.assert_mirror(&th).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_057_060_062_after_a_restart_the_session_is_listed_read_back_and_continues() {
    let place = Place::new();
    std::fs::write(place.work.join("a.txt"), "hello world").unwrap();
    let store = place.home.join("store");
    let ep = endpoint(vec![
        call("c1", "read_file", serde_json::json!({ "path": "a.txt" })),
        text("it says hello"),
        text("still here"),
    ]);
    let options =
        json!({ "store": store.display().to_string(), "baseUrl": ep.base_url(), "model": "m" });
    let id = fresh_id("restart");
    {
        let first = Arc::new(agent(options.clone(), place.embedder()));
        let th = host(vec![first]).await;
        let mut w = Watch::create(&th, "cofold", &id, Some(&place.work), json!({})).await;
        w.send("t1", "what does a.txt say").await;
        assert!(matches!(
            w.end("t1").await,
            StateAction::ChatTurnComplete(_)
        ));
        w.assert_mirror(&th).await;
        th.host.shutdown();
    }
    let second = Arc::new(agent(options, place.embedder()));
    let rows = second.list().await;
    let row = rows
        .iter()
        .find(|r| r.id == id)
        .expect("listed after the restart");
    assert_eq!(row.title, "what does a.txt say");
    assert_eq!(
        row.working_directories,
        [ahpd_sdk::util::file_uri(&place.work)]
    );
    let turns = second.transcript(&id).await.unwrap();
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].id, "t1");
    // Item 57: the call read back completed, with its times from the stored events.
    let call = turns[0]
        .response_parts
        .iter()
        .find_map(|p| match p {
            ahp_types::state::ResponsePart::ToolCall(tc) => Some(tc.tool_call.clone()),
            _ => None,
        })
        .expect("the call is read back");
    match call {
        ahp_types::state::ToolCallState::Completed(c) => {
            assert!(c.success);
            let meta = c.meta.unwrap_or_default();
            for key in ["ahpd.startedAt", "ahpd.endedAt", "ahpd.durationMs"] {
                assert!(meta.contains_key(key), "{key} in {meta:?}");
            }
        }
        other => panic!("expected a completed call, got {other:?}"),
    }
    let th = host(vec![second.clone()]).await;
    let client = client(&th.url, "later").await;
    let w = Watch::subscribe(client, &format!("cofold:/{id}")).await;
    let mut w = w;
    assert_eq!(w.chat_state().turns.len(), 1);
    w.send("t2", "and now").await;
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    let last = ep.chat_bodies().last().cloned().unwrap();
    assert!(request_text(&last).contains("what does a.txt say"));
    assert!(request_text(&last).contains("it says hello"));
    w.assert_mirror(&th).await;
    assert_eq!(second.transcript(&id).await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_064_a_chat_forked_through_the_host_copies_the_conversation_through_its_turn() {
    // Item 64: `createChat` with a fork source at `t2`.
    let place = Place::new();
    let store = place.home.join("store");
    let ep = endpoint(vec![
        text("answer one"),
        text("answer two"),
        text("answer three"),
        text("answer in the fork"),
    ]);
    let agent = Arc::new(agent(
        json!({ "store": store.display().to_string(), "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent.clone()]).await;
    let id = fresh_id("fork");
    let mut w = Watch::create(&th, "cofold", &id, Some(&place.work), json!({})).await;
    for (turn, text) in [
        ("t1", "question one"),
        ("t2", "question two"),
        ("t3", "question three"),
    ] {
        w.send(turn, text).await;
        assert!(matches!(
            w.end(turn).await,
            StateAction::ChatTurnComplete(_)
        ));
    }
    let fork_chat = w.fork("t2").await;
    w.client
        .dispatch(
            fork_chat.clone(),
            turn_started_with("f1", message("question in the fork")),
        )
        .await
        .expect("dispatch");
    let end = w
        .until(|a| {
            matches!(a, StateAction::ChatTurnComplete(c) if c.turn_id == "f1")
                || matches!(a, StateAction::ChatError(e) if e.turn_id == "f1")
        })
        .await;
    assert!(
        matches!(end.action, StateAction::ChatTurnComplete(_)),
        "{end:?}"
    );
    assert_eq!(end.channel, fork_chat);

    // The fork's request holds the first two questions and answers, not the third.
    let last = request_text(ep.chat_bodies().last().unwrap());
    for said in [
        "question one",
        "answer one",
        "question two",
        "answer two",
        "question in the fork",
    ] {
        assert!(last.contains(said), "{said} in {last}");
    }
    assert!(!last.contains("question three") && !last.contains("answer three"));

    // A new conversation with two copied runs and the fork's own; the original untouched.
    let stored =
        cofold_store_file::FileStore::open(store, cofold_store_file::FileStoreOptions::default())
            .unwrap();
    use cofold_agents::store::Store;
    let rows = agent.list().await;
    assert_eq!(rows.len(), 2);
    let fork_id = rows
        .iter()
        .map(|r| r.id.clone())
        .find(|r| r != &id)
        .unwrap();
    let runs = stored.list_runs(&fork_id, None).await.unwrap();
    assert_eq!(runs.len(), 3);
    let copied: Vec<_> = runs
        .iter()
        .filter(|r| r.input_message_id.as_deref() != Some("f1"))
        .collect();
    assert_eq!(copied.len(), 2);
    for run in copied {
        assert_eq!(run.status, cofold_agents::store::RunStatus::Completed);
        assert!(run.input_message_id.is_some() && run.last_message_id.is_some());
    }
    let original: Vec<String> = agent
        .transcript(&id)
        .await
        .unwrap()
        .iter()
        .map(|t| t.id.clone())
        .collect();
    assert_eq!(original, ["t1", "t2", "t3"]);
    let forked: Vec<String> = agent
        .transcript(&fork_id)
        .await
        .unwrap()
        .iter()
        .map(|t| t.id.clone())
        .collect();
    assert_eq!(forked, ["t1", "t2", "f1"]);
    w.assert_mirror(&th).await;
}
