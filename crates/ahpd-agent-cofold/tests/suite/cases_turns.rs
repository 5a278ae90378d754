//! Engine cases of "Turns and mapping" and the part ids of "Sessions, store, transcript" (see
//! `docs/acceptance.md`), through a host, the official client and the scripted endpoint.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::state::{ResponsePart, Turn};
use ahpd_sdk::Agent;
use serde_json::{Value, json};
use testkit::{Frame, Reply, chunk};

use super::support::*;

/// A host serving the agent over `options` and a watched session in the place's workspace.
async fn watched(
    place: &Place,
    options: Value,
) -> (Arc<ahpd_agent_cofold::CofoldAgent>, TestHost, Watch) {
    let agent = Arc::new(agent(options, place.embedder()));
    let th = host(vec![agent.clone()]).await;
    let w = Watch::create(
        &th,
        "cofold",
        &fresh_id("turns"),
        Some(&place.work),
        json!({}),
    )
    .await;
    (agent, th, w)
}

fn stream(frames: Vec<Value>) -> Reply {
    Reply::stream(frames.into_iter().map(Frame::Chunk).collect::<Vec<_>>())
}

/// `(kind, id, content)` of each part of a turn.
fn shapes(parts: &[ResponsePart]) -> Vec<(String, String, String)> {
    parts
        .iter()
        .map(|p| match p {
            ResponsePart::Markdown(m) => ("markdown".into(), m.id.clone(), m.content.clone()),
            ResponsePart::Reasoning(r) => ("reasoning".into(), r.id.clone(), r.content.clone()),
            ResponsePart::ToolCall(tc) => {
                let v = serde_json::to_value(&tc.tool_call).unwrap();
                (
                    "toolCall".into(),
                    v["toolCallId"].as_str().unwrap().into(),
                    String::new(),
                )
            }
            other => {
                let v = serde_json::to_value(other).unwrap();
                (
                    v["kind"].as_str().unwrap_or("?").into(),
                    String::new(),
                    String::new(),
                )
            }
        })
        .collect()
}

