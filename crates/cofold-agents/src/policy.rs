//! policy: to be written.
