//! Client dispatches on a session or chat channel: normalise, decode, validate, apply,
//! echo, then side effects. A refusal goes to the dispatcher only.

use std::sync::Arc;

use ahp_types::actions::*;
use ahp_types::state::*;
use serde_json::Value;

use crate::error::RpcError;
use crate::session::ConnRef;
use crate::session::actor::Actor;
use crate::util;

/// A client's chat action as it arrived, for the handler of its kind.
#[derive(Clone, Copy)]
pub(crate) struct ChatDispatch<'a> {
    pub conn: &'a ConnRef,
    pub chat: &'a Arc<str>,
    pub action: &'a StateAction,
    pub origin: &'a ActionOrigin,
    pub active: Option<&'a ActiveTurn>,
}

/// Fill in what clients in the wild leave out, before typed decoding.
fn normalise(raw: &mut Value, active: Option<&ActiveTurn>) {
    let Some(obj) = raw.as_object_mut() else {
        return;
    };
    let kind = obj
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let user = || serde_json::json!({"kind": "user"});
    match kind.as_str() {
        "chat/turnStarted" => {
            let ok = obj
                .get("startedAt")
                .and_then(Value::as_str)
                .is_some_and(util::is_rfc3339);
            if !ok {
                obj.insert("startedAt".into(), Value::String(util::now_iso()));
            }
            if let Some(m) = obj.get_mut("message").and_then(Value::as_object_mut)
                && !m.contains_key("origin")
            {
                m.insert("origin".into(), user());
            }
        }
        "chat/turnCancelled" => {
            let given = obj
                .get("duration")
                .and_then(Value::as_i64)
                .filter(|d| *d > 0);
            if given.is_none() {
                let d = active
                    .and_then(|t| util::millis_since(&t.started_at))
                    .unwrap_or(0)
                    .max(1);
                obj.insert("duration".into(), Value::from(d));
            }
        }
        "chat/toolCallConfirmed" => {
            if !obj.contains_key("turnId")
                && let Some(t) = active
            {
                obj.insert("turnId".into(), Value::String(t.id.clone()));
            }
            match obj.get("approved").and_then(Value::as_bool) {
                Some(true) if !obj.contains_key("confirmed") => {
                    obj.insert("confirmed".into(), Value::String("user-action".into()));
                }
                Some(false) if !obj.contains_key("reason") => {
                    obj.insert("reason".into(), Value::String("denied".into()));
                }
                _ => {}
            }
        }
        "chat/pendingMessageSet" => {
            if let Some(m) = obj.get_mut("message").and_then(Value::as_object_mut)
                && !m.contains_key("origin")
            {
                m.insert("origin".into(), user());
            }
        }
        _ => {}
    }
}

impl Actor {
    pub(crate) fn dispatch(&mut self, conn: ConnRef, channel: &str, client_seq: i64, raw: Value) {
        self.dispatch_now(conn, channel, client_seq, raw, false);
    }

    /// Handle a dispatch, unless it needs a backend that is still opening (then it is held,
    /// see `parked`); `replaying` is a held one being released.
    pub(crate) fn dispatch_now(
        &mut self,
        conn: ConnRef,
        channel: &str,
        client_seq: i64,
        mut raw: Value,
        replaying: bool,
    ) {
        let is_session = channel == &*self.uri;
        let chat: Option<Arc<str>> = self.chats.get_key_value(channel).map(|(k, _)| k.clone());
        if !is_session && chat.is_none() {
            return;
        }
        if self.park_for_backend(&conn, channel, chat.as_ref(), client_seq, &raw, replaying) {
            return;
        }
        let active = chat
            .as_ref()
            .and_then(|c| self.chats.get(c))
            .and_then(|c| c.state.active_turn.clone());
        normalise(&mut raw, active.as_ref());
        let origin = ActionOrigin {
            client_id: conn.client_id.clone(),
            client_seq,
        };
        let raw_text = raw.to_string();
        let reject = |actor: &Actor, reason: &str| {
            actor
                .inner
                .hub
                .reject(conn.id, channel, &raw_text, &origin, reason);
        };
        let action: StateAction = match serde_json::from_value(raw) {
            Ok(StateAction::Unknown(_)) | Err(_) => {
                return reject(
                    self,
                    "unknown action: the host could not read it as a protocol action",
                );
            }
            Ok(a) => a,
        };
        let outcome = match &chat {
            Some(chat) => self.client_chat_action(&conn, chat, &action, &origin, active.as_ref()),
            None => self.client_session_action(&conn, &action, &origin),
        };
        if let Err(reason) = outcome {
            reject(self, &reason);
        }
    }

