//! An Agent Host Protocol 1.0 host.
//!
//! Serves any backend that implements the [`Agent`] and [`Session`] traits over WebSocket and
//! stdio. The host's state is built by applying every emitted action with the official `ahp`
//! reducers, so a client that replays actions and a client that takes a snapshot always agree.
//! This crate knows nothing of cofold.
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

pub mod agent;
pub mod attachments;
pub mod error;
pub mod host;
pub mod machine;
pub mod nested;
pub mod peer;
pub mod plugin;
pub mod ports;
pub mod resources;
pub mod transport;
pub mod util;

mod actor;
mod asks;
mod backend;
mod catalogue;
pub mod changesets;
mod chats;
mod client_answers;
mod client_calls;
mod client_turns;
mod coalesce;
mod commands;
mod config;
mod connection;
mod context;
mod delivery;
mod dispatch;
mod exchange;
mod filestore;
mod handshake;
mod held;
mod hub;
mod inner;
mod lanes;
mod lifecycle;
mod mcp;
mod open;
mod options;
mod parked;
mod reduce;
mod remember;
mod resource_port;
mod resource_routing;
mod ring;
mod root;
mod rootdispatch;
mod session;
mod sessionstore;
mod subscribe;
mod summary;
mod turn_flow;
mod turns;
mod unload;
mod writer;

#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "testing")]
mod testing_script;

pub use agent::{
    Agent, AgentDescriptor, AgentError, ApprovalOutcome, ApprovalRequest, ClientToolCall, ForkFrom,
    ForkPoint, InputOutcome, PastSession, Probe, Refusal, Secret, Session, SessionContext,
    SessionStart, TurnRequest,
};
pub use error::{HostError, RpcError};
pub use host::{Host, HostBuilder, HostHandle, HostOptions};
pub use peer::{Inbound, Peer, PeerError, PeerReader, PeerWriter};

/// The wire types, re-exported so backends need no second dependency line.
pub use ahp_types;
