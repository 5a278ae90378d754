//! `@ahpd/agent-echo`: the engine `echo`, which exists for the daemon's own tests and benchmark
//! (built with the cargo feature `test-plugins`).
//!
//! A turn answers with the prompt's text as one markdown part sent in three deltas; the prompt
//! `/hang` runs until cancelled; `/stall` sends its empty part first, then does the same. Conversations are files under the option `store`, so listing,
//! transcripts and restarts behave as they would with a real engine. A record with
//! `"closeHangs": true` makes sessions whose close never finishes, to test the bounded shutdown.
//! `@ahpd/agent-echo-twin` registers the same engine, to exercise the duplicate-engine refusal.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahp_types::actions::{
    ChatDeltaAction, ChatResponsePartAction, ChatTurnCompleteAction, StateAction,
};
use ahp_types::common::JsonObject;
use ahp_types::state::{MarkdownResponsePart, ResponsePart, Turn, TurnState};
use ahpd_sdk::plugin::{
    AgentRecord, Engine, Plugin, PluginError, Readiness, RecordError, Registrar, SecretReader,
};
use ahpd_sdk::{
    Agent, AgentDescriptor, AgentError, PastSession, Session, SessionStart, TurnRequest,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::builtin::{BuiltIn, Provides};
use crate::fsutil;

/// The echo plugins of the test build.
pub fn plugins() -> Vec<BuiltIn> {
    vec![
        BuiltIn::new(
            Arc::new(EchoPlugin {
                name: "@ahpd/agent-echo",
                title: "Echo",
            }),
            &[Provides::Engine("echo")],
        ),
        BuiltIn::new(
            Arc::new(EchoPlugin {
                name: "@ahpd/agent-echo-twin",
                title: "Echo twin",
            }),
            &[Provides::Engine("echo")],
        ),
    ]
}

struct EchoPlugin {
    name: &'static str,
    title: &'static str,
}

#[async_trait]
impl Plugin for EchoPlugin {
    fn name(&self) -> &str {
        self.name
    }

    fn title(&self) -> &str {
        self.title
    }

    fn defaults(&self) -> Value {
        json!({"store": "echo-store"})
    }

    fn options_schema(&self) -> Value {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {
                "store": {"type": "string", "format": "path", "title": "Conversation folder"},
                "apiKey": {"type": "string", "writeOnly": true, "title": "Unused key"},
                "delayMs": {"type": "integer", "minimum": 0, "maximum": 60000}
            },
            "additionalProperties": false
        })
    }

    fn check(&self, options: &Value) -> Readiness {
        match options.get("store").and_then(Value::as_str) {
            Some(s) if Path::new(s).is_absolute() => Readiness::Ready,
            _ => Readiness::Unconfigured("the option store must name a folder".into()),
        }
    }

    async fn apply(
        &self,
        options: Value,
        registrar: &mut dyn Registrar,
    ) -> Result<(), PluginError> {
        let store = options
            .get("store")
            .and_then(Value::as_str)
            .map(PathBuf::from)
            .ok_or_else(|| PluginError("the option store must name a folder".into()))?;
        fsutil::ensure_dir(&store)
            .map_err(|e| PluginError(format!("cannot create {}: {e}", store.display())))?;
        let delay = options.get("delayMs").and_then(Value::as_u64).unwrap_or(0);
        registrar.engine(Arc::new(EchoEngine { store, delay }));
        Ok(())
    }
}

struct EchoEngine {
    store: PathBuf,
    delay: u64,
}

fn record_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "apiKey": {"type": "string", "writeOnly": true, "title": "API key (unused)"},
            "delayMs": {"type": "integer", "minimum": 0, "maximum": 60000, "title": "Pause between deltas"},
            "closeHangs": {"type": "boolean", "title": "Sessions never finish closing (tests only)"},
            "hostOnly": {"type": "boolean", "title": "Never runs in a machine (tests only)"}
        },
        "additionalProperties": false
    })
}

impl Engine for EchoEngine {
    fn name(&self) -> &str {
        "echo"
    }

    fn record_schema(&self) -> Value {
        record_schema()
    }

    fn host_only_fields(&self) -> Vec<String> {
        vec!["delayMs".into(), "closeHangs".into(), "hostOnly".into()]
    }