    fn client_session_action(
        &mut self,
        conn: &ConnRef,
        action: &StateAction,
        origin: &ActionOrigin,
    ) -> Result<(), String> {
        match action {
            StateAction::SessionTitleChanged(a) => {
                if a.title.trim().is_empty() {
                    return Err("a session title cannot be empty".into());
                }
                // A client chose this title: the agent's titles no longer replace it, and the
                // store keeps it (set first so the record written on apply carries it).
                self.title_locked = true;
                if !self.apply_session(action, Some(origin)) {
                    self.remember();
                }
                Ok(())
            }
            StateAction::SessionIsReadChanged(_) | StateAction::SessionIsArchivedChanged(_) => {
                self.apply_session(action, Some(origin));
                Ok(())
            }
            StateAction::SessionActiveClientSet(a) => {
                if a.active_client.client_id != conn.client_id {
                    return Err("a client may only set itself as an active client".into());
                }
                self.set_active_client(a.active_client.clone(), Some(origin));
                Ok(())
            }
            StateAction::SessionActiveClientRemoved(a) => {
                if a.client_id != conn.client_id {
                    return Err("a client may only remove itself from the active clients".into());
                }
                self.apply_session(action, Some(origin));
                self.refresh_client_tools();
                Ok(())
            }
            StateAction::SessionConfigChanged(a) => self.client_config(a, origin),
            StateAction::SessionMcpServerStartRequested(a) => {
                self.client_mcp_request(action, &a.id, true, origin)
            }
            StateAction::SessionMcpServerStopRequested(a) => {
                self.client_mcp_request(action, &a.id, false, origin)
            }
            other => Err(format!(
                "{} cannot be dispatched by a client",
                type_name(other)
            )),
        }
    }

    fn client_chat_action(
        &mut self,
        conn: &ConnRef,
        chat: &Arc<str>,
        action: &StateAction,
        origin: &ActionOrigin,
        active: Option<&ActiveTurn>,
    ) -> Result<(), String> {
        use StateAction as A;
        let d = ChatDispatch {
            conn,
            chat,
            action,
            origin,
            active,
        };
        match action {
            A::ChatTurnStarted(a) => self.client_turn_started(&d, a),
            A::ChatTurnCancelled(a) => self.client_turn_cancelled(&d, a),
            A::ChatToolCallConfirmed(a) => self.client_confirmed(&d, a),
            A::ChatToolCallComplete(a) => self.client_tool_complete(&d, a),
            A::ChatToolCallContentChanged(a) => self.client_tool_content(&d, a),
            A::ChatInputAnswerChanged(a) => self.client_answer_changed(&d, a),
            A::ChatInputCompleted(a) => self.client_input_completed(&d, a),
            A::ChatPendingMessageSet(a) => self.client_pending_set(&d, a),
            A::ChatPendingMessageRemoved(a) => self.client_pending_removed(&d, a),
            A::ChatTurnResume(a) => self.client_turn_resume(&d, a),
            A::ChatTruncated(a) => self.client_truncated(&d, a),
            A::ChatQueuedMessagesReordered(_)
            | A::ChatDraftChanged(_)
            | A::ChatIsReadChanged(_)
            | A::ChatIsArchivedChanged(_) => {
                self.apply_chat(chat, action, Some(origin));
                Ok(())
            }
            other => Err(format!(
                "{} cannot be dispatched by a client",
                type_name(other)
            )),
        }
    }

    /// Load older pages into a chat's window until `turn_id` is in it (or none are left).
    pub(crate) fn load_through(&mut self, chat: &Arc<str>, turn_id: &str) {
        loop {
            let Some(slot) = self.chats.get(chat) else {
                return;
            };
            if slot.state.turns.iter().any(|t| t.id == turn_id) || slot.older.is_empty() {
                return;
            }
            if self.fetch_turns(chat, None).is_err() {
                return;
            }
        }
    }

    /// `fetchTurns`: publish `chat/turnsLoaded` before the reply.
    pub(crate) fn fetch_turns(
        &mut self,
        channel: &str,
        cursor: Option<String>,
    ) -> Result<(), RpcError> {
        let Some((uri, slot)) = self
            .chats
            .get_key_value(channel)
            .map(|(k, v)| (k.clone(), v))
        else {
            return Err(RpcError::session_not_found(channel));
        };
        if let Some(c) = &cursor {
            match slot.cursors.get(c) {
                None => {
                    return Err(RpcError::invalid_params(
                        "this cursor was not issued for this chat",
                    ));
                }
                Some(true) => return Ok(()),
                Some(false) => {}
            }
            if slot.state.turns_next_cursor.as_deref() != Some(c.as_str()) {
                return Ok(());
            }
        }
        if slot.older.is_empty() {
            return Ok(());
        }
        let page = self.inner.options.turns_page.max(1);
        let Some(slot) = self.chats.get_mut(&uri) else {
            return Ok(());
        };
        if let Some(c) = &cursor {
            slot.cursors.insert(c.clone(), true);
        } else if let Some(c) = slot.state.turns_next_cursor.clone() {
            slot.cursors.insert(c, true);
        }
        let split = slot.older.len().saturating_sub(page);
        let turns = slot.older.split_off(split);
        let next = (!slot.older.is_empty()).then(|| {
            let c = uuid::Uuid::new_v4().to_string();
            slot.cursors.insert(c.clone(), false);
            c
        });
        let action = StateAction::ChatTurnsLoaded(ChatTurnsLoadedAction {
            turns,
            turns_next_cursor: next,
        });
        self.apply_chat(&uri, &action, None);
        Ok(())
    }
}

/// The protocol `type` string of an action, for refusal sentences.
pub(crate) fn type_name(action: &StateAction) -> String {
    serde_json::to_value(action)
        .ok()
        .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| "this action".into())
}
