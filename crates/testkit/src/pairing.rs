//! The rule every OpenAI-compatible server applies to a conversation's tool calls: an assistant
//! message with `tool_calls` must be followed, before any other message, by one `tool` message
//! answering each of its call ids. A server answers HTTP 400 to a conversation that breaks it, so
//! a client that sends one has left a session it cannot continue.

use serde_json::Value;

/// The first way the chat request `body` breaks the rule, as a sentence; `None` when every
/// assistant tool call is answered in place (and no tool message answers a call it does not
/// follow).
pub fn tool_pairing_fault(body: &Value) -> Option<String> {
    let messages = body.get("messages").and_then(Value::as_array)?;
    let mut at = 0;
    while at < messages.len() {
        let message = &messages[at];
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        if role == "tool" {
            let id = message.get("tool_call_id").and_then(Value::as_str);
            return Some(format!(
                "message {at}: a tool message ({id:?}) that follows no assistant tool call"
            ));
        }
        at += 1;
        let calls: Vec<&str> = message
            .get("tool_calls")
            .and_then(Value::as_array)
            .map(|calls| {
                calls
                    .iter()
                    .map(|c| c.get("id").and_then(Value::as_str).unwrap_or(""))
                    .collect()
            })
            .unwrap_or_default();
        if role != "assistant" || calls.is_empty() {
            continue;
        }
        let mut open: Vec<&str> = calls;
        while at < messages.len()
            && messages[at].get("role").and_then(Value::as_str) == Some("tool")
        {
            let id = messages[at]
                .get("tool_call_id")
                .and_then(Value::as_str)
                .unwrap_or("");
            let Some(found) = open.iter().position(|c| *c == id) else {
                return Some(format!(
                    "message {at}: tool message {id:?} answers no open call of the assistant \
                     message before it"
                ));
            };
            open.remove(found);
            at += 1;
        }
        if let Some(missing) = open.first() {
            return Some(format!(
                "An assistant message with 'tool_calls' must be followed by tool messages \
                 responding to each 'tool_call_id'. The following tool_call_ids did not have \
                 response messages: {missing}"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> Value {
        json!({ "role": "assistant", "tool_calls": [
            { "id": id, "type": "function", "function": { "name": "f", "arguments": "{}" } }
        ] })
    }

    fn result(id: &str) -> Value {
        json!({ "role": "tool", "tool_call_id": id, "content": "ok" })
    }

    #[test]
    fn answered_calls_pass_and_every_break_is_named() {
        let user = json!({ "role": "user", "content": "hi" });
        let ok = json!({ "messages": [user, call("a"), result("a"), user] });
        assert_eq!(tool_pairing_fault(&ok), None);
        let missing = json!({ "messages": [user, call("a"), user] });
        assert!(tool_pairing_fault(&missing).is_some_and(|fault| fault.contains("did not have")));
        let late = json!({ "messages": [user, call("a"), user, result("a")] });
        assert!(tool_pairing_fault(&late).is_some());
        let orphan = json!({ "messages": [user, result("a")] });
        assert!(tool_pairing_fault(&orphan).is_some());
        let twice = json!({ "messages": [user, call("a"), result("a"), result("a")] });
        assert!(tool_pairing_fault(&twice).is_some());
    }
}
