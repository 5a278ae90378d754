//! run: to be written.
