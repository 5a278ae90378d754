//! The changesets of a session's chats as its task keeps them: subscriptions answered from the
//! backend's state once, later `changeset/*` actions applied with the official reducer, and
//! requests parked until the chat's backend opens.

use std::sync::Arc;

use ahp::reducers::apply_action_to_changeset;
use ahp_types::actions::StateAction;
use ahp_types::commands::{
    ChangesetOperationTarget, InvokeChangesetOperationParams, InvokeChangesetOperationResult,
};
use ahp_types::state::{ChangesetOperationScope, Snapshot, SnapshotState};
use tokio::sync::oneshot;

use crate::changesets::owner_chat;
use crate::error::RpcError;
use crate::session::actor::{Actor, Backend};
use crate::session::held::Waiting;

impl Actor {
    /// Whether the chat's backend is open; when it is not, `waiting` is kept for when it is
    /// (and its opening started), or answered with the error when the chat is unknown.
    fn backend_for(&mut self, chat: &str, waiting: Waiting) -> Option<Waiting> {
        let Some(slot) = self.chats.get_mut(chat) else {
            waiting.fail(RpcError::session_not_found(chat));
            return None;
        };
        let (ready, closed) = match slot.backend {
            Backend::Ready(_) => (true, false),
            Backend::Creating(_) => (false, false),
            Backend::None => (false, true),
        };
        if ready {
            return Some(waiting);
        }
        slot.changeset_waiting.push(waiting);
        if closed {
            slot.backend = Backend::Creating(Vec::new());
            let chat: Arc<str> = slot.uri.clone();
            self.spawn_create(chat, None);
        }
        None
    }

    /// Answers what waited for `chat`'s backend, now that it opened (or failed to).
    pub(crate) fn release_changesets(&mut self, chat: &Arc<str>, failure: Option<&str>) {
        let Some(slot) = self.chats.get_mut(chat) else {
            return;
        };
        let waiting = std::mem::take(&mut slot.changeset_waiting);
        for w in waiting {
            match failure {
                Some(why) => w.fail(RpcError::internal(why.to_owned())),
                None => match w {
                    Waiting::Subscribe {
                        conn,
                        channel,
                        reply,
                    } => self.subscribe_changeset(conn, channel, reply),
                    Waiting::Operation { params, reply } => {
                        self.changeset_operation(*params, reply)
                    }
                },
            }
        }
    }

    /// A subscription to one of a chat's changesets: the backend's state now.
    pub(crate) fn subscribe_changeset(
        &mut self,
        conn: u64,
        channel: String,
        reply: oneshot::Sender<Result<Snapshot, RpcError>>,
    ) {
        let Some(chat) = owner_chat(&channel).map(str::to_owned) else {
            let _ = reply.send(Err(RpcError::session_not_found(&channel)));
            return;
        };
        let Some(Waiting::Subscribe {
            conn,
            channel,
            reply,
        }) = self.backend_for(
            &chat,
            Waiting::Subscribe {
                conn,
                channel,
                reply,
            },
        )
        else {
            return;
        };
        let Some(slot) = self.chats.get_mut(chat.as_str()) else {
            return;
        };
        let Backend::Ready(session) = &slot.backend else {
            return;
        };
        let Some(state) = session.changeset(&channel) else {
            let _ = reply.send(Err(RpcError::session_not_found(&channel)));
            return;
        };
        // The subscriber gave up waiting for the backend: no subscription without a snapshot.
        if reply.is_closed() {
            return;
        }
        slot.changesets.insert(channel.clone(), state.clone());
        let seq = self.inner.hub.subscribe(conn, &channel);
        let undo = channel.clone();
        let sent = reply.send(Ok(Snapshot {
            resource: channel,
            state: SnapshotState::Changeset(Box::new(state)),
            from_seq: seq as i64,
        }));
        if sent.is_err() {
            self.inner.hub.unsubscribe(conn, &undo);
        }
    }

    /// The state kept for a watched changeset.
    pub(crate) fn changeset_snapshot(&self, channel: &str, seq: u64) -> Option<Snapshot> {
        let chat = owner_chat(channel)?;
        let state = self.chats.get(chat)?.changesets.get(channel)?.clone();
        Some(Snapshot {
            resource: channel.to_owned(),
            state: SnapshotState::Changeset(Box::new(state)),
            from_seq: seq as i64,
        })
    }

    /// A `changeset/*` action from the backend, for a channel someone watches.
    pub(crate) fn backend_changeset(
        &mut self,
        chat: &Arc<str>,
        channel: &str,
        action: StateAction,
    ) {
        if owner_chat(channel) != Some(&**chat) {
            tracing::warn!(chat = %chat, "a backend published on another chat's changeset; dropped");
            return;
        }
        let Some(slot) = self.chats.get_mut(chat) else {
            return;
        };
        if !self.inner.hub.has_subscribers(channel) {
            slot.changesets.remove(channel);
            return;
        }
        let Some(state) = slot.changesets.get_mut(channel) else {
            return;
        };
        let before = state.clone();
        let outcome = apply_action_to_changeset(state, &action);
        if *state == before {
            tracing::debug!(channel, ?outcome, "a changeset action changed nothing");
            return;
        }
        self.inner.hub.publish(channel, &action, None);
    }

    /// Hands an operation to the chat's backend; the reply comes once it has run.
    pub(crate) fn changeset_operation(
        &mut self,
        params: InvokeChangesetOperationParams,
        reply: oneshot::Sender<Result<InvokeChangesetOperationResult, RpcError>>,
    ) {
        let channel = params.channel.clone();
        let Some(chat) = owner_chat(&channel).map(str::to_owned) else {
            let _ = reply.send(Err(RpcError::session_not_found(&channel)));
            return;
        };
        let Some(Waiting::Operation { params, reply }) = self.backend_for(
            &chat,
            Waiting::Operation {
                params: Box::new(params),
                reply,
            },
        ) else {
            return;
        };
        let Some(slot) = self.chats.get_mut(chat.as_str()) else {
            return;
        };
        let Backend::Ready(session) = &mut slot.backend else {
            return;
        };
        // The operation and its target are checked against the state clients are shown.
        let Some(state) = session.changeset(&channel) else {
            let _ = reply.send(Err(RpcError::session_not_found(&channel)));
            return;
        };
        let op = state
            .operations
            .iter()
            .flatten()
            .find(|o| o.id == params.operation_id);
        let Some(op) = op else {
            let _ = reply.send(Err(RpcError::invalid_params(format!(
                "{channel} has no operation {}",
                params.operation_id
            ))));
            return;
        };
        let fits = match &params.target {
            None => op.scopes.contains(&ChangesetOperationScope::Changeset),
            Some(ChangesetOperationTarget::Resource { .. }) => {
                op.scopes.contains(&ChangesetOperationScope::Resource)
            }
            Some(_) => false,
        };
        if !fits {
            let _ = reply.send(Err(RpcError::invalid_params(format!(
                "the operation {} does not take that target",
                params.operation_id
            ))));
            return;
        }
        match session.changeset_operation(*params) {
            Some(future) => {
                tokio::spawn(async move {
                    let result = future.await.map_err(|r| RpcError::invalid_params(r.0));
                    let _ = reply.send(result);
                });
            }
            None => {
                let _ = reply.send(Err(RpcError::session_not_found(&channel)));
            }
        }
    }
}
