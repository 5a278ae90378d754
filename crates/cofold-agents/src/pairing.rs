//! Every tool call followed by its result: the shape every OpenAI-compatible server insists on.
//!
//! A server answers HTTP 400 to a conversation in which an assistant message's tool calls are not
//! followed, before any other message, by one tool message per call. A run that ended abruptly (the
//! daemon killed during a command, a panic, a failed write) can leave such a conversation in the
//! store. Settling the dead run answers its open calls in the store; [`pair_tool_results`] is the
//! last guard, applied to every conversation a model request is built from, so that even a
//! transcript damaged in a way nobody settled never reaches a model malformed.

use std::collections::{HashMap, HashSet};

use crate::message::{Message, MessageSource, Part, Role, ToolCall, ToolResult, tool_calls_of};

/// The result a request carries for a call the store holds no result for.
pub const MISSING_RESULT_TEXT: &str = "not run: the run stopped before this call finished";

/// The result stored for an open call of a dead run that never started executing.
pub const NOT_RUN_TEXT: &str = "not run: the daemon stopped before this call finished";

/// The result stored for the call a dead run was executing.
pub const OUTCOME_UNKNOWN_TEXT: &str = "outcome unknown: the daemon stopped while this call ran";

/// An error result for `call` with `text`, as a `role: tool` message.
pub fn missing_result(call: &ToolCall, text: &str) -> Message {
    Message::new(
        Role::Tool,
        MessageSource::Tool,
        vec![Part::ToolResult(ToolResult {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            content: text.to_owned(),
            is_error: true,
        })],
    )
}

/// True when every tool call of `messages` is followed at once by its results, in call order,
/// and every tool result answers the call just before it.
pub fn is_well_paired(messages: &[Message]) -> bool {
    pair_tool_results(messages) == messages
}

/// The conversation with each assistant tool call followed, in call order and before any other
/// message, by exactly one result: the first one stored for it (wherever it lies later), or an
/// error result saying it never finished. Results that answer no earlier call, and second
/// results for a call, are left out. A well-paired conversation comes back unchanged.
pub fn pair_tool_results(messages: &[Message]) -> Vec<Message> {
    // Every result part by call id (the first one wins), with the message it came from.
    let mut results: HashMap<&str, (usize, &ToolResult)> = HashMap::new();
    for (at, message) in messages.iter().enumerate() {
        for part in &message.parts {
            if let Part::ToolResult(result) = part {
                results
                    .entry(result.call_id.as_str())
                    .or_insert((at, result));
            }
        }
    }
    let mut used: HashSet<&str> = HashSet::new();
    let mut out = Vec::with_capacity(messages.len());
    let mut at = 0;
    while at < messages.len() {
        let message = &messages[at];
        at += 1;
        if message.role == Role::Tool || only_results(message) {
            // A result is placed right after its call; here it answers nothing before it.
            continue;
        }
        out.push(message.clone());
        let calls = if message.role == Role::Assistant {
            tool_calls_of(message)
        } else {
            Vec::new()
        };
        if calls.is_empty() {
            continue;
        }
        // The results that directly follow, kept whole when they answer these calls in order.
        let run_end = messages[at..]
            .iter()
            .position(|m| m.role != Role::Tool)
            .map_or(messages.len(), |n| at + n);
        let stored_in_place = messages[at..run_end].len() == calls.len()
            && messages[at..run_end]
                .iter()
                .zip(&calls)
                .all(|(m, call)| answers_only(m, call));
        for (n, call) in calls.iter().enumerate() {
            let id = call.call_id.as_str();
            if !used.insert(id) {
                // A call id repeated by a later assistant message: it gets an answer of its own.
                out.push(missing_result(call, MISSING_RESULT_TEXT));
                continue;
            }
            if stored_in_place {
                out.push(messages[at + n].clone());
                continue;
            }
            match results.get(id) {
                Some((from, result)) if *from >= at => {
                    let mut answer = messages[*from].clone();
                    answer.parts = vec![Part::ToolResult((*result).clone())];
                    answer.role = Role::Tool;
                    out.push(answer);
                }
                _ => out.push(missing_result(call, MISSING_RESULT_TEXT)),
            }
        }
        if stored_in_place {
            at = run_end;
        }
    }
    out
}

/// True for a message made only of tool results (whatever its role says).
fn only_results(message: &Message) -> bool {
    !message.parts.is_empty()
        && message
            .parts
            .iter()
            .all(|p| matches!(p, Part::ToolResult(_)))
}

/// True for a tool message holding exactly the one result of `call`.
fn answers_only(message: &Message, call: &ToolCall) -> bool {
    message.role == Role::Tool
        && matches!(message.parts.as_slice(), [Part::ToolResult(r)] if r.call_id == call.call_id)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn call(id: &str, call_ids: &[&str]) -> Message {
        let parts = call_ids
            .iter()
            .map(|c| {
                Part::ToolCall(ToolCall {
                    call_id: (*c).into(),
                    name: "echo".into(),
                    input: None,
                    raw: "{}".into(),
                })
            })
            .collect();
        Message::new(Role::Assistant, MessageSource::Model, parts).with_id(id)
    }

    fn result(id: &str, call_id: &str, text: &str) -> Message {
        Message::new(
            Role::Tool,
            MessageSource::Tool,
            vec![Part::ToolResult(ToolResult {
                call_id: call_id.into(),
                name: "echo".into(),
                content: text.into(),
                is_error: false,
            })],
        )
        .with_id(id)
    }

    fn user(id: &str) -> Message {
        Message::user_text("hi").with_id(id)
    }

    fn shape(messages: &[Message]) -> Vec<String> {
        messages
            .iter()
            .map(|m| match m.parts.first() {
                Some(Part::ToolResult(r)) => format!("{}={}", r.call_id, r.content),
                Some(Part::ToolCall(_)) => format!("call:{}", m.id),
                _ => m.id.clone(),
            })
            .collect()
    }

    #[test]
    fn a_well_paired_conversation_is_unchanged() {
        let messages = vec![
            user("u"),
            call("a", &["1", "2"]),
            result("r1", "1", "x"),
            result("r2", "2", "y"),
            user("v"),
        ];
        assert_eq!(pair_tool_results(&messages), messages);
        assert!(is_well_paired(&messages));
    }

    #[test]
    fn a_dangling_call_gets_a_result_right_after_it() {
        let messages = vec![
            user("u"),
            call("a", &["1", "2"]),
            result("r1", "1", "x"),
            user("v"),
        ];
        let repaired = pair_tool_results(&messages);
        assert_eq!(
            shape(&repaired),
            [
                "u",
                "call:a",
                "1=x",
                &format!("2={MISSING_RESULT_TEXT}"),
                "v"
            ]
        );
        assert!(is_well_paired(&repaired));
        assert!(!is_well_paired(&messages));
    }

    #[test]
    fn late_and_out_of_order_results_move_to_their_call_and_orphans_go() {
        let messages = vec![
            result("orphan", "0", "lost"),
            call("a", &["1", "2"]),
            result("r2", "2", "y"),
            user("v"),
            result("r1", "1", "x"),
            result("again", "1", "twice"),
        ];
        let repaired = pair_tool_results(&messages);
        assert_eq!(shape(&repaired), ["call:a", "1=x", "2=y", "v"]);
    }
}
