//! Test helpers (feature `testing`): the scripted backend [`ScriptedAgent`], and a
//! [`Mirror`] that rebuilds channel states from snapshots and envelopes with the official
//! reducers, as a client does.

mod script;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use ahp::reducers::{apply_action_to_chat, apply_action_to_root, apply_action_to_session};
use ahp_types::actions::*;
use ahp_types::common::JsonObject;
use ahp_types::state::*;
use async_trait::async_trait;
use serde_json::Value;

use crate::agent::*;
use script::run_script;

pub use crate::transport::memory::{MemoryClient, pair};

/// Channel states rebuilt the way a client does.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Mirror {
    /// The root state, once a root snapshot arrived.
    pub root: Option<RootState>,
    /// Session states by URI.
    pub sessions: HashMap<String, SessionState>,
    /// Chat states by URI.
    pub chats: HashMap<String, ChatState>,
}

impl Mirror {
    /// Take a snapshot's state as the channel's state.
    pub fn apply_snapshot(&mut self, snap: &Snapshot) {
        match &snap.state {
            SnapshotState::Root(r) => self.root = Some((**r).clone()),
            SnapshotState::Session(s) => {
                self.sessions.insert(snap.resource.clone(), (**s).clone());
            }
            SnapshotState::Chat(c) => {
                self.chats.insert(snap.resource.clone(), (**c).clone());
            }
            _ => {}
        }
    }

    /// Apply an envelope with the reducers; rejections are skipped. Returns whether the
    /// channel is known to the mirror.
    pub fn apply(&mut self, env: &ActionEnvelope) -> bool {
        if env.rejection_reason.is_some() {
            return true;
        }
        if env.channel == ahp_types::ROOT_RESOURCE_URI {
            if let Some(r) = self.root.as_mut() {
                apply_action_to_root(r, &env.action);
                return true;
            }
            return false;
        }
        if let Some(s) = self.sessions.get_mut(&env.channel) {
            apply_action_to_session(s, &env.action);
            return true;
        }
        if let Some(c) = self.chats.get_mut(&env.channel) {
            apply_action_to_chat(c, &env.action);
            return true;
        }
        false
    }
}

/// One stored conversation of the scripted agent.
#[derive(Debug, Clone, Default)]
struct Stored {
    title: String,
    turns: Vec<Turn>,
}

/// A backend open the scripted agent was asked for: the chat URI and `SessionStart.resume`.
pub type Opened = (String, Option<String>);

/// A backend driven by the message text, for tests. Provider `mock`.
///
/// Scripts (the turn's message text): `reason` (reasoning then a reply), `tool` (a tool that
/// runs), `ask` (a tool that asks approval), `question` (asks one required question),
/// `error` (a resumable error; resuming succeeds), `hang` (runs until cancelled), `panic`
/// (panics in `begin`), `client-tool` (runs the first tool an active client offers), `deltas:<n>` (`n` one-character deltas); anything else is answered in
/// five chunks.
///
/// Its chats can fork (`multipleChats.fork`); every fork it is asked to open is recorded (see
/// [`ScriptedAgent::forks`]).
#[derive(Clone, Default)]
pub struct ScriptedAgent {
    store: Arc<Mutex<HashMap<String, Stored>>>,
    forks: Arc<Mutex<Vec<(String, ForkFrom)>>>,
    opens: Arc<Mutex<Vec<Opened>>>,
    configured: Arc<Mutex<Vec<(String, JsonObject)>>>,
    fail_resume: bool,
    hang_creates: Arc<Vec<String>>,
    rewinds: bool,
    unfinished: Arc<Vec<String>>,
    /// How many backends it was asked to open, for waiting on.
    opened: Arc<tokio::sync::watch::Sender<usize>>,
    /// Backend ids of the `Session::watched` calls, in order.
    watched: Arc<tokio::sync::watch::Sender<Vec<String>>>,
}

impl std::fmt::Debug for ScriptedAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedAgent").finish_non_exhaustive()
    }
}

fn text_message(text: &str) -> Message {
    Message {
        text: text.to_owned(),
        origin: MessageOrigin {
            kind: MessageKind::User,
        },
        attachments: None,
        model: None,
        agent: None,
        meta: None,
    }
}

impl ScriptedAgent {
    /// An agent with an empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The chat URI and source of every chat this agent opened as a fork, in order.
    pub fn forks(&self) -> Vec<(String, ForkFrom)> {
        self.forks.lock().map(|f| f.clone()).unwrap_or_default()
    }

