//! The standard cofold capabilities: files, shell, web and memory.
//!
//! Every tool refuses bad input with one sentence the model can act on, keeps its work inside the
//! workspace it was given, and bounds what it reads and returns.

pub mod files;
pub mod memory;
pub mod paths;
pub mod search;
pub mod shell;
pub mod standard;
pub mod walk;
pub mod web;
