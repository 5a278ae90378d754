//! What a session shows outside its own channels: the chat entries in `session.chats[]`, the
//! session activity line, and its catalogue row with `root/sessionSummaryChanged`.

use std::sync::Arc;

use ahp_types::actions::*;
use ahp_types::notifications::{PartialSessionSummary, SessionSummaryChangedParams};
use ahp_types::state::*;

use crate::channels::root;
use crate::session::actor::Actor;
use crate::session::reduce::chat_summary_of;
use crate::store::sessionstore::{NestedRecord, SessionRecord};

impl Actor {
    /// Keep `session.chats[]` and the session activity line in step with a chat's state.
    pub(crate) fn sync_chat_summary(&mut self, chat: &Arc<str>) {
        let Some(slot) = self.chats.get(chat) else {
            return;
        };
        let now = chat_summary_of(&slot.state);
        let Some(old) = self
            .state
            .chats
            .iter()
            .find(|c| c.resource == now.resource)
            .cloned()
        else {
            return;
        };
        let mut changes = PartialChatSummary::default();
        let mut any = false;
        if old.title != now.title {
            changes.title = Some(now.title.clone());
            any = true;
        }
        if old.status != now.status {
            changes.status = Some(now.status);
            any = true;
        }
        if old.activity != now.activity {
            changes.activity = now.activity.clone();
            any = true;
        }
        if any && old.modified_at != now.modified_at {
            changes.modified_at = Some(now.modified_at.clone());
        }
        let activity_changed = old.activity != now.activity && **chat == *self.default_chat;
        if any {
            let action = StateAction::SessionChatUpdated(SessionChatUpdatedAction {
                chat: chat.to_string(),
                changes,
            });
            self.apply_session(&action, None);
        }
        if activity_changed {
            let action = StateAction::SessionActivityChanged(SessionActivityChangedAction {
                activity: now.activity,
            });
            self.apply_session(&action, None);
        }
    }

    /// The catalogue row of this session.
    pub(crate) fn summary(&self) -> SessionSummary {
        let default = self.chats.get(&self.default_chat).map(|c| &c.state);
        let mut status = default
            .map(|c| c.status & 0b1_1111)
            .unwrap_or(SessionStatus::Idle.bits());
        let mut activity = default.and_then(|c| c.activity.clone());
        if let Some(c) = self.chats.values().find(|c| {
            c.state.status & SessionStatus::InputNeeded.bits() == SessionStatus::InputNeeded.bits()
        }) {
            status = SessionStatus::InputNeeded.bits();
            activity = c.state.activity.clone();
        } else if self.chats.values().any(|c| {
            c.state.active_turn.is_none()
                && c.state
                    .turns
                    .last()
                    .is_some_and(|t| t.state == TurnState::Error)
        }) {
            status = (status & !0b1_1111) | SessionStatus::Error.bits();
        }
        status |=
            self.state.status & (SessionStatus::IsRead.bits() | SessionStatus::IsArchived.bits());
        let modified_at = self.modified_at();
        SessionSummary {
            provider: self.state.provider.clone(),
            title: self.state.title.clone(),
            status,
            activity,
            origin: None,
            project: None,
            working_directories: self.state.working_directories.clone(),
            annotations: None,
            resource: self.uri.to_string(),
            created_at: self.created_at.clone(),
            modified_at,
            changes: None,
            meta: None,
            chats: Some(
                self.state
                    .chats
                    .iter()
                    .map(|c| SessionChatSummary {
                        resource: c.resource.clone(),
                        title: c.title.clone(),
                        origin: c.origin.clone(),
                        interactivity: c.interactivity,
                        status: Some(c.status),
                        changes: c.changes.clone(),
                    })
                    .collect(),
            ),
            default_chat: Some(self.default_chat.to_string()),
        }
    }

