//! The durable cofold store.
//!
//! One folder per session under `$COFOLD_HOME` (else `~/.cofold`), append-only JSONL logs, a writer
//! lock with stale takeover, listing, fork, rewind and cut. A crash leaves at most a torn last line,
//! which reading skips; a line damaged in the middle of a log is reported with its file and line,
//! and the file is left as it is.
//!
//! ```text
//! sessions/<sessionId>/                     a session without a workspace
//! workspaces/<slug>/sessions/<sessionId>/   a session with one
//!     session.json  messages.jsonl  writer.lock
//!     runs/<runId>/run.json  events.jsonl  steps.jsonl  requests/<requestId>.json
//! kv/agent/<agentId>/<key>.json
//! kv/shared/<namespace>/<key>.json
//! workspaces/<slug>/kv/<key>.json
//! memory/<slug>/                            the memory capability's folder
//! ```

mod crash;
mod durable;
mod home;
mod jsonl;
mod liveness;
mod lock;
mod names;
mod store;

pub use home::{EnvLookup, cofold_home, memory_dir, process_env, resolve_home, workspace_slug};
pub use names::{MAX_SEGMENT_BYTES, decode_segment, encode_segment};
pub use store::steps::DETAIL_CAP_BYTES;
pub use store::{FileStore, FileStoreOptions};
