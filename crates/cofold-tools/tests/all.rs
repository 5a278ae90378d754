//! The one integration test binary of cofold-tools.

mod suite;
