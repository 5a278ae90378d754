//! What clients saw of a turn that the runtime's records do not hold: when the turn started and
//! the message as it was sent, how each approval was answered, and how long a stopped turn
//! lasted by its client's count. Kept in the store beside the conversation, so that a turn read
//! back after a restart is the turn clients mirrored live.

use std::collections::HashMap;

use ahp_types::state::{
    ChatInputAnswer, ChatInputResponseKind, Message, ToolCallCancellationReason,
    ToolCallConfirmationReason,
};
use cofold_agents::store::{KvScope, Store};
use serde::{Deserialize, Serialize};

fn scope() -> KvScope {
    KvScope::Shared {
        namespace: "ahpd-agent-cofold.turns".to_owned(),
    }
}

/// A turn's start as its `chat/turnStarted` said it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Header {
    pub started_at: String,
    pub message: Message,
}

/// How the host answered one approval request or question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub(crate) enum Answer {
    /// The call may run: asked and approved (`option` chosen, maybe with edited input), or let
    /// through by a session setting without a question (`confirmed` is then `setting`).
    Approved {
        confirmed: ToolCallConfirmationReason,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        option: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        edited: Option<String>,
    },
    /// A person declined it, maybe saying why.
    Denied {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<ToolCallCancellationReason>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A question's answer: accepted with these answers, or declined.
    Input {
        response: ChatInputResponseKind,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answers: Option<HashMap<String, ChatInputAnswer>>,
    },
}

/// The answer an approval outcome records; none when nobody answered (the question then reads
/// back open until its turn ended, as it showed live).
pub(crate) fn answer_of(outcome: &ahpd_sdk::agent::ApprovalOutcome) -> Option<Answer> {
    use ahpd_sdk::agent::ApprovalOutcome;
    match outcome {
        ApprovalOutcome::Approved {
            edited_input,
            option_id,
            confirmed,
        } => Some(Answer::Approved {
            confirmed: confirmed.clone(),
            option: option_id.clone(),
            edited: edited_input.clone(),
        }),
        ApprovalOutcome::Denied { reason, message } => Some(Answer::Denied {
            reason: *reason,
            message: message.as_deref().map(crate::asks::bounded_reason),
        }),
        ApprovalOutcome::Cancelled => None,
    }
}

/// The answer a question's outcome records; none when nobody answered.
pub(crate) fn input_answer_of(outcome: &ahpd_sdk::agent::InputOutcome) -> Option<Answer> {
    match outcome.response {
        ChatInputResponseKind::Accept | ChatInputResponseKind::Decline => Some(Answer::Input {
            response: outcome.response,
            answers: outcome.answers.clone(),
        }),
        _ => None,
    }
}

/// Everything kept about one conversation's turns.
#[derive(Debug, Default)]
pub(crate) struct Facts {
    pub headers: HashMap<String, Header>,
    /// Approval request id → its answer.
    pub answers: HashMap<String, Answer>,
    /// Turn id → the duration its stopping client gave.
    pub stopped: HashMap<String, i64>,
    /// Approval request id → why its question showed no edits.
    pub notes: HashMap<String, crate::previews::Note>,
}

/// Writes one fact. A store that cannot keep it loses only the detail it carries: the turn then
/// reads back with the runtime's own times and message.
async fn put(store: &dyn Store, key: String, value: serde_json::Value) {
    if let Err(e) = store.kv_set(&scope(), &key, value).await {
        tracing::warn!(key = %key, "a turn's detail is not kept: {}", e.message);
    }
}

pub(crate) async fn started(store: &dyn Store, session: &str, turn: &str, header: &Header) {
    if let Ok(value) = serde_json::to_value(header) {
        put(store, format!("{session}/turn/{turn}"), value).await;
    }
}

pub(crate) async fn answered(store: &dyn Store, session: &str, request: &str, answer: &Answer) {
    if let Ok(value) = serde_json::to_value(answer) {
        put(store, format!("{session}/answer/{request}"), value).await;
    }
}

/// Why an approval's question showed no edits, kept when it is put.
pub(crate) async fn previewed(
    store: &dyn Store,
    session: &str,
    request: &str,
    note: &crate::previews::Note,
) {
    if let Ok(value) = serde_json::to_value(note) {
        put(store, format!("{session}/preview/{request}"), value).await;
    }
}

pub(crate) async fn stopped(store: &dyn Store, session: &str, turn: &str, duration: i64) {
    put(
        store,
        format!("{session}/stopped/{turn}"),
        serde_json::json!(duration),
    )
    .await;
}

/// Every fact kept for a conversation, in one read.
pub(crate) async fn read(store: &dyn Store, session: &str) -> Facts {
    let mut facts = Facts::default();
    let prefix = format!("{session}/");
    let Ok(entries) = store.kv_list(&scope(), Some(&prefix)).await else {
        return facts;
    };
    for entry in entries {
        let Some(rest) = entry.key.strip_prefix(&prefix) else {
            continue;
        };
        let Some((kind, id)) = rest.split_once('/') else {
            continue;
        };
        match kind {
            "turn" => {
                if let Ok(h) = serde_json::from_value(entry.value) {
                    facts.headers.insert(id.to_owned(), h);
                }
            }
            "answer" => {
                if let Ok(a) = serde_json::from_value(entry.value) {
                    facts.answers.insert(id.to_owned(), a);
                }
            }
            "stopped" => {
                if let Some(d) = entry.value.as_i64() {
                    facts.stopped.insert(id.to_owned(), d);
                }
            }
            "preview" => {
                if let Ok(n) = serde_json::from_value(entry.value) {
                    facts.notes.insert(id.to_owned(), n);
                }
            }
            _ => {}
        }
    }
    facts
}

/// Forgets a deleted conversation's facts.
pub(crate) async fn forget(store: &dyn Store, session: &str) {
    let prefix = format!("{session}/");
    if let Ok(entries) = store.kv_list(&scope(), Some(&prefix)).await {
        for entry in entries {
            let _ = store.kv_delete(&scope(), &entry.key).await;
        }
    }
}
