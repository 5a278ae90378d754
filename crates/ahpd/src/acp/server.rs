//! The ACP side: the agent's capabilities, and one callback per request that hands its work to
//! a task (or to the session's own task) and returns, so the dispatch loop is never held.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, AuthenticateRequest, AuthenticateResponse, AvailableCommand,
    AvailableCommandsUpdate, CancelNotification, CloseSessionRequest, CloseSessionResponse,
    Implementation, InitializeRequest, InitializeResponse, ListSessionsRequest, LoadSessionRequest,
    LoadSessionResponse, McpServer, NewSessionRequest, NewSessionResponse, PromptCapabilities,
    PromptRequest, PromptResponse, ResumeSessionRequest, ResumeSessionResponse,
    SessionCapabilities, SessionCloseCapabilities, SessionConfigOptionValue,
    SessionListCapabilities, SessionNotification, SessionResumeCapabilities, SessionUpdate,
    SetSessionConfigOptionRequest, SetSessionConfigOptionResponse, SetSessionModeRequest,
    SetSessionModeResponse,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Agent, Client, Error, ErrorCode, Stdio};
use ahp_types::state::SessionModelInfo;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::session::{self, Cmd, Context, Handle};
use super::settings;
use super::updates::{self, Shown};
use super::{Link, folder_uri, listing, uri_path};
use crate::term::Conn;
use crate::term::conversation::Conversation;

/// The engine new sessions use when `--agent` names none and the host offers it.
const DEFAULT_PROVIDER: &str = "cofold";

/// The longest a first session waits for an in-process host's model catalogues; each agent
/// bounds its own probe too, so this only guards against one that does not.
const CATALOGUE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

fn failed(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::INTERNAL_ERROR, message.into())
}

fn refused(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::INVALID_PARAMS, message.into())
}

/// What every request shares: the host link, the sessions open on this connection, and what
/// the editor said it can do.
pub(crate) struct Bridge {
    link: Arc<Link>,
    agent: Option<String>,
    cwd: PathBuf,
    sessions: Mutex<HashMap<String, Handle>>,
    elicitation: AtomicBool,
}

/// How an existing session is opened.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Opening {
    /// `session/load`: the conversation so far is sent first.
    Load,
    /// `session/resume` (and a prompt to a session not opened yet): nothing is sent.
    Resume,
}