    fn template(&self) -> JsonObject {
        JsonObject::new()
    }

    fn check_record(&self, _owner: &str, config: &JsonObject) -> Result<(), RecordError> {
        // A `$secret` reference stands for a string, so it passes where a string may go.
        let mut shown = Value::Object(config.clone());
        if let Value::Object(map) = &mut shown {
            for v in map.values_mut() {
                if crate::config::secret_ref(v).is_some() {
                    *v = Value::String(String::new());
                }
            }
        }
        super::options::validate(&record_schema(), &shown, "config").map_err(RecordError::Schema)
    }

    fn agent(
        &self,
        record: &AgentRecord,
        _plugin_options: &Value,
        _secrets: Arc<dyn SecretReader>,
    ) -> Result<Arc<dyn Agent>, RecordError> {
        let delay = record
            .config
            .get("delayMs")
            .and_then(Value::as_u64)
            .unwrap_or(self.delay);
        let mut descriptor = AgentDescriptor::new(record.id.clone(), record.name.clone());
        descriptor.description = record.description.clone().unwrap_or_default();
        let close_hangs = record
            .config
            .get("closeHangs")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let nested = !record
            .config
            .get("hostOnly")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok(Arc::new(EchoAgent {
            descriptor,
            store: self.store.clone(),
            delay: Duration::from_millis(delay),
            close_hangs,
            nested,
        }))
    }
}

/// A stored conversation.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Conversation {
    id: String,
    title: String,
    created_at: String,
    modified_at: String,
    #[serde(default)]
    working_directories: Vec<String>,
    #[serde(default)]
    turns: Vec<Turn>,
}

struct EchoAgent {
    descriptor: AgentDescriptor,
    store: PathBuf,
    delay: Duration,
    close_hangs: bool,
    /// Whether it runs nested in a machine, as cofold does (the record's `hostOnly` turns it off).
    nested: bool,
}

fn conversation_path(store: &Path, id: &str) -> Option<PathBuf> {
    // Backend ids become file names, so only plain ids are accepted.
    let plain = !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    plain.then(|| store.join(format!("{id}.json")))
}

fn read_conversation(store: &Path, id: &str) -> Option<Conversation> {
    let text = std::fs::read_to_string(conversation_path(store, id)?).ok()?;
    serde_json::from_str(&text).ok()
}

#[async_trait]
impl Agent for EchoAgent {
    fn descriptor(&self) -> AgentDescriptor {
        self.descriptor.clone()
    }

    // Runs nested like cofold, so machine tests can carry echo sessions into an inner host.
    fn runs_nested(&self) -> bool {
        self.nested
    }

    async fn create(&self, start: SessionStart) -> Result<Box<dyn Session>, AgentError> {
        let id = start
            .resume
            .clone()
            .unwrap_or_else(|| start.backend_id.clone());
        let path = conversation_path(&self.store, &id)
            .ok_or_else(|| AgentError::Refused(format!("{id:?} is not an echo conversation id")))?;
        let now = ahpd_sdk::util::now_iso();
        let conversation = read_conversation(&self.store, &id).unwrap_or_else(|| Conversation {
            id: id.clone(),
            title: String::new(),
            created_at: now.clone(),
            modified_at: now,
            working_directories: start
                .working_directory
                .as_deref()
                .map(|d| vec![ahpd_sdk::util::file_uri(d)])
                .unwrap_or_default(),
            turns: Vec::new(),
        });
        Ok(Box::new(EchoSession {
            ctx: start.ctx,
            path,
            conversation: Arc::new(tokio::sync::Mutex::new(conversation)),
            delay: self.delay,
            runs: HashMap::new(),
            close_hangs: self.close_hangs,
        }))
    }

    async fn list(&self) -> Vec<PastSession> {
        let Ok(dir) = std::fs::read_dir(&self.store) else {
            return Vec::new();
        };
        let mut rows = Vec::new();
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".json") else {
                continue;
            };
            if let Some(c) = read_conversation(&self.store, id) {
                if c.turns.is_empty() {
                    continue;
                }
                rows.push(PastSession {
                    id: c.id,
                    title: c.title,
                    created_at: c.created_at,
                    modified_at: c.modified_at,
                    working_directories: c.working_directories,
                });
            }
        }
        rows
    }

    async fn transcript(&self, id: &str) -> Option<Vec<Turn>> {
        read_conversation(&self.store, id).map(|c| c.turns)
    }

    async fn delete(&self, id: &str) -> Result<(), AgentError> {
        if let Some(path) = conversation_path(&self.store, id) {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(AgentError::Failed(format!("cannot delete {id}: {e}"))),
            }
        }
        Ok(())
    }
}

