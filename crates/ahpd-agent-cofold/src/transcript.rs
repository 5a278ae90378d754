//! Store → AHP: catalogue rows and turns read back from a stored conversation.

use std::collections::HashMap;

use ahp_types::state::Turn;
use ahpd_sdk::agent::PastSession;
use cofold_agents::event::EventBody;
use cofold_agents::id::Timestamp;
use cofold_agents::message::{Message, MessageSource, Part, Role, text_of};
use cofold_agents::store::{KvScope, RunRecord, RunStatus, SessionRecord, Store};
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

/// Where rows keep their titles: a listing then reads one small value per conversation, not
/// its messages.
fn titles() -> KvScope {
    KvScope::Shared {
        namespace: "ahpd-agent-cofold.titles".to_owned(),
    }
}

/// The title of a conversation: its first prompt, read from the messages once and kept. The
/// creation time stored with it tells a conversation deleted and made again under the same id.
async fn title(store: &dyn Store, record: &SessionRecord) -> Option<String> {
    let created = record.created_at.to_string();
    let kept = store
        .kv_get(&titles(), &record.session_id)
        .await
        .ok()
        .flatten();
    if let Some(kept) = kept
        && kept.get("createdAt").and_then(Value::as_str) == Some(created.as_str())
        && let Some(title) = kept.get("title").and_then(Value::as_str)
    {
        return Some(title.to_owned());
    }
    let messages = store.list_messages(&record.session_id, None).await.ok()?;
    let title = messages
        .iter()
        .find(|m| is_prompt(m))
        .map(|m| ahpd_sdk::util::title_from(&text_of(m)))
        .filter(|t| !t.is_empty())?;
    // A store that cannot keep it is read again next time; nothing is lost.
    let _ = store
        .kv_set(
            &titles(),
            &record.session_id,
            json!({ "createdAt": created, "title": title }),
        )
        .await;
    Some(title)
}

/// Forgets a deleted conversation's title.
pub(crate) async fn forget(store: &dyn Store, id: &str) {
    let _ = store.kv_delete(&titles(), id).await;
}

/// The catalogue row of a stored conversation.
pub(crate) async fn row(store: &dyn Store, record: &SessionRecord) -> PastSession {
    let title = title(store, record)
        .await
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
    // A run its dead process left `running` is settled and said again once the session opens
    // for a client (see `session/reopen.rs`); until then it is not history.
    let dead = store.dead_writer(id).await.ok().flatten();
    let facts = EventFacts::read(store, id, runs.values()).await;
    let mut out: Vec<Value> = Vec::new();
    let mut open: Option<OpenTurn> = None;
    let mut hidden = false;
    for m in &messages {
        match m.role {
            Role::User | Role::System if is_prompt(m) => {
                close(open.take(), &mut out);
                let run = runs.get(&m.id);
                hidden = run.is_some_and(|r| {
                    r.status == RunStatus::Awaiting
                        || (r.status == RunStatus::Running && dead.as_ref() == Some(&r.run_id))
                });
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
                    match facts.compactions.get(&m.id) {
                        Some((before, after)) => {
                            format!("Context compacted automatically: {before} tokens to {after}.")
                        }
                        None => "Context compacted automatically.".to_owned(),
                    }
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
                                if let Some(meta) = facts.call_meta(
                                    call_id,
                                    call["toolName"].as_str() == Some("shell_exec")
                                        && !host_tools.contains_key("shell_exec"),
                                ) {
                                    done["_meta"] = meta;
                                }
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

/// A call's stored start, end and duration in milliseconds, as far as its events tell.
type CallTimes = (Option<String>, Option<String>, Option<u64>);

/// What a conversation's stored events add to its messages: each call's times and each
/// compaction's numbers.
#[derive(Default)]
struct EventFacts {
    /// Call id → (start, end, duration in milliseconds), as far as stored.
    calls: HashMap<String, CallTimes>,
    /// Summary message id → (estimate before, estimate after).
    compactions: HashMap<String, (u64, u64)>,
}

impl EventFacts {
    async fn read<'a>(
        store: &dyn Store,
        session_id: &str,
        runs: impl Iterator<Item = &'a RunRecord>,
    ) -> EventFacts {
        let mut facts = EventFacts::default();
        for run in runs {
            let run_ref = cofold_agents::store::RunRef {
                session_id: session_id.to_owned(),
                run_id: run.run_id.clone(),
            };
            // A run whose events cannot be read keeps its messages, without times.
            let Ok(events) = store.list_events(&run_ref, None).await else {
                continue;
            };
            for event in events {
                match event.body {
                    EventBody::ToolStarted { call_id, .. } => {
                        facts.calls.entry(call_id).or_default().0 = Some(event.at.to_string());
                    }
                    EventBody::ToolCompleted {
                        call_id,
                        duration_ms,
                        ..
                    } => {
                        let entry = facts.calls.entry(call_id).or_default();
                        entry.1 = Some(event.at.to_string());
                        entry.2 = Some(duration_ms);
                    }
                    EventBody::ContextCompacted {
                        message_id,
                        estimated_tokens,
                        after_tokens,
                        ..
                    } => {
                        facts
                            .compactions
                            .insert(message_id, (estimated_tokens, after_tokens));
                    }
                    _ => {}
                }
            }
        }
        facts
    }

    /// A finished call's `_meta`: its times as live calls carry them, with a start computed from
    /// the end and the duration when only those are stored.
    fn call_meta(&self, call_id: &str, shell: bool) -> Option<Value> {
        let mut meta = serde_json::Map::new();
        if shell {
            meta.insert("toolKind".to_owned(), json!("terminal"));
        }
        if let Some((start, end, duration)) = self.calls.get(call_id) {
            let start = start.clone().or_else(|| {
                let end = Timestamp::parse(end.as_deref()?)?;
                let micros = end.unix_micros() - (*duration)? as i64 * 1000;
                Some(Timestamp::from_unix_micros(micros).to_string())
            });
            if let Some(start) = start {
                meta.insert("ahpd.startedAt".to_owned(), json!(start));
            }
            if let Some(end) = end {
                meta.insert("ahpd.endedAt".to_owned(), json!(end));
            }
            if let Some(duration) = duration {
                meta.insert("ahpd.durationMs".to_owned(), json!(duration));
            }
        }
        (!meta.is_empty()).then_some(Value::Object(meta))
    }
}
