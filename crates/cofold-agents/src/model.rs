//! model: to be written.