struct EchoSession {
    ctx: ahpd_sdk::SessionContext,
    path: PathBuf,
    conversation: Arc<tokio::sync::Mutex<Conversation>>,
    delay: Duration,
    runs: HashMap<String, JoinHandle<()>>,
    close_hangs: bool,
}

/// Three pieces of `text`, split at character boundaries.
fn thirds(text: &str) -> [String; 3] {
    let chars: Vec<char> = text.chars().collect();
    let a = chars.len() / 3;
    let b = 2 * chars.len() / 3;
    [
        chars[..a].iter().collect(),
        chars[a..b].iter().collect(),
        chars[b..].iter().collect(),
    ]
}

async fn run_turn(
    ctx: ahpd_sdk::SessionContext,
    conversation: Arc<tokio::sync::Mutex<Conversation>>,
    path: PathBuf,
    delay: Duration,
    turn: TurnRequest,
) {
    let started = Instant::now();
    let started_at = ahpd_sdk::util::now_iso();
    if turn.message.text.trim() == "/hang" {
        // Runs until the host cancels it (the task is aborted then).
        std::future::pending::<()>().await;
    }
    let part_id = format!("{}-text", turn.turn_id);
    ctx.emit(StateAction::ChatResponsePart(ChatResponsePartAction {
        turn_id: turn.turn_id.clone(),
        part: ResponsePart::Markdown(MarkdownResponsePart {
            id: part_id.clone(),
            content: String::new(),
        }),
        meta: None,
    }));
    if turn.message.text.trim() == "/stall" {
        // Shows it began (the empty part), then runs until cancelled.
        std::future::pending::<()>().await;
    }
    for piece in thirds(&turn.message.text) {
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        ctx.emit(StateAction::ChatDelta(ChatDeltaAction {
            turn_id: turn.turn_id.clone(),
            part_id: part_id.clone(),
            content: piece,
            meta: None,
        }));
    }
    let duration = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    {
        let mut c = conversation.lock().await;
        if c.title.is_empty() {
            c.title = ahpd_sdk::util::title_from(&turn.message.text);
        }
        c.modified_at = ahpd_sdk::util::now_iso();
        c.turns.push(Turn {
            id: turn.turn_id.clone(),
            started_at: Some(started_at),
            duration: Some(duration),
            message: turn.message.clone(),
            response_parts: vec![ResponsePart::Markdown(MarkdownResponsePart {
                id: part_id,
                content: turn.message.text.clone(),
            })],
            usage: None,
            state: TurnState::Complete,
        });
        if let Ok(value) = serde_json::to_value(&*c)
            && let Err(e) = fsutil::write_json(&path, &value, fsutil::PRIVATE_FILE)
        {
            tracing::error!(file = %path.display(), "the echo engine cannot store a conversation: {e}");
        }
    }
    ctx.emit(StateAction::ChatTurnComplete(ChatTurnCompleteAction {
        turn_id: turn.turn_id,
        duration,
        meta: None,
    }));
}

#[async_trait]
impl Session for EchoSession {
    fn backend_id(&self) -> String {
        self.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    fn begin(&mut self, turn: TurnRequest) {
        self.runs.retain(|_, h| !h.is_finished());
        let id = turn.turn_id.clone();
        let handle = tokio::spawn(run_turn(
            self.ctx.clone(),
            self.conversation.clone(),
            self.path.clone(),
            self.delay,
            turn,
        ));
        self.runs.insert(id, handle);
    }

    fn cancel(&mut self, turn_id: &str) {
        if let Some(h) = self.runs.remove(turn_id) {
            h.abort();
        }
    }

    async fn close(&mut self) {
        for (_, h) in self.runs.drain() {
            h.abort();
        }
        if self.close_hangs {
            std::future::pending::<()>().await;
        }
    }
}
