//! Test modules, one concept each.

mod agent;
mod capabilities;
mod fake_model;
mod policy;
mod questions;
mod schema;
mod tools;

mod run_support;
mod compaction;
mod answers;
mod limits;
mod streaming;
mod steering;
mod interrupts;
mod tool_calls;
mod runs;
mod store_memory;
