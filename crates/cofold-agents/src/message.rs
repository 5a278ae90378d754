//! message: to be written.
