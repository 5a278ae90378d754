//! store: to be written.
