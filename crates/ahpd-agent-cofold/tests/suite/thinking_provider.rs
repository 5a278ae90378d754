//! A thinking-mode provider through the whole system: the scripted endpoint answers like
//! DeepSeek's thinking mode (reasoning in `reasoning_content`, and HTTP 400 for a tool-loop
//! request whose assistant messages leave their `reasoning_content` out), and a turn of three
//! tool calls runs to its answer through the host and the official client.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::state::{ResponsePart, ToolCallState};
use serde_json::{Value, json};
use testkit::{Endpoint, Reply, chunk};

use super::support::*;

/// One streamed thinking step: reasoning first, then a tool call or the answer.
fn step(reasoning: &str, call: Option<(&str, &str, Value)>, answer: &str) -> Reply {
    let mut chunks = vec![chunk::role(), chunk::reasoning_content(reasoning)];
    match call {
        Some((id, name, input)) => {
            chunks.push(chunk::tool_call(
                0,
                Some(id),
                Some(name),
                &input.to_string(),
            ));
            chunks.push(chunk::finish("tool_calls"));
        }
        None => {
            chunks.push(chunk::text(answer));
            chunks.push(chunk::finish("stop"));
        }
    }
    chunks.push(chunk::usage(20, 5));
    Reply::stream(chunks)
}

/// The assistant messages of a request's tool loop (after the person's last message).
fn tool_loop(body: &Value) -> Vec<Value> {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let start = messages
        .iter()
        .rposition(|m| m["role"] == "user")
        .map_or(0, |i| i + 1);
    messages[start..]
        .iter()
        .filter(|m| m["role"] == "assistant")
        .cloned()
        .collect()
}

/// Answers as DeepSeek's thinking mode does, step by step from the tool loop's length.
fn thinking_endpoint() -> Endpoint {
    Endpoint::builder()
        .respond_with(|request| {
            let turn = tool_loop(&request.json);
            if let Some(i) = turn
                .iter()
                .position(|m| m.get("reasoning_content").is_none())
            {
                return Reply::api_error(
                    400,
                    &format!(
                        "Missing `reasoning_content` field in the assistant message at message \
                         index {i}"
                    ),
                );
            }
            match turn.len() {
                0 => step(
                    "List the folder first.",
                    Some(("call_0", "list_files", json!({ "pattern": "*" }))),
                    "",
                ),
                1 => step(
                    "Read the note.",
                    Some(("call_1", "read_file", json!({ "path": "note.txt" }))),
                    "",
                ),
                2 => step(
                    "Find where it is said.",
                    Some(("call_2", "search_files", json!({ "pattern": "tea" }))),
                    "",
                ),
                _ => step("All three agree.", None, "The note asks for tea."),
            }
        })
        .start()
        .expect("endpoint starts")
}

/// A host whose agent asks `deepseek-reasoner` on `ep`, watched through a new session (id starting
/// `prefix`) in `place`'s work folder, approving every call.
async fn watch_reasoner(place: &Place, ep: &Endpoint, prefix: &str) -> (TestHost, Watch) {
    let agent = agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "deepseek-reasoner" }),
        place.embedder(),
    );
    let th = host(vec![Arc::new(agent)]).await;
    let w = Watch::create(
        &th,
        "cofold",
        &fresh_id(prefix),
        Some(&place.work),
        json!({ "permissionMode": "auto" }),
    )
    .await;
    (th, w)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thinking_provider_runs_a_three_tool_turn_to_its_answer() {
    let place = Place::new();
    std::fs::write(place.work.join("note.txt"), "please bring tea\n").unwrap();
    let ep = thinking_endpoint();
    let (th, mut w) = watch_reasoner(&place, &ep, "thinking").await;
    w.send("t1", "What does the note ask for?").await;
    let end = w.end("t1").await;
    assert!(matches!(end, StateAction::ChatTurnComplete(_)), "{end:?}");

    let bodies = ep.chat_bodies();
    assert_eq!(bodies.len(), 4, "one request per step, none refused");
    let echoed: Vec<Vec<Value>> = bodies
        .iter()
        .map(|b| {
            tool_loop(b)
                .iter()
                .map(|m| m["reasoning_content"].clone())
                .collect()
        })
        .collect();
    assert_eq!(
        echoed,
        [
            vec![],
            vec![json!("List the folder first.")],
            vec![json!("List the folder first."), json!("Read the note.")],
            vec![
                json!("List the folder first."),
                json!("Read the note."),
                json!("Find where it is said.")
            ],
        ]
    );

    w.assert_mirror(&th).await;
    let calls: Vec<bool> = w
        .last_calls()
        .iter()
        .map(|c| match c {
            ToolCallState::Completed(c) => c.success,
            other => panic!("not completed: {other:?}"),
        })
        .collect();
    assert_eq!(calls, [true, true, true]);
    let turn = w.chat_state().turns.last().unwrap().clone();
    let answer: String = turn
        .response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Markdown(m) => Some(m.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(answer, "The note asks for tea.");
    assert!(
        turn.response_parts
            .iter()
            .any(|p| matches!(p, ResponsePart::Reasoning(_))),
        "the reasoning is shown"
    );
    assert!(request_text(&bodies[2]).contains("please bring tea"));
}

/// A provider whose every stream stops before its finish reason: the turn fails with a sentence
/// naming the cause, the thinking shown once, and no answer stored for the next turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thinking_provider_that_always_stops_short_fails_the_turn_naming_the_cause() {
    let place = Place::new();
    let ep = Endpoint::builder()
        .respond_with(|_| {
            Reply::stream_exact([
                chunk::role(),
                chunk::reasoning_content("Thinking about it"),
                chunk::text("The answer is"),
            ])
        })
        .start()
        .expect("endpoint starts");
    let (th, mut w) = watch_reasoner(&place, &ep, "cut").await;
    w.send("t1", "What is the answer?").await;
    match w.end("t1").await {
        StateAction::ChatError(e) => assert!(
            e.part
                .error
                .message
                .contains("with no finish reason: it was cut short"),
            "{}",
            e.part.error.message
        ),
        other => panic!("expected a failed turn, got {other:?}"),
    }
    assert_eq!(ep.chat_requests().len(), 3, "every attempt was made");
    w.assert_mirror(&th).await;
    let shown: String = w
        .chat_state()
        .turns
        .last()
        .unwrap()
        .response_parts
        .iter()
        .filter_map(|p| match p {
            ResponsePart::Markdown(m) => Some(m.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(shown, "The answer is", "the partial text was shown once");

    // The next turn's request carries no answer from the failed one.
    ep.push_reply(Reply::text_stream("Forty-two."));
    w.send("t2", "Again?").await;
    assert!(matches!(
        w.end("t2").await,
        StateAction::ChatTurnComplete(_)
    ));
    let last = ep.chat_bodies().pop().unwrap();
    let assistants = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count();
    assert_eq!(assistants, 0, "{last}");
}
