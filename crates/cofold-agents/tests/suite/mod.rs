//! Test modules, one concept each.

mod agent;
mod capabilities;
mod fake_model;
mod policy;
mod policy_modes;
mod questions;
mod schema;
mod secrets;
mod tools;

mod answers;
mod compaction;
mod compaction_budget;
mod dead_runs;
mod hook_stops;
mod interrupts;
mod limits;
mod panics;
mod pause_support;
mod pauses;
mod resume;
mod run_failures;
mod run_support;
mod runs;
mod steering;
mod store_memory;
mod streaming;
mod tool_calls;
mod tool_execution;
