//! The integration tests of `testkit`, one binary.
mod suite;
