//! question: to be written.
