//! paths: to be written.
