//! How a chat's turns move: handed to the backend (opening it first when needed), ended by the
//! backend, the host or a cancel, and followed by the steering or queued message waiting.

use std::sync::Arc;

use ahp_types::actions::*;
use ahp_types::state::*;

use crate::agent::TurnRequest;
use crate::session::actor::{Actor, Backend};
use crate::util;

impl Actor {
    /// Hand a turn to the chat's backend, opening the backend first when needed.
    pub(crate) fn begin(&mut self, chat: &Arc<str>, turn: TurnRequest) {
        let Some(slot) = self.chats.get_mut(chat) else {
            return;
        };
        slot.ctx.set_turn_client(turn.client_id.clone());
        match &mut slot.backend {
            Backend::Ready(_) => {
                self.with_backend(chat, |s| s.begin(turn));
            }
            Backend::Creating(q) => q.push(turn),
            Backend::None => {
                slot.backend = Backend::Creating(vec![turn]);
                self.spawn_create(chat.clone(), None);
            }
        }
    }

    /// End a turn with `chat/error` from the host.
    pub(crate) fn fail_turn(
        &mut self,
        chat: &Arc<str>,
        turn_id: &str,
        error_type: &str,
        message: &str,
    ) {
        let duration = self
            .chats
            .get(chat)
            .and_then(|c| c.state.active_turn.as_ref())
            .filter(|t| t.id == turn_id)
            .and_then(|t| util::millis_since(&t.started_at))
            .unwrap_or(0)
            .max(0);
        let action = StateAction::ChatError(ChatErrorAction {
            turn_id: turn_id.to_owned(),
            duration,
            part: ErrorResponsePart {
                error: ErrorInfo {
                    error_type: error_type.to_owned(),
                    message: message.to_owned(),
                    stack: None,
                    meta: None,
                },
                resumable: None,
            },
            meta: None,
        });
        self.apply_chat(chat, &action, None);
        self.turn_ended(chat, turn_id, true);
    }

    /// A turn ended: settle its entries and, after success or error, start what waits.
    pub(crate) fn turn_ended(&mut self, chat: &Arc<str>, turn_id: &str, advance: bool) {
        for k in self.asks.of_turn(chat, turn_id) {
            self.settle(
                &k,
                &format!("The turn ended before {} answered.", "the client"),
            );
        }
        if let Some(slot) = self.chats.get_mut(chat) {
            slot.coalescer.forget_turn(turn_id);
            slot.turns.ended(turn_id);
        }
        self.inner
            .turns_ended
            .send_modify(|n| *n = n.wrapping_add(1));
        if advance {
            self.start_next(chat);
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
}
