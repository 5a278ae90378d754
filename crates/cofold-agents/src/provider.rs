//! provider: to be written.
