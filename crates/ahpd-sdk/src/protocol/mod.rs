//! Protocol dispatch: what each client request and dispatch does.
//!
//! - Requests of a ready connection ([`commands`], [`subscribe`], [`changesets`]) are methods of the
//!   connection's `Conn`: they answer from the host's shared state, the catalogue and the
//!   resources, or hand the work to a session's task.
//! - Dispatches on the root channel ([`rootdispatch`]) are applied under the root's lock.
//! - Dispatches on a session's or a chat's channel ([`dispatch`], [`client_turns`],
//!   [`client_answers`], [`client_calls`], [`mcp`]) run inside that session's task, as
//!   methods of its actor: normalised, validated, applied with the reducers, echoed, then
//!   handed to the backend.
//!
//! This layer may use everything below it (`session`, `channels`, `store`, `resources`, the
//! backend contract) and the connection's helpers for decoding parameters and shaping replies.
//! Only the connection's reader calls into it.

pub(crate) mod changesets;
pub(crate) mod client_answers;
pub(crate) mod client_calls;
pub(crate) mod client_turns;
pub(crate) mod commands;
pub(crate) mod dispatch;
pub(crate) mod mcp;
pub(crate) mod rootdispatch;
pub(crate) mod subscribe;
