//! Test modules, one concept each.

mod agent;
mod capabilities;
mod fake_model;
mod policy;
mod questions;
mod schema;
mod tools;

mod store_memory;
