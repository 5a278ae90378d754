//! usage: to be written.
