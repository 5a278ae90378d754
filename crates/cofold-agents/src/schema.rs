//! schema: to be written.
