//! thinking: to be written.
