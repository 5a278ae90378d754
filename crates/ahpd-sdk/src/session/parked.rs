//! Client dispatches that need a backend which is not open yet: a config change, a
//! turn resume or a rewind on a past session. The host opens the backend on the stored
//! conversation, holds the dispatch, and handles it as if it had just arrived once every
//! backend it needs is open; if opening fails, the dispatch is refused with the failure.

use std::sync::Arc;

use ahp_types::actions::ActionOrigin;
use serde_json::Value;

use crate::session::ConnRef;
use crate::session::actor::{Actor, Backend};
use crate::session::held::Parked;

/// The action types whose handling calls into a backend before the state changes.
pub(crate) fn needs_backend(raw: &Value) -> bool {
    matches!(
        raw.get("type").and_then(Value::as_str),
        Some("session/configChanged" | "chat/turnResume" | "chat/truncated")
    )
}

impl Actor {
    /// Hold the dispatch when a backend it needs is not open, opening the ones nobody is
    /// opening yet; a new dispatch also waits behind any held one. `true` means it was held
    /// and must not be handled now. `replaying` is a held dispatch being released, which goes
    /// back to the front if it must wait again.
    pub(crate) fn park_for_backend(
        &mut self,
        conn: &ConnRef,
        channel: &str,
        chat: Option<&Arc<str>>,
        client_seq: i64,
        raw: &Value,
        replaying: bool,
    ) -> bool {
        if !needs_backend(raw) {
            return false;
        }
        let targets: Vec<Arc<str>> = match chat {
            Some(c) => vec![c.clone()],
            None => self.chats.keys().cloned().collect(),
        };
        let mut waiting = false;
        for c in &targets {
            let Some(slot) = self.chats.get_mut(c) else {
                continue;
            };
            match slot.backend {
                Backend::Ready(_) => {}
                Backend::Creating(_) => waiting = true,
                Backend::None => {
                    slot.backend = Backend::Creating(Vec::new());
                    self.spawn_create(c.clone(), None);
                    waiting = true;
                }
            }
        }
        let held = |targets| Parked {
            conn: conn.clone(),
            channel: channel.to_owned(),
            client_seq,
            raw: raw.clone(),
            targets,
        };
        if replaying {
            if waiting {
                self.parked.push_front(held(targets));
            }
            return waiting;
        }
        // Another dispatch already waiting keeps its place ahead of this one.
        if waiting || !self.parked.is_empty() {
            self.parked.push(held(targets));
            return true;
        }
        false
    }

    /// A backend finished opening (or failed to): refuse what waited on a failed one, then
    /// handle, in arrival order, what no longer waits for anything.
    pub(crate) fn release_parked(&mut self, chat: &Arc<str>, failure: Option<&str>) {
        if let Some(failure) = failure {
            let failed = self.parked.take_needing(chat);
            let reason = format!("the agent could not open this conversation: {failure}");
            for p in failed {
                let origin = ActionOrigin {
                    client_id: p.conn.client_id.clone(),
                    client_seq: p.client_seq,
                };
                self.inner
                    .hub
                    .reject(p.conn.id, &p.channel, &p.raw.to_string(), &origin, &reason);
            }
        }
        // Release from the front only, so a later dispatch never overtakes an earlier one.
        loop {
            let chats = &self.chats;
            let opening = |p: &Parked| {
                p.targets
                    .iter()
                    .any(|c| matches!(chats.get(c).map(|s| &s.backend), Some(Backend::Creating(_))))
            };
            let Some(p) = self.parked.next_unless(opening) else {
                break;
            };
            // Handled afresh: validation runs against the state as it is now, and a backend
            // that went away again in the meantime is reopened.
            self.dispatch_now(p.conn, &p.channel, p.client_seq, p.raw, true);
        }
    }
}
