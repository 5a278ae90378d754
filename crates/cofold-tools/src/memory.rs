//! memory: to be written.
