//! `createChat`: a further chat of a session, empty, forked from a turn of another chat
//! (its history through that turn copied into the new chat's `turns`), or a side chat that
//! names its source turn without copying it.

use std::sync::Arc;

use ahp_types::actions::*;
use ahp_types::commands::{ChatSource, CreateChatParams, SideChatSource};
use ahp_types::state::*;
use tokio::sync::oneshot;

use crate::agent::{ForkFrom, ForkPoint, TurnRequest};
use crate::error::RpcError;
use crate::session::ConnRef;
use crate::session::actor::{Actor, Backend, Chat};
use crate::session::reduce::{chat_summary_of, empty_chat};
use crate::util;

/// What a fork takes from its source: the turns to show and what the backend copies.
struct Fork {
    turns: Vec<Turn>,
    from: ForkFrom,
    working_directories: Option<Vec<String>>,
}

impl Chat {
    /// Start the chat with this history (oldest first): the newest `page` turns in its window,
    /// the rest behind a `turnsNextCursor` for `fetchTurns`.
    pub(crate) fn set_history(&mut self, mut turns: Vec<Turn>, page: usize) {
        let window = turns.split_off(turns.len().saturating_sub(page.max(1)));
        self.state.turns = window;
        if !turns.is_empty() {
            let cursor = uuid::Uuid::new_v4().to_string();
            self.cursors.insert(cursor.clone(), false);
            self.state.turns_next_cursor = Some(cursor);
        }
        self.older = turns;
    }
}

impl Actor {
    /// `createChat`.
    pub(crate) fn create_chat(
        &mut self,
        conn: ConnRef,
        params: CreateChatParams,
        reply: oneshot::Sender<Result<(), RpcError>>,
    ) {
        match self.create_chat_inner(conn, params) {
            Ok(()) => {
                let _ = reply.send(Ok(()));
            }
            Err(e) => {
                let _ = reply.send(Err(e));
            }
        }
    }

    /// The checks of a new chat (capability, URI, source) come before anything changes, then the
    /// chat is made in one pass, so a refusal leaves nothing behind.
    fn create_chat_inner(
        &mut self,
        conn: ConnRef,
        params: CreateChatParams,
    ) -> Result<(), RpcError> {
        let caps = self
            .agent
            .descriptor()
            .capabilities
            .and_then(|c| c.multiple_chats)
            .ok_or_else(|| RpcError::invalid_params("this agent serves one chat per session"))?;
        if !params.chat.starts_with("ahp-chat:")
            || self.chats.contains_key(params.chat.as_str())
            || crate::inner::mailbox(&self.inner, &params.chat).is_some()
        {
            return Err(RpcError::invalid_params(
                "chat must be an unused ahp-chat: URI",
            ));
        }
        let (fork, origin) = match &params.source {
            None => (None, None),
            Some(ChatSource::Fork(src)) => {
                if caps.fork != Some(true) {
                    return Err(RpcError::invalid_params("this agent cannot fork chats"));
                }
                let fork = self.fork_source(&src.chat, &src.turn_id)?;
                let origin = ChatOrigin::Fork {
                    chat: src.chat.clone(),
                    turn_id: src.turn_id.clone(),
                };
                (Some(fork), Some(origin))
            }
            Some(ChatSource::SideChat(src)) => {
                if caps.side_chat != Some(true) {
                    return Err(RpcError::invalid_params(
                        "this agent does not offer side chats",
                    ));
                }
                (None, Some(self.side_chat_origin(src)?))
            }
            Some(ChatSource::Unknown(v)) => {
                return Err(RpcError::invalid_params(format!(
                    "the chat source kind {} is not one this host knows",
                    v.get("kind").unwrap_or(&serde_json::Value::Null)
                )));
            }
        };
        let title = self.state.title.clone();
        let mut state = empty_chat(&params.chat, &title);
        state.origin = origin;
        let mut fork_from = None;
        let mut history = Vec::new();
        if let Some(fork) = fork {
            // A fork inherits its source's folders; the request's list is ignored for forks.
            history = fork.turns;
            state.working_directories = fork.working_directories;
            fork_from = Some(fork.from);
        } else if let Some(dirs) = &params.working_directories {
            let session_dirs = self.state.working_directories.clone().unwrap_or_default();
            if let Some(outside) = dirs.iter().find(|d| !session_dirs.contains(d)) {
                return Err(RpcError::invalid_params(format!(
                    "workingDirectories: {outside} is not one of the session's working directories"
                )));
            }
            state.working_directories = Some(dirs.clone());
        }
        let backend_id = uuid::Uuid::new_v4().to_string();
        let mut slot = self.new_chat(&params.chat, state, backend_id, false);
        slot.set_history(history, self.inner.options.turns_page);
        slot.backend = Backend::Creating(Vec::new());
        let uri = slot.uri.clone();
        let summary = chat_summary_of(&slot.state);
        self.chats.insert(uri.clone(), slot);
        if let Ok(mut reg) = self.inner.registry.lock() {
            reg.chats.insert(params.chat.clone(), self.uri.to_string());
        }
        self.apply_session(
            &StateAction::SessionChatAdded(SessionChatAddedAction { summary }),
            None,
        );
        self.spawn_create(uri.clone(), fork_from);
        if let Some(message) = params.initial_message {
            self.start_initial(&uri, conn, message);
        }
        Ok(())
    }

