//! A session's life: opening its backends (`createSession`, lazily for past sessions and new
//! chats), and closing chats and the whole session.

use std::sync::Arc;

use ahp_types::actions::*;
use ahp_types::notifications::SessionAddedParams;
use ahp_types::state::*;
use tokio::sync::oneshot;

use crate::agent::{AgentError, Session, SessionStart};
use crate::channels::root;
use crate::error::RpcError;
use crate::session::actor::{Actor, Backend, CLOSE_TIMEOUT};
use crate::session::{ConnRef, SessionMsg};

impl Actor {
    // ── creation ────────────────────────────────────────────────────────────────────────

    pub(crate) fn start(
        &mut self,
        conn: ConnRef,
        active_client: Option<SessionActiveClient>,
        progress: Option<String>,
        reply: oneshot::Sender<Result<(), RpcError>>,
    ) {
        if let Some(mut client) = active_client {
            client.client_id = conn.client_id.clone();
            self.set_active_client(client, None);
        }
        if let Some(token) = &progress {
            self.progress(conn.id, token, 0);
        }
        self.start_reply = Some((reply, conn, progress));
        let chat = self.default_chat.clone();
        if let Some(slot) = self.chats.get_mut(&chat) {
            slot.backend = Backend::Creating(Vec::new());
        }
        self.spawn_create(chat, None);
    }

    fn progress(&self, conn: u64, token: &str, done: i64) {
        let params = serde_json::json!({
            "channel": root::ROOT, "progressToken": token, "progress": done, "total": 1
        });
        self.inner.hub.send_to(
            conn,
            crate::channels::hub::notification_frame("root/progress", &params),
        );
    }

    /// Opens the default chat's backend without a turn, unless it is open or opening already.
    pub(crate) fn open_backend(&mut self) {
        if self.closed {
            return;
        }
        let chat = self.default_chat.clone();
        let Some(slot) = self.chats.get_mut(&chat) else {
            return;
        };
        if !matches!(slot.backend, Backend::None) {
            return;
        }
        slot.backend = Backend::Creating(Vec::new());
        self.spawn_create(chat, None);
    }

