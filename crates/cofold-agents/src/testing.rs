//! testing: to be written.
