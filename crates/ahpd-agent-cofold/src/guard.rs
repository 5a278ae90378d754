//! What the daemon hands the engine so that a session's tools keep the person's secrets and
//! credential stores to the person: the secrets it knows (its connection token, the vault's
//! values) and the paths it never serves. The engine adds the provider keys it knows itself.
//!
//! Both are read at the start of each turn, so a vault value added while the daemon runs is
//! protected from the next turn on.

use std::path::Path;
use std::sync::{Arc, RwLock};

pub use cofold_agents::secrets::{MIN_SECRET_CHARS, Secrets};
pub use cofold_tools::private::{CREDENTIAL_STORE, HOME_CREDENTIALS, HOST_FILES, PrivateSet};

/// The name the daemon offers the guard under, as a plugin service.
pub const GUARD_SERVICE: &str = "guard";

/// The daemon's secrets and private paths, shared with the engine.
#[derive(Debug, Default)]
pub struct HostGuard {
    secrets: RwLock<Secrets>,
    private: RwLock<PrivateSet>,
}

impl HostGuard {
    /// An empty guard.
    pub fn new() -> Arc<HostGuard> {
        Arc::default()
    }

    /// Replaces the secrets.
    pub fn set_secrets(&self, secrets: Secrets) {
        *self.secrets.write().unwrap_or_else(|e| e.into_inner()) = secrets;
    }

    /// Replaces the private paths.
    pub fn set_private(&self, private: PrivateSet) {
        *self.private.write().unwrap_or_else(|e| e.into_inner()) = private;
    }

    /// The secrets now.
    pub fn secrets(&self) -> Secrets {
        self.secrets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The private paths now.
    pub fn private(&self) -> PrivateSet {
        self.private
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The private paths a session has when the daemon gave none: the credential stores under the
/// home folder and the engine's own store.
pub fn default_private(home: &Path, store_root: Option<&Path>) -> PrivateSet {
    let set = PrivateSet::home_credentials(home);
    match store_root {
        Some(root) => set.with_paths([root.to_path_buf()], HOST_FILES),
        None => set,
    }
}