    /// The chat URI and `SessionStart.resume` of every backend this agent was asked to open,
    /// in order.
    pub fn opens(&self) -> Vec<Opened> {
        self.opens.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// The backend id and changes of every `Session::configure` call, in order.
    pub fn configured(&self) -> Vec<(String, JsonObject)> {
        self.configured
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
    }

    /// Fail every attempt to open a stored conversation (`SessionStart.resume` set).
    pub fn failing_resume(mut self) -> Self {
        self.fail_resume = true;
        self
    }

    /// Say these stored conversations hold unfinished work (`Agent::unfinished`).
    pub fn unfinished(mut self, ids: &[&str]) -> Self {
        self.unfinished = Arc::new(ids.iter().map(|s| (*s).to_owned()).collect());
        self
    }

    /// Waits until this agent was asked to open `n` backends; returns [`ScriptedAgent::opens`].
    pub async fn until_opens(&self, n: usize) -> Vec<Opened> {
        let mut rx = self.opened.subscribe();
        let _ = rx.wait_for(|count| *count >= n).await;
        self.opens()
    }

    /// Waits until `Session::watched` was called `n` times; returns the backend ids, in order.
    pub async fn until_watched(&self, n: usize) -> Vec<String> {
        let mut rx = self.watched.subscribe();
        rx.wait_for(|calls| calls.len() >= n)
            .await
            .map(|calls| calls.clone())
            .unwrap_or_default()
    }

    /// The backend ids of the `Session::watched` calls so far, in order.
    pub fn watched(&self) -> Vec<String> {
        self.watched.borrow().clone()
    }

    /// Never finish opening a backend for these session URIs (`Agent::create` stays pending),
    /// as a hung agent would.
    pub fn hanging_create_for(mut self, session_uris: &[&str]) -> Self {
        self.hang_creates = Arc::new(session_uris.iter().map(|s| (*s).to_owned()).collect());
        self
    }

    /// Let its chats rewind (`chat/truncated`): the stored transcript is cut after the turn.
    pub fn rewinding(mut self) -> Self {
        self.rewinds = true;
        self
    }

    /// Store a past conversation of `turns` complete turns under `id`.
    pub fn with_history(self, id: &str, turns: usize) -> Self {
        let turns = (0..turns)
            .map(|i| Turn {
                id: format!("old-{i}"),
                started_at: Some(format!("2026-01-01T00:00:{:02}.000Z", i % 60)),
                duration: Some(5),
                message: text_message(&format!("question {i}")),
                response_parts: vec![ResponsePart::Markdown(MarkdownResponsePart {
                    id: format!("p{i}"),
                    content: format!("answer {i}"),
                })],
                usage: None,
                state: TurnState::Complete,
            })
            .collect();
        if let Ok(mut s) = self.store.lock() {
            s.insert(
                id.to_owned(),
                Stored {
                    title: format!("Past {id}"),
                    turns,
                },
            );
        }
        self
    }
}

fn prop(title: &str, values: &[&str], mutable: bool) -> SessionConfigPropertySchema {
    SessionConfigPropertySchema {
        r#type: "string".into(),
        title: title.into(),
        description: None,
        default: values.first().map(|v| Value::from(*v)),
        r#enum: (!values.is_empty()).then(|| values.iter().map(|v| Value::from(*v)).collect()),
        enum_labels: None,
        enum_descriptions: None,
        read_only: None,
        items: None,
        min_items: None,
        max_items: None,
        properties: None,
        required: None,
        additional_properties: None,
        enum_dynamic: None,
        session_mutable: mutable.then_some(true),
    }
}

#[async_trait]
impl Agent for ScriptedAgent {
    fn descriptor(&self) -> AgentDescriptor {
        let mut d = AgentDescriptor::new("mock", "Mock");
        d.description = "A scripted agent for tests".into();
        d.capabilities = Some(AgentCapabilities {
            multiple_chats: Some(MultipleChatsCapability {
                fork: Some(true),
                ..MultipleChatsCapability::default()
            }),
            multiple_working_directories: None,
        });
        d
    }

    fn config_schema(&self, _dir: Option<&Path>) -> SessionConfigSchema {
        let mut properties = HashMap::new();
        properties.insert(
            "permissionMode".into(),
            prop(
                "Permission mode",
                &["default", "acceptEdits", "plan", "bypassPermissions"],
                true,
            ),
        );
        properties.insert("model".into(), prop("Model", &[], false));
        SessionConfigSchema {
            r#type: "object".into(),
            properties,
            required: None,
        }
    }

    fn config_defaults(&self, _dir: Option<&Path>) -> JsonObject {
        let mut o = JsonObject::new();
        o.insert("permissionMode".into(), Value::from("default"));
        o
    }

    fn validate_config(&self, values: &JsonObject) -> Result<(), Refusal> {
        match values.get("permissionMode").and_then(Value::as_str) {
            None | Some("default" | "acceptEdits" | "plan" | "bypassPermissions") => Ok(()),
            Some(other) => Err(Refusal::new(format!("permissionMode cannot be {other}"))),
        }
    }

