//! The catalogue and the session store: what the host knows of sessions beyond the ones loaded.
//!
//! [`sessionstore`] is the port (what is remembered of each session and the store's trait),
//! [`filestore`] the store as one JSON file, [`remember`] the host's in-memory copy kept in
//! step by the session tasks and saved at most once a second, and [`catalogue`] answers
//! `listSessions` from the live sessions and every agent's stored conversations.
//!
//! This layer may use the backend contract (`agent`, for `list`) and the host's shared state;
//! it knows nothing of connections or of a session's task.

pub(crate) mod catalogue;
pub(crate) mod filestore;
pub(crate) mod remember;
pub(crate) mod sessionstore;
