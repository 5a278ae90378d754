//! The crate's integration tests (case M12 of docs/acceptance.md and its neighbours).
#![allow(clippy::unwrap_used)]

mod suite;
