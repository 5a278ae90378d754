//! Delivery of a session's changes to its watchers: subscribing (a snapshot the stream then
//! continues from) and the coalescing of streamed deltas, each chat's `Coalescer` deciding what
//! goes out now and what is merged until its window closes.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::state::*;
use tokio::time::Instant;

use crate::error::RpcError;
use crate::session::actor::Actor;
use crate::session::coalesce::Offer;

impl Actor {
    // ── subscriptions and snapshots ─────────────────────────────────────────────────────

    pub(crate) fn snapshot_at(&self, channel: &str, seq: u64) -> Option<Snapshot> {
        if crate::changesets::owner_chat(channel).is_some() {
            return self.changeset_snapshot(channel, seq);
        }
        let state = if channel == &*self.uri {
            SnapshotState::Session(Box::new(self.state.clone()))
        } else {
            SnapshotState::Chat(Box::new(self.chats.get(channel)?.state.clone()))
        };
        Some(Snapshot {
            resource: channel.to_owned(),
            state,
            from_seq: seq as i64,
        })
    }

    pub(crate) fn subscribe(&mut self, conn: u64, channel: &str) -> Result<Snapshot, RpcError> {
        if channel != &*self.uri && !self.chats.contains_key(channel) {
            return Err(RpcError::session_not_found(channel));
        }
        // Pending merged deltas go out first so the snapshot and the stream agree.
        self.flush_all();
        let seq = self.inner.hub.subscribe(conn, channel);
        self.snapshot_at(channel, seq)
            .ok_or_else(|| RpcError::session_not_found(channel))
    }

    // ── coalescing ──────────────────────────────────────────────────────────────────────

    pub(crate) fn flush_due(&mut self) {
        let now = Instant::now();
        let due: Vec<Arc<str>> = self
            .chats
            .iter()
            .filter(|(_, c)| c.coalescer.deadline().is_some_and(|d| d <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for chat in due {
            self.flush_chat(&chat);
        }
    }

    pub(crate) fn flush_chat(&mut self, chat: &Arc<str>) {
        let merged = match self.chats.get_mut(chat) {
            Some(slot) => slot.coalescer.take(),
            None => None,
        };
        if let Some(action) = merged {
            self.apply_chat_now(chat, &action, None);
        }
    }

    pub(crate) fn flush_all(&mut self) {
        let chats: Vec<Arc<str>> = self.chats.keys().cloned().collect();
        for chat in chats {
            self.flush_chat(&chat);
        }
    }

    /// A delta from the backend: published at once or merged, per the coalescing window.
    pub(crate) fn delta(&mut self, chat: &Arc<str>, action: StateAction) {
        let Some(slot) = self.chats.get_mut(chat) else {
            return;
        };
        match slot.coalescer.offer(action) {
            Offer::PublishNow(actions) => {
                for a in actions {
                    self.apply_chat_now(chat, &a, None);
                }
            }
            Offer::Held => {}
        }
    }
}
