//! event: to be written.
