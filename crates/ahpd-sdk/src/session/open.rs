//! Starting session tasks: for `createSession`, and for a past conversation opened from the
//! catalogue by subscribing to it. Also disposal, which removes a session everywhere.

use std::collections::HashMap;
use std::sync::Arc;

use ahp_types::commands::CreateSessionParams;
use ahp_types::notifications::SessionRemovedParams;
use ahp_types::state::*;
use tokio::sync::{mpsc, oneshot};

use crate::agent::Agent;
use crate::channels::root;
use crate::error::{RpcError, codes};
use crate::inner::HostInner;
use crate::session::actor::Actor;
use crate::session::context::SharedSessionView;
use crate::session::reduce::{chat_summary_of, empty_chat};
use crate::session::{ConnRef, MAILBOX, SessionEntry, SessionMsg, backend_id_of};
use crate::store::sessionstore::SessionRecord;
use crate::util;

struct Init {
    uri: String,
    agent: Arc<dyn Agent>,
    backend_id: String,
    title: String,
    status: u32,
    lifecycle: SessionLifecycle,
    config: SessionConfigState,
    working_directories: Option<Vec<String>>,
    working_directory: Option<std::path::PathBuf>,
    created_at: String,
    turns: Vec<Turn>,
    resume: bool,
    ready: bool,
    /// The title is a client's choice (remembered), so the agent's titles do not replace it.
    title_locked: bool,
    /// `(machine, inner provider)` of a session whose conversation lives in a machine.
    nested: Option<(String, String)>,
}

/// The session's state as its task starts: the chat's summary, the configuration and the
/// lifecycle it opens with, nothing else yet.
fn first_state(init: &Init, provider: &str, chat: &ChatState, default_chat: &str) -> SessionState {
    SessionState {
        provider: provider.to_owned(),
        title: init.title.clone(),
        status: init.status,
        activity: None,
        origin: None,
        project: None,
        working_directories: init.working_directories.clone(),
        annotations: None,
        lifecycle: init.lifecycle.clone(),
        creation_error: None,
        server_tools: None,
        active_clients: Vec::new(),
        chats: vec![chat_summary_of(chat)],
        default_chat: Some(default_chat.to_owned()),
        config: Some(init.config.clone()),
        customizations: None,
        changesets: None,
        input_needed: None,
        meta: None,
    }
}

/// Build the actor, register it, and start its task. Fails when the URI is taken.
// Long: the actor and its default chat are built and registered under one registry lock, so no
// one sees the session half made.
fn spawn(inner: &Arc<HostInner>, mut init: Init) -> Result<mpsc::Sender<SessionMsg>, RpcError> {
    let mut reg = inner.registry.lock().unwrap_or_else(|p| p.into_inner());
    if reg.sessions.contains_key(&init.uri) {
        return Err(RpcError::new(
            codes::SESSION_ALREADY_EXISTS,
            format!("a session already exists at {}", init.uri),
        ));
    }
    let (tx, rx) = mpsc::channel(MAILBOX);
    let (btx, brx) = mpsc::unbounded_channel();
    let default_chat = util::default_chat_uri(&init.uri);
    let view = Arc::new(SharedSessionView {
        credentials: inner.credentials.clone(),
        nested: std::sync::Mutex::new(init.nested.take()),
        ..SharedSessionView::default()
    });
    let descriptor = init.agent.descriptor();
    let mut chat_state = empty_chat(&default_chat, &init.title);
    if let Some(last) = init.turns.last() {
        chat_state.modified_at = last
            .started_at
            .clone()
            .unwrap_or_else(|| init.created_at.clone());
    }
    let page = inner.options.turns_page.max(1);
    let mut turns = std::mem::take(&mut init.turns);
    let loaded = turns.split_off(turns.len().saturating_sub(page));
    chat_state.turns = loaded;
    let state = first_state(&init, &descriptor.provider, &chat_state, &default_chat);
    if let Ok(mut s) = view.settings.lock() {
        *s = init.config.values.clone();
    }
    let mut actor = Actor {
        inner: inner.clone(),
        uri: Arc::from(init.uri.as_str()),
        agent: init.agent,
        state,
        chats: HashMap::new(),
        default_chat: Arc::from(default_chat.as_str()),
        view,
        backend_tx: btx,
        self_tx: tx.downgrade(),
        asks: crate::session::asks::Asks::default(),
        title_locked: init.title_locked,
        created_at: init.created_at,
        working_directory: init.working_directory,
        start_reply: None,
        saved_permission_mode: None,
        catalogue: None,
        closed: false,
        parked: Default::default(),
    };
    let mut chat = actor.new_chat(
        &default_chat,
        chat_state,
        init.backend_id.clone(),
        init.resume,
    );
    if !turns.is_empty() {
        let cursor = uuid::Uuid::new_v4().to_string();
        chat.cursors.insert(cursor.clone(), false);
        chat.state.turns_next_cursor = Some(cursor);
        chat.older = turns;
    }
    actor.chats.insert(chat.uri.clone(), chat);
    if init.ready {
        actor.catalogue = Some(actor.summary());
    }
    reg.sessions.insert(
        init.uri.clone(),
        SessionEntry {
            tx: tx.clone(),
            provider: descriptor.provider,
            backend_id: init.backend_id,
            summary: actor.catalogue.clone(),
            unloadable: init.ready,
            used: std::sync::Mutex::new(std::time::Instant::now()),
        },
    );
    reg.chats.insert(default_chat, init.uri);
    drop(reg);
    tokio::spawn(actor.run(rx, brx));
    Ok(tx)
}