    async fn create(&self, start: SessionStart) -> Result<Box<dyn Session>, AgentError> {
        if let Some(dir) = &start.working_directory
            && !dir.is_dir()
        {
            return Err(AgentError::Refused(format!(
                "{} is not a folder",
                dir.display()
            )));
        }
        if let Ok(mut o) = self.opens.lock() {
            o.push((start.chat_uri.clone(), start.resume.clone()));
        }
        self.opened.send_modify(|count| *count += 1);
        if self.hang_creates.contains(&start.session_uri) {
            std::future::pending::<()>().await;
        }
        if self.fail_resume && start.resume.is_some() {
            return Err(AgentError::Failed(
                "the stored conversation could not be read".into(),
            ));
        }
        if let Some(fork) = &start.fork
            && let Ok(mut f) = self.forks.lock()
        {
            f.push((start.chat_uri.clone(), fork.clone()));
        }
        Ok(Box::new(ScriptedSession {
            id: start.backend_id,
            ctx: start.ctx,
            runs: HashMap::new(),
            store: self.store.clone(),
            configured: self.configured.clone(),
            rewinds: self.rewinds,
            watched: self.watched.clone(),
        }))
    }

    async fn list(&self) -> Vec<PastSession> {
        let s = self.store.lock().map(|s| s.clone()).unwrap_or_default();
        s.into_iter()
            .map(|(id, st)| PastSession {
                id,
                title: st.title,
                created_at: "2026-01-01T00:00:00.000Z".into(),
                modified_at: "2026-01-01T00:00:00.000Z".into(),
                working_directories: Vec::new(),
            })
            .collect()
    }

    async fn transcript(&self, id: &str) -> Option<Vec<Turn>> {
        self.store.lock().ok()?.get(id).map(|s| s.turns.clone())
    }

    async fn unfinished(&self, id: &str) -> bool {
        self.unfinished.iter().any(|u| u == id)
    }

    async fn delete(&self, id: &str) -> Result<(), AgentError> {
        if let Ok(mut s) = self.store.lock() {
            s.remove(id);
        }
        Ok(())
    }
}

struct ScriptedSession {
    id: String,
    ctx: SessionContext,
    runs: HashMap<String, tokio::task::JoinHandle<()>>,
    store: Arc<Mutex<HashMap<String, Stored>>>,
    configured: Arc<Mutex<Vec<(String, JsonObject)>>>,
    rewinds: bool,
    watched: Arc<tokio::sync::watch::Sender<Vec<String>>>,
}

#[async_trait]
impl Session for ScriptedSession {
    fn backend_id(&self) -> String {
        self.id.clone()
    }

    fn watched(&mut self) {
        let id = self.id.clone();
        self.watched.send_modify(|calls| calls.push(id));
    }

    fn begin(&mut self, turn: TurnRequest) {
        assert!(
            turn.message.text != "panic",
            "the scripted agent panics on request"
        );
        let ctx = self.ctx.clone();
        let id = turn.turn_id.clone();
        if let Ok(mut s) = self.store.lock() {
            let stored = s.entry(self.id.clone()).or_insert_with(|| Stored {
                title: crate::util::title_from(&turn.message.text),
                turns: Vec::new(),
            });
            // The transcript keeps each turn's message, stored as it begins (not its reply),
            // so a conversation read back after a restart has its turns.
            if !stored.turns.iter().any(|t| t.id == turn.turn_id) {
                stored.turns.push(Turn {
                    id: turn.turn_id.clone(),
                    started_at: Some(crate::util::now_iso()),
                    duration: Some(1),
                    message: turn.message.clone(),
                    response_parts: Vec::new(),
                    usage: None,
                    state: TurnState::Complete,
                });
            }
        }
        let h = tokio::spawn(run_script(ctx, turn.turn_id, turn.message.text, false));
        self.runs.insert(id, h);
    }

    fn cancel(&mut self, turn_id: &str) {
        if let Some(h) = self.runs.remove(turn_id) {
            h.abort();
        }
    }

    fn configure(&mut self, changes: &JsonObject) -> Result<(), Refusal> {
        if let Ok(mut c) = self.configured.lock() {
            c.push((self.id.clone(), changes.clone()));
        }
        Ok(())
    }

    fn rewind(&mut self, turn_id: Option<&str>) -> Result<(), Refusal> {
        if !self.rewinds {
            return Err(Refusal::new("this agent cannot rewind a conversation"));
        }
        let mut store = self.store.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(stored) = store.get_mut(&self.id) {
            let keep = match turn_id {
                Some(t) => match stored.turns.iter().position(|x| x.id == t) {
                    Some(i) => i + 1,
                    None => return Err(Refusal::new(format!("no stored turn {t}"))),
                },
                None => 0,
            };
            stored.turns.truncate(keep);
        }
        Ok(())
    }

    fn fork_point(&self, turn_id: &str) -> Option<ForkPoint> {
        Some(ForkPoint {
            turn_id: turn_id.to_owned(),
            data: serde_json::json!({"conversation": self.id}),
        })
    }

    fn resume_turn(&mut self, turn_id: &str) -> Result<(), Refusal> {
        let h = tokio::spawn(run_script(
            self.ctx.clone(),
            turn_id.to_owned(),
            "resumed".into(),
            true,
        ));
        self.runs.insert(turn_id.to_owned(), h);
        Ok(())
    }

    async fn close(&mut self) {
        for (_, h) in self.runs.drain() {
            h.abort();
        }
    }
}
