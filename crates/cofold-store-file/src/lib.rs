//! The durable cofold store.
//!
//! One folder per session under `$COFOLD_HOME` (else `~/.cofold`), append-only JSONL logs, a writer
//! lock with stale takeover, listing, fork, rewind and cut. A crash leaves at most a torn last line,
//! which reading skips.
