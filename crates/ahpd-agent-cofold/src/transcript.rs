//! Store → AHP: catalogue rows and turns read back from a stored conversation.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use ahp_types::state::{MessageKind, MessageOrigin, ModelSelection, Turn};
use ahpd_sdk::agent::PastSession;
use cofold_agents::message::{Message, MessageSource, Role, text_of};
use cofold_agents::store::{KvScope, RunRecord, RunRef, RunStatus, SessionRecord, Store};
use serde_json::{Value, json};

use crate::readback::{self, StoredRun};
use crate::turn_facts::{self, Header};
use crate::turns::TurnMapper;

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

/// Where a conversation's turns are read back: the host's tools (name → display name, their
/// calls are titled by name) and the memory folder of a workspace (memory calls are titled
/// relative to it).
pub(crate) struct ReadBack<'a> {
    pub host_tools: &'a HashMap<String, String>,
    pub memory_dir: &'a (dyn Fn(&Path) -> Option<PathBuf> + Send + Sync),
}

/// A prompt's turn as the runtime alone knows it, for turns the engine kept nothing about.
fn header_of(m: &Message, run: Option<&RunRecord>) -> Header {
    Header {
        started_at: m.created_at.to_string(),
        message: ahp_types::state::Message {
            text: text_of(m),
            origin: MessageOrigin {
                kind: MessageKind::User,
            },
            attachments: None,
            model: run
                .and_then(|r| r.model.clone())
                .map(|id| ModelSelection { id, config: None }),
            agent: None,
            meta: None,
        },
    }
}

/// The turns of a stored conversation, oldest first: each prompt's newest run replayed through
/// the live mapping (see `readback.rs`).
pub(crate) async fn turns(store: &dyn Store, id: &str, at: &ReadBack<'_>) -> Option<Vec<Turn>> {
    let record = store.get_session(id).await.ok().flatten()?;
    let workspace = PathBuf::from(record.workspace.unwrap_or_default());
    let messages = store.list_messages(id, None).await.ok()?;
    let mut runs: HashMap<String, RunRecord> = HashMap::new();
    for run in store.list_runs(id, None).await.unwrap_or_default() {
        let Some(input) = run.input_message_id.clone() else {
            continue;
        };
        // A resumed turn ran more than once; the newest attempt is the one clients saw end.
        let newer = runs
            .get(&input)
            .is_none_or(|r| r.created_at.to_string() <= run.created_at.to_string());
        if newer {
            runs.insert(input, run);
        }
    }
    // A run its dead process left `running` is settled and said again once the session opens
    // for a client (see `session/reopen.rs`); until then it is not history.
    let dead = store.dead_writer(id).await.ok().flatten();
    let facts = turn_facts::read(store, id).await;
    let mut out = Vec::new();
    // A turn begins at a run's input; a steer is input too, but no run begins with it, and it
    // shows in no turn (live, it is a pending message the run took).
    let starts_turn = |m: &&Message| is_prompt(m) && (runs.is_empty() || runs.contains_key(&m.id));
    for m in messages.iter().filter(starts_turn) {
        let run = runs.get(&m.id);
        if run.is_some_and(|r| {
            r.status == RunStatus::Awaiting
                || (r.status == RunStatus::Running && dead.as_ref() == Some(&r.run_id))
        }) {
            continue;
        }
        let header = facts
            .headers
            .get(&m.id)
            .cloned()
            .unwrap_or_else(|| header_of(m, run));
        let events = match run {
            Some(run) => {
                let run_ref = RunRef {
                    session_id: id.to_owned(),
                    run_id: run.run_id.clone(),
                };
                // A run whose events cannot be read still shows its prompt.
                store.list_events(&run_ref, None).await.unwrap_or_default()
            }
            None => Vec::new(),
        };
        let mut mapper = TurnMapper::new(
            &m.id,
            workspace.clone(),
            (at.memory_dir)(&workspace),
            run.and_then(|r| r.model.clone()),
        );
        mapper.set_host_tools(at.host_tools.clone());
        let stored = StoredRun {
            header,
            events: &events,
            answers: &facts.answers,
            notes: &facts.notes,
            stopped: facts.stopped.get(&m.id).copied(),
        };
        if let Some(turn) = readback::rebuild(&m.id, mapper, stored) {
            out.push(turn);
        }
    }
    Some(out)
}