/// `createSession`; resolves when the backend answered.
pub(crate) async fn create(
    inner: &Arc<HostInner>,
    conn: ConnRef,
    p: CreateSessionParams,
) -> Result<(), RpcError> {
    let uri = p.channel.clone();
    let scheme = uri.split_once(':').map(|(s, _)| s).unwrap_or("");
    if scheme.is_empty()
        || scheme.contains('/')
        || scheme == "ahp-root"
        || scheme == "ahp-chat"
        || scheme.starts_with("x-")
    {
        return Err(RpcError::invalid_params(format!(
            "{uri} cannot name a session: use <scheme>:<id> with a scheme other than ahp-root, ahp-chat or x-"
        )));
    }
    let agent = inner
        .agent(p.provider.as_deref())
        .ok_or_else(|| match &p.provider {
            Some(name) => RpcError::new(
                codes::PROVIDER_NOT_FOUND,
                format!("no agent has the provider id {name}"),
            ),
            None => RpcError::new(codes::PROVIDER_NOT_FOUND, "this host has no agents"),
        })?;
    let dirs = p.working_directories.clone().unwrap_or_default();
    let mut paths = Vec::new();
    for d in &dirs {
        paths.push(util::path_of(d).ok_or_else(|| {
            RpcError::invalid_params(format!("workingDirectories: {d} is not a file: URI"))
        })?);
    }
    let working_directory = paths.first().cloned();
    let (schema, values) = crate::session::config::resolve(
        agent.as_ref(),
        working_directory.as_deref(),
        p.config.as_ref(),
    )?;
    let title = format!("{} session", agent.descriptor().display_name);
    let init = Init {
        backend_id: backend_id_of(&uri).unwrap_or_default(),
        uri: uri.clone(),
        agent,
        title,
        status: SessionStatus::Idle.bits(),
        lifecycle: SessionLifecycle::Creating,
        config: SessionConfigState { schema, values },
        working_directories: (!dirs.is_empty()).then_some(dirs),
        working_directory,
        created_at: util::now_iso(),
        turns: Vec::new(),
        resume: false,
        ready: false,
        title_locked: false,
        nested: None,
    };
    let tx = spawn(inner, init)?;
    let (reply, rx) = oneshot::channel();
    tx.send(SessionMsg::Start {
        conn,
        active_client: p.active_client,
        progress: p.progress_token,
        reply,
    })
    .await
    .map_err(|_| RpcError::internal("the session stopped while starting"))?;
    let result = rx
        .await
        .map_err(|_| RpcError::internal("the session stopped while starting"))?;
    match &result {
        Ok(()) => {
            tracing::info!(session = %uri, "session created");
            crate::session::unload::soon(inner);
        }
        Err(e) => tracing::info!(session = %uri, error = %e.message, "session creation failed"),
    }
    result
}

