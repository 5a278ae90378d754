//! The integration tests of `cofold-store-file`, one binary.

mod suite;
