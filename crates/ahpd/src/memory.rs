//! Giving memory back once turns end.
//!
//! While answers stream, the daemon allocates and frees many small blocks; the allocator keeps
//! the freed pages for reuse, and with the system allocator they stay counted against the
//! daemon until it is told to return them. An editor's daemon spends most of its life idle
//! after a burst of turns, so after turns end the free pages are handed back (see
//! [`crate::sys::release_free_memory`]): at the first end, then at most once a second while more
//! end, and always once after the last.

use std::time::Duration;

/// The least time between two trims: turns ending together share one.
const SPACING: Duration = Duration::from_secs(1);

/// Starts the task that trims after turns end; it ends with the host.
pub fn give_back_after_turns(host: &ahpd_sdk::Host) {
    let mut ends = host.handle().turn_ends();
    tokio::spawn(async move {
        while ends.changed().await.is_ok() {
            // The walk over the free lists takes the allocator's locks; a blocking thread
            // keeps it off the threads that run sessions.
            if tokio::task::spawn_blocking(crate::sys::release_free_memory)
                .await
                .is_err()
            {
                return;
            }
            tokio::time::sleep(SPACING).await;
        }
    });
}
