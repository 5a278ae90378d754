//! The integration tests of `cofold-config`, one binary. Every test injects its own environment
//! and home folder and works in a temporary folder, so none reads the real user's files and they
//! run in parallel.
mod suite;
