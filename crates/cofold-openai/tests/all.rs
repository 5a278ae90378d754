//! The integration tests of `cofold-openai`, one binary, against the scripted endpoint over real
//! HTTP on loopback.
mod suite;
