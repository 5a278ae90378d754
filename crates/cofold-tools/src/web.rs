//! web: to be written.