    /// Publish `root/sessionSummaryChanged` when a catalogue field of this ready session moved.
    pub(crate) fn sync_catalogue(&mut self) {
        let Some(old) = self.catalogue.clone() else {
            return;
        };
        let now = self.summary();
        let mut changes = PartialSessionSummary::default();
        let mut any = false;
        if old.title != now.title {
            changes.title = Some(now.title.clone());
            any = true;
        }
        if old.status != now.status {
            changes.status = Some(now.status);
            any = true;
        }
        if old.activity != now.activity {
            changes.activity = now.activity.clone();
            any = true;
        }
        if old.modified_at != now.modified_at {
            changes.modified_at = Some(now.modified_at.clone());
            any = true;
        }
        if old.chats != now.chats {
            changes.chats = now.chats.clone();
            any = true;
        }
        if old.working_directories != now.working_directories {
            changes.working_directories = now.working_directories.clone();
            any = true;
        }
        if !any {
            return;
        }
        let remember = old.modified_at != now.modified_at || old.title != now.title;
        self.catalogue = Some(now.clone());
        if let Ok(mut reg) = self.inner.registry.lock()
            && let Some(e) = reg.sessions.get_mut(&*self.uri)
        {
            e.summary = Some(now);
        }
        let params = SessionSummaryChangedParams {
            channel: root::ROOT.to_owned(),
            session: self.uri.to_string(),
            changes,
        };
        if let Ok(v) = serde_json::to_value(&params) {
            self.inner
                .hub
                .notify(root::ROOT, "root/sessionSummaryChanged", &v);
        }
        // A session in a machine is listed from its record after a restart, so its record
        // follows its title and last change.
        if remember && self.nested_at().is_some() {
            self.remember();
        }
    }

    /// When the session last changed: its newest chat's change, else its creation.
    fn modified_at(&self) -> String {
        self.chats
            .values()
            .map(|c| c.state.modified_at.clone())
            .max()
            .unwrap_or_else(|| self.created_at.clone())
    }

    /// `(machine, inner provider)` when the session's conversation lives in a machine.
    fn nested_at(&self) -> Option<(String, String)> {
        self.view.nested.lock().ok()?.clone()
    }
}

impl Actor {
    /// Whether this session action changes something the store keeps.
    pub(crate) fn remembers(action: &ahp_types::actions::StateAction) -> bool {
        use ahp_types::actions::StateAction as A;
        matches!(
            action,
            A::SessionReady(_)
                | A::SessionTitleChanged(_)
                | A::SessionIsReadChanged(_)
                | A::SessionIsArchivedChanged(_)
                | A::SessionConfigChanged(_)
        )
    }

    /// Hand this ready session's current facts to the store, if the host has one.
    pub(crate) fn remember(&self) {
        use ahp_types::state::{SessionLifecycle, SessionStatus};
        let Some(store) = &self.inner.store else {
            return;
        };
        if self.closed || self.state.lifecycle != SessionLifecycle::Ready {
            return;
        }
        let Some(backend_id) = self
            .chats
            .get(&self.default_chat)
            .map(|c| c.backend_id.clone())
        else {
            return;
        };
        let flag = |bit: SessionStatus| self.state.status & bit.bits() == bit.bits();
        store.put(SessionRecord {
            uri: self.uri.to_string(),
            provider: self.state.provider.clone(),
            backend_id,
            created_at: self.created_at.clone(),
            title: self.title_locked.then(|| self.state.title.clone()),
            is_read: flag(SessionStatus::IsRead),
            is_archived: flag(SessionStatus::IsArchived),
            config: self
                .state
                .config
                .as_ref()
                .map(|c| c.values.clone())
                .unwrap_or_default(),
            working_directories: self.state.working_directories.clone().unwrap_or_default(),
            nested: self
                .nested_at()
                .map(|(machine, inner_provider)| NestedRecord {
                    machine,
                    inner_provider,
                    title: self.state.title.clone(),
                    modified_at: self.modified_at(),
                }),
        });
    }
}