/// The answer when the session is already live: its URI when spelled the same, a refusal
/// naming the live URI when spelled another way.
fn live_spelling(
    inner: &HostInner,
    channel: &str,
    session_uri: &str,
    scheme: &str,
    id: &str,
) -> Option<Result<String, RpcError>> {
    let reg = inner.registry.lock().unwrap_or_else(|p| p.into_inner());
    if reg.sessions.contains_key(session_uri) {
        return Some(Ok(session_uri.to_owned()));
    }
    if let Some((live, _)) = reg
        .sessions
        .iter()
        .find(|(_, e)| e.backend_id == id && (scheme == "ahp-session" || e.provider == scheme))
    {
        return Some(
            Err(RpcError::session_not_found(channel)
                .with_data(serde_json::json!({"liveUri": live})))
            .map_err(|e| RpcError {
                message: format!("{channel} is open as {live}; use that URI"),
                ..e
            }),
        );
    }
    None
}

/// A remembered session's status flags; idle with none when nothing is remembered.
fn status_of(record: Option<&SessionRecord>) -> u32 {
    let mut status = SessionStatus::Idle.bits();
    if let Some(r) = record {
        if r.is_read {
            status |= SessionStatus::IsRead.bits();
        }
        if r.is_archived {
            status |= SessionStatus::IsArchived.bits();
        }
    }
    status
}

/// Open a past conversation named by a session URI (or a default chat URI of one). Returns
/// the live channel URI it opened under; `-32001` when nothing answers to it.
// Long: the store's record, the agent's row and its transcript meet here to make one session;
// each piece is read once.
pub(crate) async fn open_past(inner: &Arc<HostInner>, channel: &str) -> Result<String, RpcError> {
    let session_uri =
        crate::session::default_chat_owner(channel).unwrap_or_else(|| channel.to_owned());
    let Some((scheme, _)) = session_uri.split_once(':') else {
        return Err(RpcError::session_not_found(channel));
    };
    // A spelling the store remembers names its provider and conversation whatever its scheme.
    let remembered = inner.store.as_ref().and_then(|s| s.get(&session_uri));
    let scheme = remembered
        .as_ref()
        .map(|r| r.provider.as_str())
        .unwrap_or(scheme);
    let id = match &remembered {
        Some(r) => r.backend_id.clone(),
        None => backend_id_of(&session_uri).unwrap_or_default(),
    };
    if id.is_empty() {
        return Err(RpcError::session_not_found(channel));
    }
    if let Some(live) = live_spelling(inner, channel, &session_uri, scheme, &id) {
        return live;
    }
    let agents = inner.agents();
    let candidates: Vec<_> = if scheme == "ahp-session" {
        agents
    } else {
        agents
            .into_iter()
            .filter(|a| a.descriptor().provider == scheme)
            .collect()
    };
    for agent in candidates {
        let provider = agent.descriptor().provider;
        let record = remembered
            .clone()
            .or_else(|| inner.store.as_ref().and_then(|s| s.by_id(&provider, &id)));
        // A session in a machine is known by its record: its agent here never held it.
        let found = match record.as_ref().and_then(SessionRecord::nested_row) {
            Some(row) => Some(row),
            None => agent.find(&id).await,
        };
        let Some(row) = found else {
            continue;
        };
        let turns = agent.transcript(&id).await.unwrap_or_default();
        let mut dirs = row.working_directories.clone();
        if dirs.is_empty()
            && let Some(r) = &record
        {
            dirs = r.working_directories.clone();
        }
        let dir = dirs.first().and_then(|d| util::path_of(d));
        let config = match record.as_ref().map(|r| &r.config) {
            Some(values) => {
                crate::session::config::resolve(agent.as_ref(), dir.as_deref(), Some(values))
                    .or_else(|e| {
                        // A session in a machine never falls back to this host's defaults: it
                        // would run here (no computer plugin now, say).
                        if record.as_ref().is_some_and(|r| r.nested.is_some()) {
                            return Err(e);
                        }
                        tracing::warn!(
                            session = %session_uri,
                            "the remembered configuration is refused now ({}); using the defaults",
                            e.message
                        );
                        crate::session::config::resolve(agent.as_ref(), dir.as_deref(), None)
                    })?
            }
            None => crate::session::config::resolve(agent.as_ref(), dir.as_deref(), None)?,
        };
        let (schema, values) = config;
        let status = status_of(record.as_ref());
        let chosen = record.as_ref().and_then(|r| r.title.clone());
        let looker = agent.clone();
        let init = Init {
            uri: session_uri.clone(),
            backend_id: id.clone(),
            title_locked: chosen.is_some(),
            title: chosen.unwrap_or_else(|| row.title.clone()),
            status,
            lifecycle: SessionLifecycle::Ready,
            config: SessionConfigState { schema, values },
            working_directories: (!dirs.is_empty()).then_some(dirs),
            working_directory: dir,
            created_at: record
                .as_ref()
                .map(|r| r.created_at.clone())
                .unwrap_or_else(|| row.created_at.clone()),
            turns,
            resume: true,
            ready: true,
            nested: record
                .as_ref()
                .and_then(|r| r.nested.as_ref())
                .map(|n| (n.machine.clone(), n.inner_provider.clone())),
            agent,
        };
        return match spawn(inner, init) {
            Ok(tx) => {
                tracing::info!(session = %session_uri, "session opened from the store");
                if inner.options.take_up_unfinished {
                    open_if_unfinished(looker, id.clone(), tx);
                }
                crate::session::unload::soon(inner);
                Ok(session_uri)
            }
            // Opened meanwhile by another request: use it.
            Err(e) if e.code == codes::SESSION_ALREADY_EXISTS => Ok(session_uri),
            Err(e) => Err(e),
        };
    }
    Err(RpcError::session_not_found(channel))
}

