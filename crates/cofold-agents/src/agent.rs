//! agent: to be written.
