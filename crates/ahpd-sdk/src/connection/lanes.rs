//! The order requests of one connection keep while they run concurrently.
//!
//! Every session has a lane, named by its URI; a chat's work goes to its session's lane. Work
//! that creates, opens, removes or changes what a channel is (`createSession`, `disposeSession`,
//! `createChat`, `disposeChat`, `subscribe`, `unsubscribe`, an extension command, and a
//! `dispatchAction` that could not be handed over at once) becomes the lane's tail: it starts
//! once everything before it in the lane finished. Reads (`fetchTurns`, `completions`) wait for
//! the tail they found and do not hold up what comes after them. Root commands have no lane.

use std::collections::HashMap;

use tokio::sync::watch;

use crate::inner::HostInner;

/// A place in a lane: what to wait for before starting, and (for tail work) the signal the
/// next one waits for, given when this value is dropped.
pub(crate) struct Place {
    before: Option<watch::Receiver<()>>,
    _done: Option<watch::Sender<()>>,
}

impl Place {
    /// Resolve once the work this place was queued behind has finished.
    pub(crate) async fn ready(&mut self) {
        if let Some(mut rx) = self.before.take() {
            // Every sender is dropped unused: `wait_for` returns once it is.
            let _ = rx.wait_for(|_| false).await;
        }
    }
}

/// Lanes past this many are checked for finished ones on the next enqueue.
const PRUNE_AT: usize = 64;

#[derive(Default)]
pub(crate) struct Lanes {
    tails: HashMap<String, watch::Receiver<()>>,
    /// Chats this connection asked to create, by chat URI, so work on a chat that does not
    /// exist yet still lines up behind its `createChat`.
    pending_chats: HashMap<String, String>,
}

impl Lanes {
    /// The lane a channel's work goes to.
    pub(crate) fn key(&self, inner: &HostInner, channel: &str) -> String {
        if let Some(session) = crate::session::default_chat_owner(channel) {
            return session;
        }
        if let Some(session) = self.pending_chats.get(channel) {
            return session.clone();
        }
        if channel.starts_with("ahp-chat:")
            && let Ok(reg) = inner.registry.lock()
            && let Some(session) = reg.chats.get(channel)
        {
            return session.clone();
        }
        channel.to_owned()
    }

    /// Remember that `chat` belongs to `session` while its creation is in flight.
    pub(crate) fn chat_pending(&mut self, chat: &str, session: &str) {
        self.pending_chats
            .insert(chat.to_owned(), session.to_owned());
    }

    /// Whether work queued in the lane has not finished yet.
    pub(crate) fn busy(&self, key: &str) -> bool {
        self.tails
            .get(key)
            .is_some_and(|rx| rx.has_changed().is_ok())
    }

    /// Queue tail work: it waits for the current tail and becomes the new one.
    pub(crate) fn tail(&mut self, key: &str) -> Place {
        if self.tails.len() >= PRUNE_AT {
            self.prune();
        }
        let (tx, rx) = watch::channel(());
        let before = self.tails.insert(key.to_owned(), rx);
        Place {
            before,
            _done: Some(tx),
        }
    }

    /// Queue a read: it waits for the current tail only.
    pub(crate) fn after(&self, key: &str) -> Place {
        Place {
            before: self.tails.get(key).cloned(),
            _done: None,
        }
    }

    fn prune(&mut self) {
        self.tails.retain(|_, rx| rx.has_changed().is_ok());
        let tails = &self.tails;
        self.pending_chats
            .retain(|_, session| tails.contains_key(session));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tail_work_runs_in_order_and_reads_wait_for_the_tail() {
        let mut lanes = Lanes::default();
        let first = lanes.tail("s");
        assert!(lanes.busy("s"));
        let mut second = lanes.tail("s");
        let mut read = lanes.after("s");
        let mut other = lanes.tail("t");
        // Another lane does not wait.
        other.ready().await;
        let waiting = tokio::spawn(async move {
            second.ready().await;
            drop(second);
            read.ready().await;
        });
        assert!(!waiting.is_finished());
        drop(first);
        waiting.await.expect("the second place is released");
        assert!(!lanes.busy("s"));
    }
}
