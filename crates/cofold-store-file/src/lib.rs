//! The durable cofold store.
//!
//! One folder per session under `$COFOLD_HOME` (else `~/.cofold`), append-only JSONL logs, a writer
//! claim that tells a live holder from a dead one, listing, fork, rewind and cut.
//!
//! ```text
//! sessions/<sessionId>/                     a session without a workspace
//! workspaces/<slug>/sessions/<sessionId>/   a session with one
//!     session.json  messages.jsonl  writer.lock
//!     context.json                          where the context of a compacted session starts
//!     rewind.json  rewind.messages.jsonl    only while a rewind is under way
//!     runs/<runId>/run.json  events.jsonl  steps.jsonl  requests/<requestId>.json
//! kv/agent/<agentId>/<key>.json
//! kv/shared/<namespace>/<key>.json
//! workspaces/<slug>/kv/<key>.json
//! memory/<slug>/                            the memory capability's folder
//! ```
//!
//! # Durability
//!
//! What the store promises when the process is killed at any instant, or the machine loses power:
//!
//! - **Logs are synced at the points a person would not want to lose, not per chunk.**
//!   `messages.jsonl` is `fdatasync`ed on every append (a user message, an answer, a tool result:
//!   each is such a point). `events.jsonl` is synced after every event except the stream of a
//!   model's reply (`model.delta`) and the announcements `model.started`, `tool.proposed` and
//!   `tool.started`, so a settled run, a tool's result and a paused request are on disk when their
//!   event is stored.
//!   `steps.jsonl` is synced when a tool step is opened (before the tool runs, so a call that ran is
//!   never taken for one that did not) and when it is closed.
//! - **Whole files are replaced, never rewritten in place.** `session.json`, `run.json`, requests,
//!   kv entries, the context index and a rewound transcript are written to a temporary file in the
//!   same folder, `fsync`ed, renamed over the old file, and the folder is `fsync`ed: after a crash
//!   the old file or the new one is there, never an empty or half one. The two refreshes that
//!   follow every message append (the session's `updatedAt`, the run's `lastMessageId`) skip the
//!   folder sync: losing one leaves the previous record, whole. `writer.lock` is renamed into place
//!   without syncing: after a power loss its holder is gone anyway.
//! - **Delete and rewind leave the old state or the new one.** A delete renames the session folder
//!   to a tombstone (`%tmp-removed-…`, which no lookup or listing sees), syncs, then removes it; a
//!   crash leaves a tombstone that the next open deletes, and an id created again starts empty. A
//!   new session is built in a temporary folder and renamed into place, so a session folder never
//!   exists without its record. A rewind first prepares the cut transcript, then writes
//!   `rewind.json` naming the runs that go; from then on whoever touches the session next finishes
//!   it (every step may safely run twice), before anything reads it.
//! - **A damaged log stays readable.** A line that does not parse (a torn last line, NUL bytes a
//!   power loss left, garbage) is skipped wherever it is and reported in the log with its file and
//!   line number; the rest of the file is read. The next append first cuts off a damaged fragment
//!   after the last newline (a whole record that only lost its newline is kept), so new lines start
//!   on a clean line. Reading never changes a file.
//!
//! # The writer claim
//!
//! `writer.lock` names the run allowed to write a session and the process it runs in: the pid, the
//! process's start time (from `/proc/<pid>/stat`), the kernel's boot id and the pid namespace. A pid
//! alone cannot judge liveness: after a restart it is reused, and containers sharing one store each
//! have their own pids. With all four, a process on the same boot and in the same namespace is judged
//! at once and for certain: it runs, or the claim is dead and is taken without waiting. Only when the
//! holder cannot be seen from here (another machine, another pid namespace, no `/proc`) does the
//! heartbeat decide, with [`FileStoreOptions::stale_after`] as the age limit; this errs on the side of
//! waiting, since taking over a live writer would interleave two runs in one transcript. A claim
//! whose holder is alive is never taken, whatever run the newcomer names; a dead holder's claim is
//! taken by any run, except that a paused run's claim stays with that run (only its resume takes
//! it). Rewind, fork and delete are refused only while a live holder runs.
//!
//! # Reading what a run needs
//!
//! A run's context is the newest summary and the messages no summary covers;
//! [`Store::list_context_messages`](cofold_agents::store::Store::list_context_messages) reads it
//! from the byte `context.json` records, so a long compacted session costs its context, not its
//! history. The end of a run's events (`list_events` after a seq, `last_event_seq`) is read
//! backwards from the end of the log. `steps.jsonl` holds each step once and then a short patch line
//! per change, so a model request is stored once and an update reads back only to its step.

mod crash;
mod durable;
mod home;
mod jsonl;
mod liveness;
mod lock;
mod names;
mod private;
mod store;

pub use home::{EnvLookup, cofold_home, memory_dir, process_env, resolve_home, workspace_slug};
pub use names::{MAX_SEGMENT_BYTES, decode_segment, encode_segment};
pub use store::steps::DETAIL_CAP_BYTES;
pub use store::{FileStore, FileStoreOptions};
