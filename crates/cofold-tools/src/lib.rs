//! The standard cofold capabilities: files, shell, web and memory.
//!
//! Every tool refuses bad input with one sentence the model can act on, keeps its work inside the
//! workspace it was given, and bounds what it reads and returns.
//!
//! # What a tool touches, not how it is spelled
//!
//! - **Folders** (`path`, `cwd`) are resolved by [`paths::resolve_within`], links followed and
//!   dangling ones too, and a host's permission modes judge that resolution. The subject of a
//!   path tool, which rules match, is the resolved target seen from the workspace's real path.
//! - **Globs** (`search_files`' `glob`, `list_files`' `pattern`) are confined to their folder by
//!   construction rather than judged as outside reads: one that is absolute, starts with `~`
//!   (not expanded), has a `..` name, or whose leading names go through a link out of the folder
//!   is refused before anything is read, and walks never follow links. Reaching another folder
//!   means naming it as the folder, which the modes judge. Walks have a time limit
//!   ([`files::FilesOptions::walk_limit`]) and say when they stopped on it.
//! - **Special files**: `read_file`, `search_files` and `memory_read` refuse a FIFO, socket or
//!   device before opening it.
//! - **Writes** go through a checked open that follows no link, to the real path judged at the
//!   call; a path spelled inside the workspace whose links lead out of it is refused, so a write
//!   lands inside whenever it was judged inside. `memory_write` cannot replace the memory folder
//!   or put anything under `MEMORY.md`.
//! - **Web**: [`web::is_internal`] refuses the IANA special-purpose ranges on every hop, and a
//!   body is capped at [`web::MAX_FETCH_BYTES`].
//!   Given a [`web::ClientSource`], requests may go through a proxy; the name is still checked
//!   first, but the proxy then resolves it on its own (see [`web::ReqwestFetch`] and
//!   SECURITY.md).
//! - **Commands** cannot outlive their call and never see the daemon's secrets: see
//!   [`shell::ShellEnv`] for the environment and the `shell` module for how a call's processes
//!   are found and killed, and where that stops.

pub mod config_schema;
pub mod files;
pub mod memory;
pub mod paths;
pub mod private;
pub mod project;
/// The web search providers (they live in `web`, whose transport they share).
pub use web::search;
pub mod shell;
pub mod standard;
pub mod walk;
pub mod web;
