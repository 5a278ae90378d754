//! An Agent Host Protocol 1.0 host.
//!
//! Serves any backend that implements the [`Agent`](crate) and `Session` traits over WebSocket and
//! stdio. The host's state is built by applying every emitted action with the official `ahp`
//! reducers, so a client that replays actions and a client that takes a snapshot always agree.
//! This crate knows nothing of cofold.
