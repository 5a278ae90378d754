//! search: to be written.