/// Asks the agent, beside the request that opened the session, whether the conversation holds
/// unfinished work, and opens its backend when it does: the answer to the client does not wait
/// on the engine, and what the backend shows arrives as actions after the snapshot.
fn open_if_unfinished(agent: Arc<dyn Agent>, id: String, tx: mpsc::Sender<SessionMsg>) {
    tokio::spawn(async move {
        if agent.unfinished(&id).await {
            let _ = tx.send(SessionMsg::OpenBackend).await;
        }
    });
}

/// `disposeSession`.
pub(crate) async fn dispose(inner: &Arc<HostInner>, uri: &str) -> Result<(), RpcError> {
    let entry = {
        let mut reg = inner.registry.lock().unwrap_or_else(|p| p.into_inner());
        match reg.sessions.remove(uri) {
            Some(e) => {
                reg.chats.retain(|_, s| s != uri);
                Some(e)
            }
            None => None,
        }
    };
    let (provider, backend_id, was_live) = match entry {
        Some(e) => {
            let (reply, rx) = oneshot::channel();
            if e.tx.send(SessionMsg::Dispose { reply }).await.is_ok() {
                let _ = rx.await;
            }
            (e.provider, e.backend_id, e.summary.is_some())
        }
        None => {
            // A past session from the catalogue, under a remembered spelling or
            // `<provider>:/<id>`.
            let remembered = inner.store.as_ref().and_then(|s| s.get(uri));
            let nested = remembered.as_ref().is_some_and(|r| r.nested.is_some());
            let (scheme, id) = match remembered {
                Some(r) => (r.provider, r.backend_id),
                None => (
                    uri.split_once(':')
                        .map(|(s, _)| s.to_owned())
                        .unwrap_or_default(),
                    backend_id_of(uri).unwrap_or_default(),
                ),
            };
            let agent = inner
                .agent(Some(&scheme))
                .ok_or_else(|| RpcError::session_not_found(uri))?;
            if !nested && agent.find(&id).await.is_none() {
                return Err(RpcError::session_not_found(uri));
            }
            (scheme, id, false)
        }
    };
    if let Some(agent) = inner.agent(Some(&provider)) {
        match agent.delete(&backend_id).await {
            Ok(()) | Err(crate::agent::AgentError::Unsupported) => {}
            Err(e) => {
                return Err(RpcError::internal(format!(
                    "the agent could not delete the conversation: {e}"
                )));
            }
        }
    }
    if let Some(store) = &inner.store {
        store.forget(uri);
        store.forget_id(&provider, &backend_id);
    }
    let removed = SessionRemovedParams {
        channel: root::ROOT.to_owned(),
        session: uri.to_owned(),
    };
    if let Ok(v) = serde_json::to_value(&removed) {
        inner.hub.notify(root::ROOT, "root/sessionRemoved", &v);
    }
    if was_live {
        let count = inner.registry.lock().map(|r| r.live_count()).unwrap_or(0);
        root::publish_active_sessions(inner, count);
    }
    tracing::info!(session = %uri, "session disposed");
    Ok(())
}
