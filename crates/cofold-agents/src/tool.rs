//! tool: to be written.
