//! Holding a run once per process.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};

/// The runs this process holds, keyed by store instance, session and run. A second
/// store instance onto the same data counts as another process.
static HELD: LazyLock<Mutex<HashSet<(usize, String, String)>>> =
    LazyLock::new(|| Mutex::new(HashSet::new()));

/// This process's hold on one run; released when dropped.
pub(crate) struct Hold {
    key: (usize, String, String),
}

impl Hold {
    /// Takes the hold, or `None` when this process already holds the run.
    pub(crate) fn take(store_key: usize, session_id: &str, run_id: &str) -> Option<Hold> {
        let key = (store_key, session_id.to_owned(), run_id.to_owned());
        let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        // Not `then_some`: it would build (and drop, under this lock) a hold for a taken key.
        if held.insert(key.clone()) {
            Some(Hold { key })
        } else {
            None
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        HELD.lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
    }
}
