//! The cofold agent runtime.
//!
//! This crate holds the contracts every other cofold crate meets through: tools and their JSON
//! Schema input, capabilities and the system prompt, messages and parts, model adapters, the
//! permission policy with its six modes, the `Store` trait, and the run loop that drives a model
//! through tool calls, pauses for approval, and survives cancel and restart. It does no network or
//! disk I/O of its own: models and stores are traits implemented elsewhere.

// Contracts.
pub mod abort;
pub mod agent;
pub mod ask;
pub mod capability;
pub mod error;
pub mod hooks;
pub mod id;
pub mod message;
pub mod model;
pub mod policy;
pub mod provider;
pub mod question;
pub mod schema;
pub mod secrets;
pub mod status;
pub mod thinking;
pub mod tool;

// Durable state.
pub mod store;

// The run loop.
pub mod compaction;
pub mod event;
pub mod pairing;
pub mod run;
pub mod usage;

#[cfg(feature = "testing")]
pub mod testing;
