//! The engine's integration suite: one binary, the cases under `suite/`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
