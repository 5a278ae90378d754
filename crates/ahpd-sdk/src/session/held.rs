//! The dispatches a session holds until the backends they need are open, in arrival order,
//! and the changeset requests held until their chat's backend opens.
//! The actor queues and releases them through this part only (the rules of holding are in
//! `parked.rs`).

use std::sync::Arc;

use ahp_types::commands::{InvokeChangesetOperationParams, InvokeChangesetOperationResult};
use ahp_types::state::Snapshot;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::error::RpcError;
use crate::session::ConnRef;

/// A dispatch waiting for backends to open.
pub(crate) struct Parked {
    pub conn: ConnRef,
    pub channel: String,
    pub client_seq: i64,
    pub raw: Value,
    /// The chats whose backends it needs: one chat, or every chat for a session action.
    pub targets: Vec<Arc<str>>,
}

/// The held dispatches of one session, oldest first.
#[derive(Default)]
pub(crate) struct Held {
    queue: Vec<Parked>,
}

impl Held {
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Holds a new dispatch behind the others.
    pub(crate) fn push(&mut self, p: Parked) {
        self.queue.push(p);
    }

    /// Puts a released dispatch that must wait again back at the front, where it was.
    pub(crate) fn push_front(&mut self, p: Parked) {
        self.queue.insert(0, p);
    }

    /// Takes out every dispatch that needs `chat`'s backend.
    pub(crate) fn take_needing(&mut self, chat: &Arc<str>) -> Vec<Parked> {
        let (taken, kept) = std::mem::take(&mut self.queue)
            .into_iter()
            .partition(|p| p.targets.contains(chat));
        self.queue = kept;
        taken
    }

    /// Takes out the oldest dispatch unless `waits` says it must wait still; the front only, so
    /// a later dispatch never overtakes an earlier one.
    pub(crate) fn next_unless(&mut self, waits: impl Fn(&Parked) -> bool) -> Option<Parked> {
        match self.queue.first() {
            Some(first) if !waits(first) => Some(self.queue.remove(0)),
            _ => None,
        }
    }
}

/// A changeset request (a subscription or an operation) that waits for its chat's backend to
/// open.
pub(crate) enum Waiting {
    Subscribe {
        conn: u64,
        channel: String,
        reply: oneshot::Sender<Result<Snapshot, RpcError>>,
    },
    Operation {
        params: Box<InvokeChangesetOperationParams>,
        reply: oneshot::Sender<Result<InvokeChangesetOperationResult, RpcError>>,
    },
}

impl Waiting {
    /// Answers the request with `error`.
    pub(crate) fn fail(self, error: RpcError) {
        match self {
            Waiting::Subscribe { reply, .. } => {
                let _ = reply.send(Err(error));
            }
            Waiting::Operation { reply, .. } => {
                let _ = reply.send(Err(error));
            }
        }
    }
}
