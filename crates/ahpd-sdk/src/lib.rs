//! An Agent Host Protocol 1.0 host.
//!
//! Serves any backend that implements the [`Agent`] and [`Session`] traits over WebSocket and
//! stdio. The host's state is built by applying every emitted action with the official `ahp`
//! reducers, so a client that replays actions and a client that takes a snapshot always agree.
//! This crate knows nothing of cofold.
//!
//! # Map
//!
//! The folders are the layers; each says in its module doc what it owns and what it may use.
//! A request travels down this list and its answer and the state changes it causes come back
//! up through `channels`.
//!
//! | folder | owns |
//! | --- | --- |
//! | [`transport`] | byte streams (WebSocket, stdio, in memory) turned into a [`Peer`] |
//! | `connection` | one connection: reading frames, the handshake, request order, the writer |
//! | `protocol` | what each request and dispatch does (handlers on the connection and on a session's task) |
//! | `session` | one task per session owning its state, its chats' backends and everything parked |
//! | `channels` | `serverSeq`, subscriptions, fan-out, the replay ring and the root channel |
//! | `store` | the catalogue (`listSessions`) and the session store that survives restarts |
//! | [`resources`] | `file:` resources and the providers of other URI schemes |
//! | [`nested`] | machines ([`machine`]) and sessions whose agent runs inside one |
//!
//! Beside them sit the public surface: [`agent`] (the backend contract), [`host`] (building
//! and serving a host; its shared state is the private `inner`), [`plugin`], [`ports`],
//! [`error`], [`util`], [`attachments`] and, with feature `testing`, `testing`.
//!
//! # Shape
//!
//! - A backend implements [`Agent`] (one provider: descriptor, config schema and defaults,
//!   `create`, and optionally `list`/`find`/`transcript`/`delete`/`probe`) and [`Session`] (one
//!   chat's conversation: `begin`, `cancel`, `close`, optionally `steer`, `configure`,
//!   `resume_turn`, `rewind`). A session reports only through its [`SessionContext`]:
//!   `emit` actions, `ask_approval`, `ask_input`, `call_client_tool`.
//! - A daemon plugin implements [`plugin::Plugin`] and registers [`plugin::Engine`]s or fixed
//!   agents with a [`plugin::Registrar`].
//! - An embedder builds a [`Host`] with [`HostBuilder`] and hands it connections:
//!   [`Host::serve_ws`], [`Host::serve_stdio`] or [`Host::accept`] with any [`Peer`].
//! - Extra `x-` channels and commands are served through [`ports::Extension`]; an extension
//!   publishes through [`HostHandle::publish_extension`].
//! - What clients choose about their sessions (a title, the read and archived flags, config
//!   values, the URI spelling) survives a restart when the host has a session store:
//!   [`HostBuilder::session_store`] with a [`ports::FileSessionStore`] (one JSON file, mode
//!   `0600`, replaced atomically) or any [`ports::SessionStore`]. Without one (the default) a
//!   restart forgets them and the catalogue comes from each agent's `list` alone. Call
//!   [`HostHandle::flush_session_store`] before the process exits.
//! - An agent that advertises `capabilities.multipleChats` gets one [`Session`] per chat.
//!   With `multipleChats.fork`, `createChat` with `source: {kind: "fork", chat, turnId}`
//!   starts the new chat with every turn of the source chat through that turn (older pages
//!   are loaded into the source first) and opens its backend with [`SessionStart::fork`] set
//!   to the source conversation and the point [`Session::fork_point`] names (or just the
//!   turn, when the source's backend is not open).
//! - Every state change is published only when its reducer changed something, with one
//!   exception: a backend's `chat/usage` for the running turn is always published, since a
//!   turn's final usage report often repeats the last one.
//!
//! ```no_run
//! # async fn run(agent: std::sync::Arc<dyn ahpd_sdk::Agent>) -> Result<(), ahpd_sdk::HostError> {
//! use ahpd_sdk::{HostBuilder, transport::ws::WsConfig};
//! use ahpd_sdk::ports::FileSessionStore;
//! let store = FileSessionStore::open("/var/lib/me/sessions.json")?;
//! let host = HostBuilder::new()
//!     .path("/work")
//!     .agent(agent)
//!     .session_store(std::sync::Arc::new(store))
//!     .build()?;
//! let server = host.serve_ws(WsConfig::loopback(9187)).await?;
//! server.wait().await;
//! # Ok(()) }
//! ```

// The public surface: the backend contract, the host, its ports and shared helpers.
pub mod agent;
pub mod attachments;
pub mod error;
pub mod host;
mod inner;
mod options;
pub mod plugin;
pub mod ports;
pub mod util;

pub mod changesets;
// The layers (the map above says what each owns).
mod channels;
mod connection;
pub mod nested;
mod protocol;
pub mod resources;
mod session;
mod store;
pub mod transport;

#[cfg(feature = "testing")]
pub mod testing;

pub use nested::machine;
pub use transport::peer;

pub use agent::{
    Agent, AgentDescriptor, AgentError, ApprovalOutcome, ApprovalRequest, ClientToolCall, ForkFrom,
    ForkPoint, InputOutcome, OperationFuture, PastSession, Probe, Refusal, Secret, Session,
    SessionContext, SessionStart, TurnRequest,
};
pub use error::{HostError, RpcError};
pub use host::{Host, HostBuilder, HostHandle, HostOptions};
pub use peer::{Inbound, Peer, PeerError, PeerReader, PeerWriter};

/// The wire types, re-exported so backends need no second dependency line.
pub use ahp_types;
