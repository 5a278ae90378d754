//! files: to be written.
