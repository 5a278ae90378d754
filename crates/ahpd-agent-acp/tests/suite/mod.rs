//! The suites.

mod fake;
mod fast_agent;
mod support;
mod vibe;