    /// The origin of a side chat, whose source turn must be a turn of a chat of this session.
    fn side_chat_origin(&self, src: &SideChatSource) -> Result<ChatOrigin, RpcError> {
        let known = self.chats.get(src.chat.as_str()).is_some_and(|c| {
            c.state
                .active_turn
                .as_ref()
                .is_some_and(|t| t.id == src.turn_id)
                || c.state.turns.iter().any(|t| t.id == src.turn_id)
                || c.older.iter().any(|t| t.id == src.turn_id)
        });
        if !known {
            return Err(RpcError::invalid_params(format!(
                "the side chat's source turn {} is not a turn of {} in this session",
                src.turn_id, src.chat
            )));
        }
        Ok(ChatOrigin::SideChat {
            chat: src.chat.clone(),
            turn_id: src.turn_id.clone(),
            selection: src.selection.clone(),
        })
    }

    /// Check a fork's source and take what it copies: every turn of the source chat through
    /// `turn_id`, after loading older pages until that turn is in the source's window.
    fn fork_source(&mut self, source: &str, turn_id: &str) -> Result<Fork, RpcError> {
        let Some(chat) = self.chats.get_key_value(source).map(|(k, _)| k.clone()) else {
            return Err(RpcError::invalid_params(format!(
                "the fork's source chat {source} is not a chat of this session"
            )));
        };
        loop {
            let Some(slot) = self.chats.get(&chat) else {
                return Err(RpcError::session_not_found(source));
            };
            if slot.state.turns.iter().any(|t| t.id == turn_id) {
                break;
            }
            if !slot.older.iter().any(|t| t.id == turn_id) {
                let why = if slot
                    .state
                    .active_turn
                    .as_ref()
                    .is_some_and(|t| t.id == turn_id)
                {
                    "is still running; a fork starts from an ended turn"
                } else {
                    "is not a turn of that chat"
                };
                return Err(RpcError::invalid_params(format!(
                    "the fork's source turn {turn_id} {why}"
                )));
            }
            // Every client's window grows with it (chat/turnsLoaded), as for fetchTurns.
            self.fetch_turns(source, None)?;
        }
        let slot = self
            .chats
            .get(&chat)
            .ok_or_else(|| RpcError::session_not_found(source))?;
        let end = slot
            .state
            .turns
            .iter()
            .position(|t| t.id == turn_id)
            .map(|i| i + 1)
            .unwrap_or(0);
        // Everything through the turn: older pages not in the window, then the window's part.
        let mut turns = slot.older.clone();
        turns.extend_from_slice(&slot.state.turns[..end]);
        let backend_id = slot.backend_id.clone();
        let working_directories = slot.state.working_directories.clone();
        let open = matches!(slot.backend, Backend::Ready(_));
        // The source's backend says where its conversation stands after that turn; a source
        // not open now (or one that cannot tell) leaves the position to the new chat's agent.
        let point = open
            .then(|| {
                self.with_backend(&chat, |s| s.fork_point(turn_id))
                    .flatten()
            })
            .flatten()
            .unwrap_or_else(|| ForkPoint {
                turn_id: turn_id.to_owned(),
                data: serde_json::Value::Null,
            });
        Ok(Fork {
            turns,
            from: ForkFrom { backend_id, point },
            working_directories,
        })
    }

    /// A new chat's `initialMessage`: a host `chat/turnStarted`, then `begin`.
    fn start_initial(&mut self, chat: &Arc<str>, conn: ConnRef, message: Message) {
        let turn_id = uuid::Uuid::new_v4().to_string();
        let started_at = util::now_iso();
        let started = StateAction::ChatTurnStarted(ChatTurnStartedAction {
            turn_id: turn_id.clone(),
            started_at: started_at.clone(),
            message: message.clone(),
            queued_message_id: None,
            meta: None,
        });
        self.apply_chat(chat, &started, None);
        self.begin(
            chat,
            TurnRequest {
                turn_id,
                started_at,
                message,
                queued_message_id: None,
                settings: self.settings(),
                client_id: Some(conn.client_id),
            },
        );
    }
}
