//! Changeset channels a backend publishes under its chat (`<chat URI>/changes/…`), and
//! `invokeChangesetOperation`, answered by the backend.
//!
//! The backend owns what a changeset holds: a subscription asks it for the state once
//! ([`crate::Session::changeset`]), and every later change arrives as a `changeset/*` action
//! ([`crate::SessionContext::emit_changeset`]) that the host applies with the official reducer
//! to the state it keeps for that channel, then publishes. Nobody subscribed: the action is
//! dropped, and the next subscription asks the backend again.
//!
//! This module names the channels; the session's task keeps their state
//! (`session::changesets`) and the connection routes operations to it
//! (`protocol::changesets`).

/// What a chat's changeset URIs put after the chat's own URI.
pub const CHANGES_SEGMENT: &str = "/changes/";

/// The chat a changeset URI belongs to.
pub(crate) fn owner_chat(channel: &str) -> Option<&str> {
    channel
        .find(CHANGES_SEGMENT)
        .map(|at| &channel[..at])
        .filter(|c| !c.is_empty())
}