async fn read_back(agent: &ahpd_agent_cofold::CofoldAgent, w: &Watch) -> Vec<Turn> {
    let id = w.session.strip_prefix("cofold:/").unwrap();
    agent.transcript(id).await.expect("a transcript")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_055_reasoning_streams_with_part_ids() {
    let place = Place::new();
    std::fs::write(place.work.join("a.txt"), "hello\n").unwrap();
    let ep = endpoint(vec![
        stream(vec![
            chunk::role(),
            chunk::reasoning("THINK-1"),
            chunk::tool_call(0, Some("c1"), Some("read_file"), r#"{"path":"a.txt"}"#),
            chunk::finish("tool_calls"),
        ]),
        stream(vec![
            chunk::role(),
            chunk::reasoning("THINK-2"),
            chunk::text("REPLY"),
            chunk::finish("stop"),
        ]),
    ]);
    let (agent, th, mut w) = watched(
        &place,
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
    )
    .await;
    w.send("t1", "think").await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    w.assert_mirror(&th).await;
    let live = shapes(&w.chat_state().turns[0].response_parts);
    let expected: Vec<(String, String, String)> = [
        ("reasoning", "t1:1:0", "THINK-1"),
        ("toolCall", "c1", ""),
        ("reasoning", "t1:2:0", "THINK-2"),
        ("markdown", "t1:2:1", "REPLY"),
    ]
    .iter()
    .map(|(a, b, c)| ((*a).into(), (*b).into(), (*c).into()))
    .collect();
    assert_eq!(live, expected);
    // Read back, the parts keep the ids clients saw (one mapping for live and stored turns).
    assert_eq!(
        shapes(&read_back(&agent, &w).await[0].response_parts),
        expected
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_056_a_whitespace_only_text_part_makes_no_part() {
    let place = Place::new();
    std::fs::write(place.work.join("a.txt"), "hello\n").unwrap();
    let ep = endpoint(vec![
        stream(vec![
            chunk::role(),
            chunk::reasoning("weighing"),
            chunk::text("  \n"),
            chunk::tool_call(0, Some("c1"), Some("read_file"), r#"{"path":"a.txt"}"#),
            chunk::finish("tool_calls"),
        ]),
        text("done"),
    ]);
    let (agent, th, mut w) = watched(
        &place,
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
    )
    .await;
    w.send("t1", "go").await;
    w.end("t1").await;
    w.assert_mirror(&th).await;
    let kinds = |parts: &[ResponsePart]| -> Vec<String> {
        shapes(parts).into_iter().map(|(k, _, _)| k).collect()
    };
    let live = &w.chat_state().turns[0].response_parts;
    assert_eq!(kinds(live), ["reasoning", "toolCall", "markdown"]);
    let stored = read_back(&agent, &w).await;
    assert_eq!(shapes(&stored[0].response_parts), shapes(live));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_072_a_plain_reply_is_said_by_the_engine_after_the_hosts_start() {
    let place = Place::new();
    let ep = endpoint(vec![text("hello there")]);
    let (_agent, th, mut w) = watched(
        &place,
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
    )
    .await;
    w.send("t1", "hi").await;
    w.end("t1").await;
    w.assert_mirror(&th).await;
    let chat: Vec<&ahp_types::actions::ActionEnvelope> =
        w.envelopes.iter().filter(|e| e.channel == w.chat).collect();
    let started: Vec<_> = chat
        .iter()
        .filter(|e| matches!(e.action, StateAction::ChatTurnStarted(_)))
        .collect();
    assert_eq!(started.len(), 1, "only the client's turnStarted");
    assert!(
        started[0].origin.is_some(),
        "the turn was started by a client"
    );
    let order: Vec<&str> = chat
        .iter()
        .filter_map(|e| match &e.action {
            StateAction::ChatTurnStarted(_) => Some("started"),
            StateAction::ChatResponsePart(_) => Some("part"),
            StateAction::ChatDelta(_) => Some("delta"),
            StateAction::ChatTurnComplete(_) => Some("complete"),
            _ => None,
        })
        .collect();
    assert_eq!(order.first(), Some(&"started"));
    assert_eq!(order.last(), Some(&"complete"));
    let part = order.iter().position(|k| *k == "part").unwrap();
    let delta = order.iter().position(|k| *k == "delta").unwrap();
    assert!(part < delta);
    let turn = &w.chat_state().turns[0];
    assert_eq!(shapes(&turn.response_parts)[0].2, "hello there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_073_usage_names_the_chosen_model_else_the_configured_one() {
    let place = Place::new();
    let ep = endpoint(vec![text("a"), text("b")]);
    let (_agent, th, mut w) = watched(
        &place,
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "open_router/y" }),
    )
    .await;
    w.send("t1", "hi").await;
    w.end("t1").await;
    let mut chosen = message("again");
    chosen.model = Some(ahp_types::state::ModelSelection {
        id: "open_router/x".into(),
        config: None,
    });
    w.send_message("t2", chosen).await;
    w.end("t2").await;
    w.assert_mirror(&th).await;
    let turns = &w.chat_state().turns;
    let model = |t: &Turn| t.usage.as_ref().and_then(|u| u.model.clone());
    assert_eq!(model(&turns[0]).as_deref(), Some("open_router/y"));
    assert_eq!(model(&turns[1]).as_deref(), Some("open_router/x"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_074_a_delta_has_exactly_four_keys() {
    let place = Place::new();
    let ep = endpoint(vec![text("one two three")]);
    let (_agent, _th, mut w) = watched(
        &place,
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
    )
    .await;
    w.send("t1", "hi").await;
    w.end("t1").await;
    let deltas: Vec<Value> = w
        .chat_actions()
        .into_iter()
        .filter(|a| matches!(a, StateAction::ChatDelta(_)))
        .map(|a| serde_json::to_value(a).unwrap())
        .collect();
    assert!(!deltas.is_empty());
    for d in deltas {
        let mut keys: Vec<&String> = d.as_object().unwrap().keys().collect();
        keys.sort();
        assert_eq!(keys, ["content", "partId", "turnId", "type"], "{d}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_075_reasoning_and_text_go_to_their_own_actions() {
    let place = Place::new();
    let ep = endpoint(vec![stream(vec![
        chunk::role(),
        chunk::reasoning("weighing "),
        chunk::reasoning("it "),
        chunk::reasoning("up"),
        chunk::text("the answer"),
        chunk::finish("stop"),
    ])]);
    let (_agent, th, mut w) = watched(
        &place,
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
    )
    .await;
    w.send("t1", "think").await;
    w.end("t1").await;
    w.assert_mirror(&th).await;
    let actions = w.chat_actions();
    let reasoning: String = actions
        .iter()
        .filter_map(|a| match a {
            StateAction::ChatReasoning(r) => Some(r.content.clone()),
            _ => None,
        })
        .collect();
    let text: String = actions
        .iter()
        .filter_map(|a| match a {
            StateAction::ChatDelta(d) => Some(d.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(reasoning, "weighing it up");
    assert_eq!(text, "the answer");
    let announced: Vec<&ResponsePart> = actions
        .iter()
        .filter_map(|a| match a {
            StateAction::ChatResponsePart(p) if matches!(p.part, ResponsePart::Reasoning(_)) => {
                Some(&p.part)
            }
            _ => None,
        })
        .collect();
    assert_eq!(announced.len(), 1, "one reasoning part announced");
    assert!(matches!(announced[0], ResponsePart::Reasoning(r) if r.content.is_empty()));
    let parts = shapes(&w.chat_state().turns[0].response_parts);
    let contents: Vec<&str> = parts.iter().map(|(_, _, c)| c.as_str()).collect();
    assert_eq!(contents, ["weighing it up", "the answer"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_076_leading_whitespace_joins_the_first_delta() {
    let place = Place::new();
    let ep = endpoint(vec![stream(vec![
        chunk::role(),
        chunk::text(" "),
        chunk::text("\n"),
        chunk::text("REPLY"),
        chunk::finish("stop"),
    ])]);
    let (agent, th, mut w) = watched(
        &place,
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
    )
    .await;
    w.send("t1", "hi").await;
    w.end("t1").await;
    w.assert_mirror(&th).await;
    let deltas: Vec<String> = w
        .chat_actions()
        .iter()
        .filter_map(|a| match a {
            StateAction::ChatDelta(d) => Some(d.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(deltas, [" \nREPLY"]);
    let live = shapes(&w.chat_state().turns[0].response_parts);
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].0, "markdown");
    assert_eq!(shapes(&read_back(&agent, &w).await[0].response_parts), live);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_077_a_reply_that_is_not_streamed_is_shown_before_the_end() {
    let place = Place::new();
    let ep = endpoint(vec![Reply::json(chunk::completion(
        json!({ "role": "assistant", "content": "not streamed", "reasoning_content": "thought it" }),
        "stop",
    ))]);
    let (_agent, th, mut w) = watched(
        &place,
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
    )
    .await;
    w.send("t1", "hi").await;
    w.end("t1").await;
    w.assert_mirror(&th).await;
    let actions = w.chat_actions();
    let end = actions
        .iter()
        .position(|a| matches!(a, StateAction::ChatTurnComplete(_)))
        .unwrap();
    let delta = actions
        .iter()
        .position(|a| matches!(a, StateAction::ChatDelta(d) if d.content == "not streamed"))
        .expect("the text as a delta");
    let reasoning = actions
        .iter()
        .position(|a| matches!(a, StateAction::ChatReasoning(r) if r.content == "thought it"))
        .expect("the reasoning");
    assert!(reasoning < delta && delta < end);
    let kinds: Vec<String> = shapes(&w.chat_state().turns[0].response_parts)
        .into_iter()
        .map(|(k, _, _)| k)
        .collect();
    assert_eq!(kinds, ["reasoning", "markdown"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_079_a_queued_message_is_sent_after_the_turn_completes() {
    let place = Place::new();
    let gate = testkit::Gate::new();
    let ep = endpoint(vec![
        text("first answer").held(&gate),
        text("second answer"),
    ]);
    let (_agent, th, mut w) = watched(
        &place,
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
    )
    .await;
    w.send("t1", "first question").await;
    gate.reached().await;
    let queued: StateAction = serde_json::from_value(json!({
        "type": "chat/pendingMessageSet", "kind": "queued", "id": "q1",
        "message": { "text": "second question", "origin": { "kind": "user" } }
    }))
    .unwrap();
    w.client.dispatch(w.chat.clone(), queued).await.unwrap();
    w.until(|a| matches!(a, StateAction::ChatPendingMessageSet(_)))
        .await;
    assert_eq!(ep.chat_requests().len(), 1, "held behind the running turn");
    gate.open();
    w.end("t1").await;
    // The queued message becomes a turn only after t1's end, and a turn is sent only once
    // it has begun.
    let started = w
        .until(|a| matches!(a, StateAction::ChatTurnStarted(s) if s.queued_message_id.is_some()))
        .await;
    let StateAction::ChatTurnStarted(s) = started.action else {
        unreachable!()
    };
    w.end(&s.turn_id).await;
    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 2);
    assert!(request_text(&bodies[1]).contains("first question"));
    assert!(request_text(&bodies[1]).contains("second question"));
    w.assert_mirror(&th).await;
}
