//! A client's turn actions on a chat: starting, cancelling, resuming and rewinding turns, and
//! the steering and queued messages waiting for one.

use ahp_types::actions::*;
use ahp_types::state::*;

use crate::agent::TurnRequest;
use crate::protocol::dispatch::ChatDispatch;
use crate::session::actor::{Actor, Backend};

impl Actor {
    /// Starts a client's turn: a fresh id, the running turn (if any) replaced, the backend begun.
    pub(crate) fn client_turn_started(
        &mut self,
        d: &ChatDispatch<'_>,
        a: &ChatTurnStartedAction,
    ) -> Result<(), String> {
        let ChatDispatch {
            conn,
            chat,
            action,
            origin,
            active,
        } = *d;
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
            slot.turns.replace(&old.id);
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

    /// Cancels the running turn and the turns it replaced, and drops a steering message left over.
    pub(crate) fn client_turn_cancelled(
        &mut self,
        d: &ChatDispatch<'_>,
        a: &ChatTurnCancelledAction,
    ) -> Result<(), String> {
        let ChatDispatch {
            chat,
            action,
            origin,
            active,
            ..
        } = *d;
        if active.is_none_or(|t| t.id != a.turn_id) {
            return Err("there is no running turn with that id to cancel".into());
        }
        self.apply_chat(chat, action, Some(origin));
        let replaced: Vec<String> = self
            .chats
            .get(chat)
            .map(|c| c.turns.replaced())
            .unwrap_or_default();
        for turn in std::iter::once(a.turn_id.clone()).chain(replaced) {
            self.turn_ended(chat, &turn, false);
        }
        let steering = self
            .chats
            .get(chat)
            .and_then(|c| c.state.steering_message.as_ref().map(|m| m.id.clone()));
        if let Some(id) = steering {
            let rm = StateAction::ChatPendingMessageRemoved(ChatPendingMessageRemovedAction {
                kind: PendingMessageKind::Steering,
                id,
            });
            self.apply_chat(chat, &rm, None);
        }
        let (turn, duration) = (a.turn_id.clone(), a.duration);
        self.with_backend(chat, |s| s.stopped(&turn, duration));
        Ok(())
    }

    /// A steering or queued message: a steer goes to the running turn, a message to an idle chat starts.
    pub(crate) fn client_pending_set(
        &mut self,
        d: &ChatDispatch<'_>,
        a: &ChatPendingMessageSetAction,
    ) -> Result<(), String> {
        let ChatDispatch {
            chat,
            action,
            origin,
            active,
            ..
        } = *d;
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

    /// Removes a steering or queued message that exists.
    pub(crate) fn client_pending_removed(
        &mut self,
        d: &ChatDispatch<'_>,
        a: &ChatPendingMessageRemovedAction,
    ) -> Result<(), String> {
        let ChatDispatch {
            chat,
            action,
            origin,
            ..
        } = *d;
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

    /// Resumes the latest turn when a resumable error ended it.
    pub(crate) fn client_turn_resume(
        &mut self,
        d: &ChatDispatch<'_>,
        a: &ChatTurnResumeAction,
    ) -> Result<(), String> {
        let ChatDispatch {
            chat,
            action,
            origin,
            active,
            ..
        } = *d;
        if active.is_some() {
            return Err("a turn is running; resume only an ended turn".into());
        }
        let resumable = self.chats.get(chat).and_then(|c| c.state.turns.last()).is_some_and(|t| {
            t.id == a.turn_id
                && t.state == TurnState::Error
                && matches!(t.response_parts.last(), Some(ResponsePart::Error(e)) if e.resumable == Some(true))
        });
        if !resumable {
            return Err("only the latest turn, ended by a resumable error, can be resumed".into());
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

    /// Rewinds the conversation through a turn (or all of it), loading older pages to reach it.
    pub(crate) fn client_truncated(
        &mut self,
        d: &ChatDispatch<'_>,
        a: &ChatTruncatedAction,
    ) -> Result<(), String> {
        let ChatDispatch {
            chat,
            action,
            origin,
            active,
            ..
        } = *d;
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
}
