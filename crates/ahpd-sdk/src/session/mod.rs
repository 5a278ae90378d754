//! The session registry and the messages the rest of the host sends to a session's task.
//! One task per AHP session owns its `SessionState`, every `ChatState` of it and the chats'
//! backend objects (see `actor`).
//!
//! This folder is the session layer: the task that owns one session (`actor`), what it keeps
//! beside the protocol state (asks, held and parked dispatches, turn bookkeeping, coalescing),
//! how backends talk to it (`context`, `exchange`, `backend`), how sessions start, live and are
//! unloaded (`open`, `lifecycle`, `unload`), and what a session shows outside its own channels
//! (`summary`). It may use the backend contract (`agent`), the fan-out (`channels`), the
//! stores (`store`) and machines (`nested`); it never names a connection or a transport. The
//! handlers of clients' dispatches are methods on the actor too, but live in `protocol`.

pub(crate) mod actor;
pub(crate) mod asks;
pub(crate) mod backend;
pub(crate) mod changesets;
pub(crate) mod chats;
pub(crate) mod coalesce;
pub(crate) mod config;
pub(crate) mod context;
pub(crate) mod delivery;
pub(crate) mod exchange;
pub(crate) mod held;
pub(crate) mod lifecycle;
pub(crate) mod open;
pub(crate) mod parked;
pub(crate) mod reduce;
pub(crate) mod scopes;
pub(crate) mod summary;
pub(crate) mod turn_flow;
pub(crate) mod turns;
pub(crate) mod unload;

use std::collections::HashMap;
use std::sync::Arc;

use ahp_types::commands::{CompletionItem, CompletionsParams, CreateChatParams};
use ahp_types::state::{SessionActiveClient, SessionSummary, Snapshot};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::agent::{AgentError, Session};
use crate::error::RpcError;
use crate::util;

/// Mailbox size of a session task; a full mailbox slows only the client that fills it.
pub(crate) const MAILBOX: usize = 1024;

/// Who is talking to a session.
#[derive(Debug, Clone)]
pub(crate) struct ConnRef {
    pub id: u64,
    pub client_id: String,
}

pub(crate) enum SessionMsg {
    Start {
        conn: ConnRef,
        active_client: Option<SessionActiveClient>,
        progress: Option<String>,
        reply: oneshot::Sender<Result<(), RpcError>>,
    },
    Subscribe {
        conn: u64,
        channel: String,
        reply: oneshot::Sender<Result<Snapshot, RpcError>>,
    },
    Snapshot {
        channel: String,
        reply: oneshot::Sender<Option<Snapshot>>,
    },
    /// `invokeChangesetOperation` on one of the session's changesets.
    ChangesetOperation {
        params: Box<ahp_types::commands::InvokeChangesetOperationParams>,
        reply:
            oneshot::Sender<Result<ahp_types::commands::InvokeChangesetOperationResult, RpcError>>,
    },
    Dispatch {
        conn: ConnRef,
        channel: String,
        client_seq: i64,
        action: Value,
    },
    /// A connection stopped watching the session (unsubscribe, or a reconnect that left it out).
    Unsubscribed {
        client_id: String,
    },
    /// A client's grace period ended with no connection back.
    ClientGone {
        client_id: String,
    },
    CreateChat {
        conn: ConnRef,
        params: Box<CreateChatParams>,
        reply: oneshot::Sender<Result<(), RpcError>>,
    },
    DisposeChat {
        channel: String,
        reply: oneshot::Sender<Result<(), RpcError>>,
    },
    FetchTurns {
        channel: String,
        cursor: Option<String>,
        reply: oneshot::Sender<Result<(), RpcError>>,
    },
    Completions {
        params: Box<CompletionsParams>,
        reply: oneshot::Sender<Vec<CompletionItem>>,
    },
    Dispose {
        reply: oneshot::Sender<()>,
    },
    /// Close and leave the registry if nothing uses the session (see `unload`); answers
    /// whether it did.
    Unload {
        reply: oneshot::Sender<bool>,
    },
    /// Open the default chat's backend now, for the clients watching it (a stored conversation
    /// with unfinished work, see `Agent::unfinished`).
    OpenBackend,
    BackendReady {
        chat: Arc<str>,
        result: Result<Box<dyn Session>, AgentError>,
    },
    ClientToolTimeout {
        entry: String,
    },
}

/// A live session as the rest of the host sees it.
pub(crate) struct SessionEntry {
    pub tx: mpsc::Sender<SessionMsg>,
    pub provider: String,
    pub backend_id: String,
    /// The catalogue row, once the session is ready.
    pub summary: Option<SessionSummary>,
    /// Opened from the store, or failed to start: unloaded when unused (see `unload`).
    pub unloadable: bool,
    /// When a client last reached it through the registry.
    pub used: std::sync::Mutex<std::time::Instant>,
}

impl SessionEntry {
    pub(crate) fn used_at(&self) -> std::time::Instant {
        *self.used.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn touch(&self) {
        *self.used.lock().unwrap_or_else(|p| p.into_inner()) = std::time::Instant::now();
    }
}

#[derive(Default)]
pub(crate) struct Registry {
    pub sessions: HashMap<String, SessionEntry>,
    /// Chat URI → session URI.
    pub chats: HashMap<String, String>,
}

impl Registry {
    pub(crate) fn session_for(&self, channel: &str) -> Option<(&str, &SessionEntry)> {
        if let Some((k, e)) = self.sessions.get_key_value(channel) {
            return Some((k.as_str(), e));
        }
        let chat = crate::changesets::owner_chat(channel).unwrap_or(channel);
        let session = self.chats.get(chat)?;
        self.sessions
            .get_key_value(session)
            .map(|(k, e)| (k.as_str(), e))
    }

    pub(crate) fn live_count(&self) -> usize {
        self.sessions
            .values()
            .filter(|e| e.summary.is_some())
            .count()
    }
}

/// The backend id a session URI names: the part after `<scheme>:` without leading slashes.
pub(crate) fn backend_id_of(uri: &str) -> Option<String> {
    let (scheme, rest) = uri.split_once(':')?;
    if scheme.is_empty() {
        return None;
    }
    Some(rest.trim_start_matches('/').to_owned())
}

/// The session URI a chat URI belongs to when the chat is a default chat.
pub(crate) fn default_chat_owner(uri: &str) -> Option<String> {
    util::session_of_default_chat(uri)
}
