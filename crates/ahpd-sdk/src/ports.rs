//! Optional capabilities an embedder plugs into the host: extension channels and commands
//! (`x-…`), read-only resources, and a session store that keeps what clients chose about their
//! sessions across restarts.

pub use crate::filestore::FileSessionStore;
pub use crate::inner::{ConnInfo, Extension};
pub use crate::resource_port::{ResourceProvider, Resources};
pub use crate::sessionstore::{NestedRecord, SessionRecord, SessionStore, SessionStoreError};
