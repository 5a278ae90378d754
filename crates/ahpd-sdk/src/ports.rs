//! Optional capabilities an embedder plugs into the host: extension channels and commands
//! (`x-…`), read-only resources, and a session store that keeps what clients chose about their
//! sessions across restarts.

pub use crate::inner::{ConnInfo, Extension};
pub use crate::resources::port::{ResourceProvider, Resources};
pub use crate::store::filestore::FileSessionStore;
pub use crate::store::sessionstore::{
    NestedRecord, SessionRecord, SessionStore, SessionStoreError,
};
