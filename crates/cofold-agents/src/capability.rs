//! capability: to be written.
