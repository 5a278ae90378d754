//! Client dispatches on a session or chat channel: normalise, decode, validate, apply,
//! echo, then side effects. A refusal goes to the dispatcher only.

use std::sync::Arc;

use ahp_types::actions::*;
use ahp_types::state::*;
use serde_json::Value;

use crate::actor::{Actor, Backend, PendingKind};
use crate::agent::{ApprovalOutcome, InputOutcome, TurnRequest};
use crate::error::RpcError;
use crate::session::ConnRef;
use crate::util;

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
        match action {
            A::ChatTurnStarted(a) => {
                if a.turn_id.is_empty() {
                    return Err("a turn needs a non-empty turnId".into());
                }
                // Older transcript pages count too: a reused id would appear twice once a
                // client loads them.
                let used = self.chats.get(chat).is_some_and(|c| {
                    c.state.turns.iter().any(|t| t.id == a.turn_id)
                        || c.older.iter().any(|t| t.id == a.turn_id)
                        || active.is_some_and(|t| t.id == a.turn_id)
                });
                if used {
                    return Err(format!(
                        "the turn id {} is already used in this chat",
                        a.turn_id
                    ));
                }
                if let Some(old) = active
                    && let Some(slot) = self.chats.get_mut(chat)
                {
                    slot.replaced.insert(old.id.clone());
                }
                self.apply_chat(chat, action, Some(origin));
                self.mirror_turn_settings(&a.message);
                let req = TurnRequest {
                    turn_id: a.turn_id.clone(),
                    started_at: a.started_at.clone(),
                    message: a.message.clone(),
                    queued_message_id: a.queued_message_id.clone(),
                    settings: self.settings(),
                    client_id: Some(conn.client_id.clone()),
                };
                self.begin(chat, req);
                Ok(())
            }
            A::ChatTurnCancelled(a) => {
                if active.is_none_or(|t| t.id != a.turn_id) {
                    return Err("there is no running turn with that id to cancel".into());
                }
                self.apply_chat(chat, action, Some(origin));
                let replaced: Vec<String> = self
                    .chats
                    .get(chat)
                    .map(|c| c.replaced.iter().cloned().collect())
                    .unwrap_or_default();
                for turn in std::iter::once(a.turn_id.clone()).chain(replaced) {
                    self.turn_ended(chat, &turn, false);
                }
                let steering = self
                    .chats
                    .get(chat)
                    .and_then(|c| c.state.steering_message.as_ref().map(|m| m.id.clone()));
                if let Some(id) = steering {
                    let rm = A::ChatPendingMessageRemoved(ChatPendingMessageRemovedAction {
                        kind: PendingMessageKind::Steering,
                        id,
                    });
                    self.apply_chat(chat, &rm, None);
                }
                let (turn, duration) = (a.turn_id.clone(), a.duration);
                self.with_backend(chat, |s| s.stopped(&turn, duration));
                Ok(())
            }
            A::ChatToolCallConfirmed(a) => {
                let entry = format!("tool:{}", a.tool_call_id);
                let open = matches!(self.pending.get(&entry), Some(p) if &p.chat == chat && p.turn_id == a.turn_id && matches!(p.kind, PendingKind::Approval { .. }));
                if !open {
                    return Err("that tool call is not waiting for a confirmation".into());
                }
                self.apply_chat(chat, action, Some(origin));
                if let Some(p) = self.pending.remove(&entry)
                    && let PendingKind::Approval { reply, tool_name } = p.kind
                {
                    let outcome = if a.approved {
                        if a.selected_option_id.as_deref() == Some("allow-session") {
                            self.allow_session.insert(tool_name);
                        }
                        ApprovalOutcome::Approved {
                            edited_input: a.edited_tool_input.clone(),
                            option_id: a.selected_option_id.clone(),
                            confirmed: a
                                .confirmed
                                .clone()
                                .unwrap_or(ToolCallConfirmationReason::NotNeeded),
                        }
                    } else {
                        ApprovalOutcome::Denied { reason: a.reason }
                    };
                    let _ = reply.send(outcome);
                }
                self.remove_input_needed(&entry);
                Ok(())
            }
            A::ChatToolCallComplete(a) => {
                let entry = format!("client:{}", a.tool_call_id);
                let mine = matches!(self.pending.get(&entry), Some(p) if matches!(&p.kind, PendingKind::ClientTool { client_id, .. } if *client_id == conn.client_id));
                if !mine {
                    return Err("only the client running that tool call may complete it".into());
                }
                self.apply_chat(chat, action, Some(origin));
                if let Some(p) = self.pending.remove(&entry)
                    && let PendingKind::ClientTool { reply, timer, .. } = p.kind
                {
                    if let Some(t) = timer {
                        t.abort();
                    }
                    let _ = reply.send(a.result.clone());
                }
                self.remove_input_needed(&entry);
                Ok(())
            }
            A::ChatToolCallContentChanged(a) => {
                let entry = format!("client:{}", a.tool_call_id);
                let mine = matches!(self.pending.get(&entry), Some(p) if matches!(&p.kind, PendingKind::ClientTool { client_id, .. } if *client_id == conn.client_id));
                if !mine {
                    return Err(
                        "only the client running that tool call may change its content".into(),
                    );
                }
                self.apply_chat(chat, action, Some(origin));
                Ok(())
            }
            A::ChatInputAnswerChanged(a) => {
                if !self
                    .pending
                    .contains_key(&format!("input:{}", a.request_id))
                {
                    return Err("that question is not open".into());
                }
                self.apply_chat(chat, action, Some(origin));
                Ok(())
            }
            A::ChatInputCompleted(a) => {
                let entry = format!("input:{}", a.request_id);
                let Some(PendingKind::Input { required, .. }) =
                    self.pending.get(&entry).map(|p| &p.kind)
                else {
                    return Err("that question is not open".into());
                };
                if a.response == ChatInputResponseKind::Accept {
                    let answers = a.answers.clone().unwrap_or_default();
                    if let Some(missing) = required.iter().find(|q| !answers.contains_key(*q)) {
                        return Err(format!("the required question {missing} has no answer"));
                    }
                }
                self.apply_chat(chat, action, Some(origin));
                if let Some(p) = self.pending.remove(&entry)
                    && let PendingKind::Input { reply, .. } = p.kind
                {
                    let _ = reply.send(InputOutcome {
                        response: a.response,
                        answers: a.answers.clone(),
                    });
                }
                self.remove_input_needed(&entry);
                Ok(())
            }
            A::ChatPendingMessageSet(a) => {
                if a.id.is_empty() {
                    return Err("a pending message needs a non-empty id".into());
                }
                self.apply_chat(chat, action, Some(origin));
                match (a.kind, active) {
                    (PendingMessageKind::Steering, Some(_)) => {
                        let msg = PendingMessage {
                            id: a.id.clone(),
                            message: a.message.clone(),
                        };
                        self.with_backend(chat, |s| s.steer(msg));
                    }
                    (_, None) => self.start_next(chat),
                    _ => {}
                }
                Ok(())
            }
            A::ChatPendingMessageRemoved(a) => {
                let exists = self.chats.get(chat).is_some_and(|c| match a.kind {
                    PendingMessageKind::Steering => c
                        .state
                        .steering_message
                        .as_ref()
                        .is_some_and(|m| m.id == a.id),
                    PendingMessageKind::Queued => c
                        .state
                        .queued_messages
                        .as_ref()
                        .is_some_and(|q| q.iter().any(|m| m.id == a.id)),
                });
                if !exists {
                    return Err("there is no pending message with that id".into());
                }
                self.apply_chat(chat, action, Some(origin));
                Ok(())
            }
            A::ChatQueuedMessagesReordered(_)
            | A::ChatDraftChanged(_)
            | A::ChatIsReadChanged(_)
            | A::ChatIsArchivedChanged(_) => {
                self.apply_chat(chat, action, Some(origin));
                Ok(())
            }
            A::ChatTurnResume(a) => {
                if active.is_some() {
                    return Err("a turn is running; resume only an ended turn".into());
                }
                let resumable = self.chats.get(chat).and_then(|c| c.state.turns.last()).is_some_and(|t| {
                    t.id == a.turn_id
                        && t.state == TurnState::Error
                        && matches!(t.response_parts.last(), Some(ResponsePart::Error(e)) if e.resumable == Some(true))
                });
                if !resumable {
                    return Err(
                        "only the latest turn, ended by a resumable error, can be resumed".into(),
                    );
                }
                if matches!(
                    self.chats.get(chat).map(|c| &c.backend),
                    Some(Backend::Ready(_))
                ) {
                    let turn = a.turn_id.clone();
                    match self.with_backend(chat, |s| s.resume_turn(&turn)) {
                        Some(Ok(())) => {}
                        Some(Err(r)) => return Err(r.0),
                        None => return Err("the agent is not available to resume this turn".into()),
                    }
                } else {
                    return Err("the agent is not available to resume this turn".into());
                }
                self.apply_chat(chat, action, Some(origin));
                Ok(())
            }
            A::ChatTruncated(a) => {
                if active.is_some() {
                    return Err("a turn is running; stop it before truncating".into());
                }
                let (in_window, stored) = match (&a.turn_id, self.chats.get(chat)) {
                    (Some(t), Some(c)) => (
                        c.state.turns.iter().any(|x| &x.id == t),
                        c.older.iter().any(|x| &x.id == t),
                    ),
                    _ => (true, false),
                };
                if let Some(t) = &a.turn_id
                    && !in_window
                    && !stored
                {
                    return Err(format!("this chat has no turn {t}"));
                }
                let turn = a.turn_id.clone();
                match self.with_backend(chat, |s| s.rewind(turn.as_deref())) {
                    Some(Ok(())) => {}
                    Some(Err(r)) => return Err(r.0),
                    None => return Err("the agent is not available to rewind this chat".into()),
                }
                if turn.is_none()
                    && let Some(slot) = self.chats.get_mut(chat)
                {
                    // Everything goes, the pages not loaded yet too.
                    slot.older.clear();
                } else if !in_window {
                    // The turn is on an older page: load pages (every client sees them
                    // arrive, as for fetchTurns) until it is in the window, so the reducer
                    // can cut after it.
                    self.load_through(chat, turn.as_deref().unwrap_or_default());
                }
                self.apply_chat(chat, action, Some(origin));
                Ok(())
            }
            other => Err(format!(
                "{} cannot be dispatched by a client",
                type_name(other)
            )),
        }
    }

    /// Start the steering message left over, else the queue's head, when the chat is idle.
    pub(crate) fn start_next(&mut self, chat: &Arc<str>) {
        let Some(slot) = self.chats.get(chat) else {
            return;
        };
        if slot.state.active_turn.is_some() {
            return;
        }
        let next = slot.state.steering_message.clone().or_else(|| {
            slot.state
                .queued_messages
                .as_ref()
                .and_then(|q| q.first().cloned())
        });
        let Some(msg) = next else { return };
        let turn_id = uuid::Uuid::new_v4().to_string();
        let started_at = util::now_iso();
        let started = StateAction::ChatTurnStarted(ChatTurnStartedAction {
            turn_id: turn_id.clone(),
            started_at: started_at.clone(),
            message: msg.message.clone(),
            queued_message_id: Some(msg.id.clone()),
            meta: None,
        });
        if !self.apply_chat(chat, &started, None) {
            return;
        }
        let req = TurnRequest {
            turn_id,
            started_at,
            message: msg.message,
            queued_message_id: Some(msg.id),
            settings: self.settings(),
            client_id: None,
        };
        self.begin(chat, req);
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
