//! Test support shared by the workspace's crates.
//!
//! A scripted OpenAI-compatible endpoint that listens on `127.0.0.1:0`, streams real SSE from a
//! script and records every request it received, and helpers around the official `ahp` client.
//! It depends on no project crate, so any crate can use it as a dev-dependency.
