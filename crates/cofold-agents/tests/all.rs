//! The integration tests of `cofold-agents`, one binary.

mod suite;
