//! shell: to be written.
