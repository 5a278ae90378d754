//! walk: to be written.