impl Bridge {
    pub(crate) fn new(link: Arc<Link>, agent: Option<String>, cwd: PathBuf) -> Bridge {
        Bridge {
            link,
            agent,
            cwd,
            sessions: Mutex::new(HashMap::new()),
            elicitation: AtomicBool::new(false),
        }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Handle>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(&self, id: &str, cmd: Cmd) -> Result<(), Cmd> {
        match self.sessions().get(id) {
            Some(h) => h.tx.send(cmd).map_err(|e| e.0),
            None => Err(cmd),
        }
    }

    /// Ends every session's task, answering what they still owe the editor.
    pub(crate) async fn close_all(&self) {
        let handles: Vec<Handle> = self.sessions().drain().map(|(_, h)| h).collect();
        for h in handles {
            let (done, wait) = oneshot::channel();
            if h.tx.send(Cmd::Close(done)).is_ok() {
                let _ = wait.await;
            }
            let _ = h.task.await;
        }
    }

    async fn conn(&self) -> Result<Arc<Conn>, Error> {
        self.link.conn().await.map_err(failed)
    }

    /// The provider of new sessions: `--agent`, else cofold, else the first agent offered.
    fn provider(&self, conn: &Conn) -> Result<String, Error> {
        let agents = &conn.root.agents;
        let found = match &self.agent {
            Some(want) => agents
                .iter()
                .find(|a| a.provider == *want)
                .or_else(|| agents.iter().find(|a| a.display_name == *want)),
            None => agents
                .iter()
                .find(|a| a.provider == DEFAULT_PROVIDER)
                .or_else(|| agents.first()),
        };
        match found {
            Some(a) => Ok(a.provider.clone()),
            None => {
                let offered: Vec<&str> = agents.iter().map(|a| a.provider.as_str()).collect();
                Err(failed(match &self.agent {
                    Some(want) => format!(
                        "--agent {want}: the host at {} offers no such agent (it offers {})",
                        conn.place,
                        if offered.is_empty() {
                            "none".to_owned()
                        } else {
                            offered.join(", ")
                        }
                    ),
                    None => format!(
                        "the host at {} offers no agent: enable one with ahpd plugin enable @ahpd/agent-cofold",
                        conn.place
                    ),
                }))
            }
        }
    }

    /// The agent's model catalogue as the root shows it now: an agent probes its endpoints
    /// after the host starts, so the root the connection began with may not list them yet.
    async fn models(conn: &Conn, provider: &str) -> Vec<SessionModelInfo> {
        conn.catalogues_read(CATALOGUE_WAIT).await;
        let fresh: Option<ahp_types::commands::SubscribeResult> = conn
            .client
            .request(
                "subscribe",
                json!({ "channel": ahp_types::ROOT_RESOURCE_URI }),
            )
            .await
            .ok();
        let agents = match fresh.and_then(|r| r.snapshot).map(|s| s.state) {
            Some(ahp_types::state::SnapshotState::Root(root)) => root.agents,
            _ => conn.root.agents.clone(),
        };
        agents
            .into_iter()
            .find(|a| a.provider == provider)
            .map(|a| a.models)
            .unwrap_or_default()
    }

    fn context(
        &self,
        conn: &Arc<Conn>,
        models: Vec<SessionModelInfo>,
        cx: &ConnectionTo<Client>,
    ) -> Context {
        Context {
            conn: conn.clone(),
            cx: cx.clone(),
            models,
            elicitation: self.elicitation.load(Ordering::SeqCst),
        }
    }

    /// Says why the editor's MCP servers do not reach the session, once per session.
    fn mcp_notice(servers: &[McpServer]) {
        if servers.is_empty() {
            return;
        }
        let names: Vec<String> = servers
            .iter()
            .filter_map(|s| {
                serde_json::to_value(s)
                    .ok()?
                    .get("name")?
                    .as_str()
                    .map(str::to_owned)
            })
            .collect();
        eprintln!(
            "ahpd acp: the editor's MCP servers ({}) are not given to the session: its agent runs the MCP servers of the daemon's configuration (mcpServers) and of its agent record",
            names.join(", ")
        );
    }

    async fn new_session(
        &self,
        req: NewSessionRequest,
        cx: &ConnectionTo<Client>,
    ) -> Result<NewSessionResponse, Error> {
        if !req.cwd.is_absolute() {
            return Err(refused(format!(
                "cwd {} is not an absolute path",
                req.cwd.display()
            )));
        }
        if !req.cwd.is_dir() {
            return Err(refused(format!(
                "cwd {} is not an existing folder",
                req.cwd.display()
            )));
        }
        let conn = self.conn().await?;
        let provider = self.provider(&conn)?;
        Self::mcp_notice(&req.mcp_servers);
        let uri = format!("{provider}:/{}", uuid::Uuid::new_v4());
        let mut dirs = vec![folder_uri(&req.cwd)];
        for d in &req.additional_directories {
            if !d.is_absolute() {
                return Err(refused(format!(
                    "additional directory {} is not an absolute path",
                    d.display()
                )));
            }
            dirs.push(folder_uri(d));
        }
        let params = json!({ "channel": uri, "provider": provider, "workingDirectories": dirs });
        let _: Value = conn
            .client
            .request("createSession", params)
            .await
            .map_err(|e| failed(format!("cannot create a session: {e}")))?;
        let conv = Conversation::open(&conn, &uri)
            .await
            .map_err(|e| failed(e.to_string()))?;
        let models = Self::models(&conn, &provider).await;
        let found = settings::settings(&conv.session_state, &models);
        let response = NewSessionResponse::new(uri.clone())
            .config_options(Some(settings::options(&found)))
            .modes(settings::modes(&found));
        let ctx = self.context(&conn, models, cx);
        self.keep(uri, session::start(ctx, conv, req.cwd));
        Ok(response)
    }

    fn keep(&self, id: String, handle: Handle) {
        let old = self.sessions().insert(id, handle);
        if let Some(old) = old {
            // Opened twice at once: the first task goes, the editor follows the second.
            old.task.abort();
        }
    }

    /// Opens a stored or live session for this editor; `Load` sends its turns first.
    async fn open(
        &self,
        id: &str,
        cwd: &Path,
        how: Opening,
        cx: &ConnectionTo<Client>,
    ) -> Result<Vec<settings::Setting>, Error> {
        let open = self.sessions().get(id).map(|h| h.tx.clone());
        if how == Opening::Resume
            && let Some(tx) = open
        {
            // Already followed here: nothing to reopen.
            let (reply, rx) = oneshot::channel();
            if tx.send(Cmd::Settings(reply)).is_ok()
                && let Ok(found) = rx.await
            {
                return Ok(found);
            }
        }
        let conn = self.conn().await?;
        let mut conv = Conversation::open(&conn, id).await.map_err(|e| match e {
            crate::commands::CommandError::Usage(m) => Error::new(ErrorCode::RESOURCE_NOT_FOUND, m),
            other => failed(other.to_string()),
        })?;
        let provider = conv.session_state.provider.clone();
        let dir = conv
            .session_state
            .working_directories
            .as_ref()
            .and_then(|d| d.first())
            .and_then(|u| uri_path(u))
            .unwrap_or_else(|| cwd.to_path_buf());
        if how == Opening::Load {
            if conv.chat_state.turns_next_cursor.is_some() {
                conv = Self::every_turn(&conn, conv).await?;
            }
            Self::replay(&conv, id, &dir, cx);
        }
        let models = Self::models(&conn, &provider).await;
        let found = settings::settings(&conv.session_state, &models);
        let ctx = self.context(&conn, models, cx);
        // A session already open here is followed by the new task alone.
        if let Some(old) = self.sessions().remove(id) {
            old.task.abort();
        }
        self.keep(id.to_owned(), session::start(ctx, conv, dir));
        Ok(found)
    }

    /// The conversation with its older pages of turns loaded too, for a replay of all of it.
    async fn every_turn(conn: &Conn, conv: Conversation) -> Result<Conversation, Error> {
        let mut cursor = conv.chat_state.turns_next_cursor.clone();
        while let Some(c) = cursor {
            let _: Value = conn
                .client
                .request("fetchTurns", json!({ "channel": conv.chat, "cursor": c }))
                .await
                .map_err(|e| failed(format!("cannot read the older turns: {e}")))?;
            // A fresh snapshot holds what the fetch loaded.
            let again = Conversation::open(conn, &conv.session)
                .await
                .map_err(|e| failed(e.to_string()))?;
            let next = again.chat_state.turns_next_cursor.clone();
            if next.as_deref() == Some(c.as_str()) {
                return Ok(again);
            }
            cursor = next;
            if cursor.is_none() {
                return Ok(again);
            }
        }
        Ok(conv)
    }

    /// Sends the stored conversation to the editor, turn by turn, as `session/load` asks.
    fn replay(conv: &Conversation, id: &str, dir: &Path, cx: &ConnectionTo<Client>) {
        let send = |u: SessionUpdate| {
            let _ = cx.send_notification(SessionNotification::new(id.to_owned(), u));
        };
        for turn in &conv.chat_state.turns {
            for u in updates::user_message(&turn.message) {
                send(u);
            }
            for u in Shown::default().advance(&turn.response_parts, dir) {
                send(u);
            }
        }
        if let Some(turn) = &conv.chat_state.active_turn {
            for u in updates::user_message(&turn.message) {
                send(u);
            }
        }
    }

    /// The slash commands the session's agent completes, for the editor's command menu.
    async fn commands(&self, id: &str) -> Vec<AvailableCommand> {
        let Ok(conn) = self.conn().await else {
            return Vec::new();
        };
        let chat = ahpd_sdk::util::default_chat_uri(id);
        let params = json!({ "channel": chat, "kind": "userMessage", "text": "/", "offset": 1 });
        let Ok(result) = conn
            .client
            .request::<_, ahp_types::commands::CompletionsResult>("completions", params)
            .await
        else {
            return Vec::new();
        };
        result
            .items
            .iter()
            .filter_map(|item| {
                let name = item.insert_text.trim().strip_prefix('/')?.trim();
                if name.is_empty() || name.contains(char::is_whitespace) {
                    return None;
                }
                let label = match &item.attachment {
                    ahp_types::state::MessageAttachment::Simple(s) => s.label.clone(),
                    ahp_types::state::MessageAttachment::Resource(r) => r.label.clone(),
                    ahp_types::state::MessageAttachment::EmbeddedResource(e) => e.label.clone(),
                    _ => String::new(),
                };
                Some(AvailableCommand::new(name, label))
            })
            .collect()
    }

    fn announce_commands(self: &Arc<Self>, id: String, cx: ConnectionTo<Client>) {
        let bridge = self.clone();
        tokio::spawn(async move {
            let commands = bridge.commands(&id).await;
            let _ = cx.send_notification(SessionNotification::new(
                id,
                SessionUpdate::AvailableCommandsUpdate(AvailableCommandsUpdate::new(commands)),
            ));
        });
    }

    async fn configure(
        &self,
        id: &str,
        config: &str,
        value: &SessionConfigOptionValue,
    ) -> Result<Vec<agent_client_protocol::v1::schema::SessionConfigOption>, Error> {
        let (tx, rx) = oneshot::channel();
        self.send(id, Cmd::Settings(tx)).map_err(|_| not_open(id))?;
        let found = rx.await.map_err(|_| failed("the session ended"))?;
        let (key, value) = settings::choose(&found, config, value).map_err(refused)?;
        let (tx, rx) = oneshot::channel();
        self.send(
            id,
            Cmd::Configure {
                key,
                value,
                reply: tx,
            },
        )
        .map_err(|_| not_open(id))?;
        rx.await
            .map_err(|_| failed("the session ended"))?
            .map_err(failed)
    }
}

fn not_open(id: &str) -> Error {
    Error::new(
        ErrorCode::RESOURCE_NOT_FOUND,
        format!("no session {id} is open here: open it with session/load or session/resume"),
    )
}

fn capabilities() -> AgentCapabilities {
    AgentCapabilities::new()
        .load_session(true)
        .prompt_capabilities(PromptCapabilities::new().image(true).embedded_context(true))
        .session_capabilities(
            SessionCapabilities::new()
                .list(SessionListCapabilities::new())
                .resume(SessionResumeCapabilities::new())
                .close(SessionCloseCapabilities::new()),
        )
}

/// Serves the editor on standard input and output until it closes them.
pub(crate) async fn serve(bridge: Arc<Bridge>) -> Result<(), Error> {
    let b = bridge.clone();
    let on_initialize = async move |req: InitializeRequest,
                                    responder: Responder<InitializeResponse>,
                                    _cx: ConnectionTo<Client>| {
        let form = req
            .client_capabilities
            .elicitation
            .as_ref()
            .is_some_and(|e| e.form.is_some());
        b.elicitation.store(form, Ordering::SeqCst);
        responder.respond(
            InitializeResponse::new(ProtocolVersion::V1)
                .agent_capabilities(capabilities())
                .agent_info(
                    Implementation::new("ahpd", env!("CARGO_PKG_VERSION")).title("ahpd".to_owned()),
                ),
        )
    };
    let on_authenticate = async move |_req: AuthenticateRequest,
                                      responder: Responder<AuthenticateResponse>,
                                      _cx: ConnectionTo<Client>| {
        // No method is offered: the daemon's token is read from its configuration folder.
        responder.respond(AuthenticateResponse::new())
    };
    let b = bridge.clone();
    let on_new = async move |req: NewSessionRequest,
                             responder: Responder<NewSessionResponse>,
                             cx: ConnectionTo<Client>| {
        let b = b.clone();
        let task_cx = cx.clone();
        cx.spawn(async move {
            match b.new_session(req, &task_cx).await {
                Ok(resp) => {
                    let id = resp.session_id.to_string();
                    responder.respond(resp)?;
                    b.announce_commands(id, task_cx);
                    Ok(())
                }
                Err(e) => responder.respond_with_error(e),
            }
        })
    };
    let b = bridge.clone();
    let on_load = async move |req: LoadSessionRequest,
                              responder: Responder<LoadSessionResponse>,
                              cx: ConnectionTo<Client>| {
        let b = b.clone();
        let task_cx = cx.clone();
        cx.spawn(async move {
            Bridge::mcp_notice(&req.mcp_servers);
            let id = req.session_id.to_string();
            match b.open(&id, &req.cwd, Opening::Load, &task_cx).await {
                Ok(found) => {
                    responder.respond(
                        LoadSessionResponse::new()
                            .config_options(Some(settings::options(&found)))
                            .modes(settings::modes(&found)),
                    )?;
                    b.announce_commands(id, task_cx);
                    Ok(())
                }
                Err(e) => responder.respond_with_error(e),
            }
        })
    };
    let b = bridge.clone();
    let on_resume = async move |req: ResumeSessionRequest,
                                responder: Responder<ResumeSessionResponse>,
                                cx: ConnectionTo<Client>| {
        let b = b.clone();
        let task_cx = cx.clone();
        cx.spawn(async move {
            Bridge::mcp_notice(&req.mcp_servers);
            let id = req.session_id.to_string();
            match b.open(&id, &req.cwd, Opening::Resume, &task_cx).await {
                Ok(found) => {
                    responder.respond(
                        ResumeSessionResponse::new()
                            .config_options(Some(settings::options(&found)))
                            .modes(settings::modes(&found)),
                    )?;
                    b.announce_commands(id, task_cx);
                    Ok(())
                }
                Err(e) => responder.respond_with_error(e),
            }
        })
    };
    let b = bridge.clone();
    let on_list = async move |req: ListSessionsRequest,
                              responder: Responder<
        agent_client_protocol::v1::schema::ListSessionsResponse,
    >,
                              cx: ConnectionTo<Client>| {
        let b = b.clone();
        cx.spawn(async move {
            let conn = match b.conn().await {
                Ok(c) => c,
                Err(e) => return responder.respond_with_error(e),
            };
            match listing::page(&conn, req.cwd.as_deref(), req.cursor.as_deref()).await {
                Ok(page) => responder.respond(page),
                Err(e) => responder.respond_with_error(refused(e)),
            }
        })
    };
    let b = bridge.clone();
    let on_close = async move |req: CloseSessionRequest,
                               responder: Responder<CloseSessionResponse>,
                               cx: ConnectionTo<Client>| {
        let b = b.clone();
        cx.spawn(async move {
            let id = req.session_id.to_string();
            let Some(h) = b.sessions().remove(&id) else {
                return responder.respond_with_error(not_open(&id));
            };
            let (done, wait) = oneshot::channel();
            if h.tx.send(Cmd::Close(done)).is_ok() {
                let _ = wait.await;
            }
            responder.respond(CloseSessionResponse::new())
        })
    };
    let b = bridge.clone();
    let on_prompt = async move |req: PromptRequest,
                                responder: Responder<PromptResponse>,
                                cx: ConnectionTo<Client>| {
        let id = req.session_id.to_string();
        match b.send(&id, Cmd::Prompt(Box::new((req, responder)))) {
            Ok(()) => Ok(()),
            Err(Cmd::Prompt(prompt)) => {
                // A session this connection has not opened: resumed first, as an editor that
                // restarted and kept the id expects.
                let b = b.clone();
                let task_cx = cx.clone();
                let cwd = b.cwd.clone();
                cx.spawn(async move {
                    if let Err(e) = b.open(&id, &cwd, Opening::Resume, &task_cx).await {
                        let (_, responder) = *prompt;
                        return responder.respond_with_error(e);
                    }
                    match b.send(&id, Cmd::Prompt(prompt)) {
                        Ok(()) => Ok(()),
                        Err(Cmd::Prompt(prompt)) => {
                            let (_, responder) = *prompt;
                            responder.respond_with_error(not_open(&id))
                        }
                        Err(_) => Ok(()),
                    }
                })
            }
            Err(_) => Ok(()),
        }
    };
    let b = bridge.clone();
    let on_cancel = async move |n: CancelNotification, _cx: ConnectionTo<Client>| {
        let _ = b.send(&n.session_id.to_string(), Cmd::Cancel);
        Ok(())
    };
    let b = bridge.clone();
    let on_set_config = async move |req: SetSessionConfigOptionRequest,
                                    responder: Responder<SetSessionConfigOptionResponse>,
                                    cx: ConnectionTo<Client>| {
        let b = b.clone();
        cx.spawn(async move {
            let id = req.session_id.to_string();
            match b.configure(&id, &req.config_id.0, &req.value).await {
                Ok(options) => responder.respond(SetSessionConfigOptionResponse::new(options)),
                Err(e) => responder.respond_with_error(e),
            }
        })
    };
    let b = bridge.clone();
    let on_set_mode = async move |req: SetSessionModeRequest,
                                  responder: Responder<SetSessionModeResponse>,
                                  cx: ConnectionTo<Client>| {
        let b = b.clone();
        cx.spawn(async move {
            let id = req.session_id.to_string();
            let value = SessionConfigOptionValue::value_id(req.mode_id.0.to_string());
            match b.configure(&id, "mode", &value).await {
                Ok(_) => responder.respond(SetSessionModeResponse::new()),
                Err(e) => responder.respond_with_error(e),
            }
        })
    };
    Agent
        .v1()
        .name("ahpd")
        .on_receive_request(on_initialize, agent_client_protocol::on_receive_request!())
        .on_receive_request(
            on_authenticate,
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(on_new, agent_client_protocol::on_receive_request!())
        .on_receive_request(on_load, agent_client_protocol::on_receive_request!())
        .on_receive_request(on_resume, agent_client_protocol::on_receive_request!())
        .on_receive_request(on_list, agent_client_protocol::on_receive_request!())
        .on_receive_request(on_close, agent_client_protocol::on_receive_request!())
        .on_receive_request(on_prompt, agent_client_protocol::on_receive_request!())
        .on_receive_request(on_set_config, agent_client_protocol::on_receive_request!())
        .on_receive_request(on_set_mode, agent_client_protocol::on_receive_request!())
        .on_receive_notification(on_cancel, agent_client_protocol::on_receive_notification!())
        .connect_to(Stdio::new())
        .await
}