    pub(crate) fn spawn_create(&self, chat: Arc<str>, fork: Option<crate::agent::ForkFrom>) {
        let Some(slot) = self.chats.get(&chat) else {
            return;
        };
        let start = SessionStart {
            session_uri: self.uri.to_string(),
            chat_uri: chat.to_string(),
            backend_id: slot.backend_id.clone(),
            resume: slot.resume.then(|| slot.backend_id.clone()),
            fork,
            working_directory: self.working_directory.clone(),
            additional_directories: Vec::new(),
            settings: self
                .view
                .settings
                .lock()
                .map(|s| s.clone())
                .unwrap_or_default(),
            ctx: slot.ctx.clone(),
        };
        let agent = self.agent.clone();
        let tx = self.self_tx.clone();
        let limit = self
            .inner
            .options
            .request_timeout
            .max(std::time::Duration::from_millis(1));
        tokio::spawn(async move {
            let job = tokio::spawn(async move { agent.create(start).await });
            let abort = job.abort_handle();
            // A hung agent would otherwise leave the chat opening forever, with every turn
            // and held dispatch waiting behind it.
            let result = match tokio::time::timeout(limit, job).await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => Err(AgentError::Failed(
                    "the agent failed while opening the session".into(),
                )),
                Err(_) => {
                    abort.abort();
                    tracing::warn!(chat = %chat, "the agent did not open the chat in time");
                    Err(AgentError::Failed(format!(
                        "the agent did not open the session within {}",
                        crate::util::human_duration(limit)
                    )))
                }
            };
            if let Some(tx) = tx.upgrade() {
                let _ = tx.send(SessionMsg::BackendReady { chat, result }).await;
            }
        });
    }

    pub(crate) fn backend_ready(
        &mut self,
        chat: Arc<str>,
        result: Result<Box<dyn Session>, AgentError>,
    ) {
        if self.closed {
            if let Ok(mut s) = result {
                tokio::spawn(async move { s.close().await });
            }
            return;
        }
        let is_start = self.start_reply.is_some() && chat == self.default_chat;
        match result {
            Ok(session) => {
                let queued = match self.chats.get_mut(&chat) {
                    Some(slot) => {
                        match std::mem::replace(&mut slot.backend, Backend::Ready(session)) {
                            Backend::Creating(q) => q,
                            _ => Vec::new(),
                        }
                    }
                    None => {
                        let mut s = session;
                        tokio::spawn(async move { s.close().await });
                        return;
                    }
                };
                if is_start {
                    self.finish_start(Ok(()));
                }
                // Held config changes, resumes and rewinds reach the backend before turns
                // queued behind them.
                self.release_parked(&chat, None);
                self.release_changesets(&chat, None);
                // With no turn to hand over, the backend was opened for the chat's watchers
                // (or a command, which has said what it needed): what waits on a person is
                // shown now. A turn queued meanwhile goes first instead, and the backend
                // decides what becomes of the paused work.
                if queued.is_empty() {
                    self.with_backend(&chat, |s| s.watched());
                }
                for turn in queued {
                    self.begin(&chat, turn);
                }
            }
            Err(err) => {
                let queued = match self.chats.get_mut(&chat) {
                    Some(slot) => match std::mem::replace(&mut slot.backend, Backend::None) {
                        Backend::Creating(q) => q,
                        _ => Vec::new(),
                    },
                    None => Vec::new(),
                };
                self.release_parked(&chat, Some(&err.to_string()));
                self.release_changesets(&chat, Some(&err.to_string()));
                if is_start {
                    self.finish_start(Err(err));
                    return;
                }
                for turn in queued {
                    self.fail_turn(&chat, &turn.turn_id, "internal", &err.to_string());
                }
            }
        }
    }

    fn finish_start(&mut self, result: Result<(), AgentError>) {
        let Some((reply, conn, progress)) = self.start_reply.take() else {
            return;
        };
        match result {
            Ok(()) => {
                self.apply_session(&StateAction::SessionReady(SessionReadyAction {}), None);
                let summary = self.summary();
                self.catalogue = Some(summary.clone());
                let count = {
                    let mut reg = self
                        .inner
                        .registry
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    if let Some(e) = reg.sessions.get_mut(&*self.uri) {
                        e.summary = Some(summary.clone());
                    }
                    reg.live_count()
                };
                let added = SessionAddedParams {
                    channel: root::ROOT.to_owned(),
                    summary,
                };
                if let Ok(v) = serde_json::to_value(&added) {
                    self.inner.hub.notify(root::ROOT, "root/sessionAdded", &v);
                }
                root::publish_active_sessions(&self.inner, count);
                if let Some(token) = &progress {
                    self.progress(conn.id, token, 1);
                }
                let _ = reply.send(Ok(()));
            }
            Err(err) => {
                let (error_type, rpc) = match &err {
                    AgentError::Refused(m) => ("refused", RpcError::invalid_params(m.clone())),
                    other => ("failed", RpcError::internal(other.to_string())),
                };
                let action = StateAction::SessionCreationFailed(SessionCreationFailedAction {
                    error: ErrorInfo {
                        error_type: error_type.into(),
                        message: err.to_string(),
                        stack: None,
                        meta: None,
                    },
                });
                self.apply_session(&action, None);
                // A failed session only shows its error: it may go once nobody looks at it.
                if let Ok(mut reg) = self.inner.registry.lock()
                    && let Some(e) = reg.sessions.get_mut(&*self.uri)
                {
                    e.unloadable = true;
                }
                if let Some(token) = &progress {
                    self.progress(conn.id, token, 1);
                }
                let _ = reply.send(Err(rpc));
            }
        }
    }

    // ── disposal ────────────────────────────────────────────────────────────────────────

    pub(crate) async fn dispose(&mut self) {
        self.closed = true;
        for k in self.asks.all() {
            self.settle(&k, "The session was closed before anyone answered.");
        }
        let chats: Vec<Arc<str>> = self.chats.keys().cloned().collect();
        for chat in chats {
            if let Some(slot) = self.chats.get_mut(&chat) {
                slot.ctx.mark_closed();
                if let Backend::Ready(mut s) = std::mem::replace(&mut slot.backend, Backend::None) {
                    let _ = tokio::time::timeout(CLOSE_TIMEOUT, s.close()).await;
                }
            }
            self.inner.hub.drop_channel(&chat);
        }
        self.inner.hub.drop_channel(&self.uri);
    }

    pub(crate) async fn dispose_chat(&mut self, channel: &str) -> Result<(), RpcError> {
        if channel == &*self.default_chat {
            return Err(RpcError::invalid_params(
                "the default chat lives as long as its session and cannot be disposed",
            ));
        }
        let Some(mut slot) = self.chats.remove(channel) else {
            return Err(RpcError::session_not_found(channel));
        };
        for k in self.asks.of_chat(channel) {
            self.settle(&k, "The chat was closed before anyone answered.");
        }
        slot.ctx.mark_closed();
        if let Backend::Ready(mut s) = std::mem::replace(&mut slot.backend, Backend::None) {
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, s.close()).await;
        }
        if let Ok(mut reg) = self.inner.registry.lock() {
            reg.chats.remove(channel);
        }
        self.inner.hub.drop_channel(channel);
        let action = StateAction::SessionChatRemoved(SessionChatRemovedAction {
            chat: channel.to_owned(),
        });
        self.apply_session(&action, None);
        Ok(())
    }
}
