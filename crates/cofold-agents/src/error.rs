//! error: to be written.
