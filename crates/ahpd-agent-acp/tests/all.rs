//! The acp engine's tests: one binary, every suite in `suite/`.

mod suite;
