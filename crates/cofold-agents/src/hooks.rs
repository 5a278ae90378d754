//! hooks: to be written.
