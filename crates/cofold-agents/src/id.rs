//! id: to be written.
