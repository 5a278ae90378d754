//! standard: to be written.
