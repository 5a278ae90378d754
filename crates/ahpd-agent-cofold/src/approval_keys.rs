//! One open approval per call id and session.
//!
//! The host holds a session's open approvals by tool-call id, and models number their calls
//! per conversation, so two chats of one session can ask about calls of the same id at once;
//! the second request would then take the first one's place. Each chat's approval of a call id
//! therefore waits until the session's earlier approval of that id has been answered.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

type Turnstile = Arc<tokio::sync::Mutex<()>>;

static OPEN: LazyLock<Mutex<HashMap<String, Turnstile>>> = LazyLock::new(Mutex::default);

fn open() -> std::sync::MutexGuard<'static, HashMap<String, Turnstile>> {
    // A panic in another holder leaves the map as it was; carry on with it.
    OPEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Held while one approval is open; dropping it lets the next of the same key be asked.
pub(crate) struct Held {
    key: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        let turnstile = Arc::clone(tokio::sync::OwnedMutexGuard::mutex(&guard));
        drop(guard);
        let mut open = open();
        // Only the map and this function hold it: nobody waits, the entry goes. A waiter
        // takes its copy under the map's lock, so none can slip in between.
        if Arc::strong_count(&turnstile) == 2 {
            open.remove(&self.key);
        }
    }
}

/// Waits until no other approval of `call_id` is open in the session, then holds the key.
pub(crate) async fn hold(session_uri: &str, call_id: &str) -> Held {
    let key = format!("{session_uri}\u{0}{call_id}");
    let turnstile = open().entry(key.clone()).or_default().clone();
    let guard = turnstile.lock_owned().await;
    Held {
        key,
        guard: Some(guard),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_second_holder_of_a_key_waits_for_the_first() {
        let first = hold("s", "c1").await;
        let other = hold("s", "c2").await;
        let mut second = Box::pin(hold("s", "c1"));
        assert!(futures::poll!(second.as_mut()).is_pending());
        drop(first);
        let second = second.await;
        drop(second);
        drop(other);
        assert!(open().keys().all(|k| !k.starts_with("s\u{0}")));
    }
}
