//! The OpenAI-compatible Chat Completions adapter for the cofold runtime.
//!
//! Streams text, reasoning and tool-call deltas as they arrive over SSE, maps errors to the
//! runtime's codes, retries only before a body was read, and reads the `GET /models` catalogue.
