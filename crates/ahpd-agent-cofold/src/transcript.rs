//! Store → AHP: catalogue rows and turns read back from a stored conversation (engine.md §4.7–§4.8).

use std::collections::HashMap;

use ahp_types::state::Turn;
use ahpd_sdk::agent::PastSession;
use cofold_agents::message::{Message, MessageSource, Part, Role, text_of};
use cofold_agents::store::{RunRecord, RunStatus, SessionRecord, Store};
use serde_json::{Value, json};

use crate::turns::{call_title, usage_info};

fn file_uri(path: &str) -> String {
    let mut out = String::from("file://");
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn is_prompt(m: &Message) -> bool {
    m.role == Role::User && m.source == MessageSource::Input
}

/// The catalogue row of a stored conversation.
pub(crate) async fn row(store: &dyn Store, record: &SessionRecord) -> PastSession {
    let messages = store
        .list_messages(&record.session_id, None)
        .await
        .unwrap_or_default();
    let title = messages
        .iter()
        .find(|m| is_prompt(m))
        .map(|m| ahpd_sdk::util::title_from(&text_of(m)))
        .filter(|t| !t.is_empty())
        .unwrap_or_else(|| record.session_id.clone());
    PastSession {
        id: record.session_id.clone(),
        title,
        created_at: record.created_at.to_string(),
        modified_at: record.updated_at.to_string(),
        working_directories: record.workspace.iter().map(|w| file_uri(w)).collect(),
    }
}

struct OpenTurn {
    value: Value,
    calls: HashMap<String, usize>,
}

fn close(turn: Option<OpenTurn>, out: &mut Vec<Value>) {
    if let Some(t) = turn {
        out.push(t.value);
    }
}

/// The turns of a stored conversation, oldest first.
///
/// `host_tools` names the host's tools (name → display name): their calls are titled by name.
pub(crate) async fn turns(
    store: &dyn Store,
    id: &str,
    host_tools: &HashMap<String, String>,
) -> Option<Vec<Turn>> {
    let record = store.get_session(id).await.ok().flatten()?;
    let workspace = std::path::PathBuf::from(record.workspace.unwrap_or_default());
    let messages = store.list_messages(id, None).await.ok()?;
    let runs: HashMap<String, RunRecord> = store
        .list_runs(id, None)
        .await
        .unwrap_or_default()
        .into_iter()
        .filter_map(|r| r.input_message_id.clone().map(|m| (m, r)))
        .collect();
    let mut out: Vec<Value> = Vec::new();
    let mut open: Option<OpenTurn> = None;
    let mut hidden = false;
    for m in &messages {
        match m.role {
            Role::User | Role::System if is_prompt(m) => {
                close(open.take(), &mut out);
                let run = runs.get(&m.id);
                hidden = run.is_some_and(|r| r.status == RunStatus::Awaiting);
                let state = match run.map(|r| r.status) {
                    Some(RunStatus::Failed) => "error",
                    Some(RunStatus::Cancelled) => "cancelled",
                    _ => "complete",
                };
                let mut turn = json!({
                    "id": m.id,
                    "startedAt": m.created_at.to_string(),
                    "message": { "text": text_of(m), "origin": { "kind": "user" } },
                    "responseParts": [],
                    "state": state,
                });
                if let Some(run) = run {
                    if let Some(model) = &run.model {
                        turn["message"]["model"] = json!({ "id": model });
                    }
                    let usage = usage_info(&run.usage, run.model.as_deref(), run.cost);
                    turn["usage"] = serde_json::to_value(usage).unwrap_or(Value::Null);
                }
                open = Some(OpenTurn {
                    value: turn,
                    calls: HashMap::new(),
                });
            }
            Role::User | Role::System => {
                if hidden {
                    continue;
                }
                let turn = open.get_or_insert_with(|| OpenTurn {
                    value: json!({
                        "id": m.id, "startedAt": m.created_at.to_string(),
                        "message": { "text": "", "origin": { "kind": "agent" } },
                        "responseParts": [], "state": "complete",
                    }),
                    calls: HashMap::new(),
                });
                let text = if m.source == MessageSource::Summary {
                    "Context compacted automatically.".to_owned()
                } else {
                    text_of(m)
                };
                if !text.is_empty() {
                    push_part(
                        turn,
                        json!({ "kind": "systemNotification", "content": text }),
                    );
                }
            }
            Role::Assistant => {
                if hidden {
                    continue;
                }
                let Some(turn) = open.as_mut() else { continue };
                for (i, part) in m.parts.iter().enumerate() {
                    match part {
                        Part::Text { text } if !text.trim().is_empty() => {
                            push_part(
                                turn,
                                json!({ "kind": "markdown", "id": format!("{}:{i}", m.id), "content": text }),
                            );
                        }
                        Part::Reasoning { text } => {
                            push_part(
                                turn,
                                json!({ "kind": "reasoning", "id": format!("{}:{i}", m.id), "content": text }),
                            );
                        }
                        Part::ToolCall(call) => {
                            let (call_id, name, input) = (&call.call_id, &call.name, &call.input);
                            let subject = input
                                .as_ref()
                                .and_then(|i| {
                                    i.get("path")
                                        .or_else(|| i.get("command"))
                                        .or_else(|| i.get("pattern"))
                                        .or_else(|| i.get("url"))
                                        .or_else(|| i.get("query"))
                                })
                                .and_then(Value::as_str);
                            let host = host_tools.get(name);
                            let title = match host {
                                Some(_) => name.clone(),
                                None => call_title(name, subject, &workspace, None),
                            };
                            let display = host.unwrap_or(name);
                            let index = push_part(
                                turn,
                                json!({ "kind": "toolCall", "toolCall": {
                                    "status": "cancelled", "toolCallId": call_id, "toolName": name, "displayName": display,
                                    "invocationMessage": title, "reason": "skipped",
                                }}),
                            );
                            turn.calls.insert(call_id.clone(), index);
                        }
                        _ => {}
                    }
                }
            }
            Role::Tool => {
                if hidden {
                    continue;
                }
                let Some(turn) = open.as_mut() else { continue };
                for part in &m.parts {
                    let Part::ToolResult(result) = part else {
                        continue;
                    };
                    let (call_id, content, is_error) =
                        (&result.call_id, &result.content, &result.is_error);
                    match turn.calls.get(call_id).copied() {
                        Some(index) => {
                            let call = &mut turn.value["responseParts"][index]["toolCall"];
                            let title = call["invocationMessage"].clone();
                            let declined = *is_error && content.contains("declined");
                            let mut done = json!({
                                "status": if declined { "cancelled" } else { "completed" },
                                "toolCallId": call_id, "toolName": call["toolName"], "displayName": call["displayName"],
                                "invocationMessage": title,
                            });
                            if declined {
                                done["reason"] = json!("denied");
                            } else {
                                done["success"] = json!(!is_error);
                                done["pastTenseMessage"] = title;
                                done["confirmed"] = json!("not-needed");
                                if !content.is_empty() {
                                    done["content"] = json!([{ "type": "text", "text": content }]);
                                }
                                if *is_error {
                                    done["error"] = json!({ "message": content });
                                }
                            }
                            *call = done;
                        }
                        None => {
                            push_part(
                                turn,
                                json!({ "kind": "systemNotification", "content": content }),
                            );
                        }
                    }
                }
            }
        }
    }
    if !hidden {
        close(open.take(), &mut out);
    }
    Some(
        out.into_iter()
            .filter_map(|t| serde_json::from_value(t).ok())
            .collect(),
    )
}

fn push_part(turn: &mut OpenTurn, part: Value) -> usize {
    let parts = turn.value["responseParts"].as_array_mut();
    match parts {
        Some(parts) => {
            parts.push(part);
            parts.len() - 1
        }
        None => 0,
    }
}
