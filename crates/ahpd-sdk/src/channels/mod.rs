//! Channels: the host's outgoing side. [`hub`] numbers every envelope with the global
//! `serverSeq`, keeps the channel → subscriber table and fans envelopes into connection queues;
//! [`ring`] keeps the newest envelopes for clients that reconnect; [`root`] is the root
//! channel's state and its publishing.
//!
//! Sessions, connections and the host publish through this layer; it uses only the backend
//! contract (`agent`, for the root's agent list) and the host's shared state (`inner`).

pub(crate) mod hub;
pub(crate) mod ring;
pub(crate) mod root;
