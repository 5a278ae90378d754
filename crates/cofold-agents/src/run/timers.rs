//! The run's timers: the heartbeat that keeps its writer claim fresh, and the watchers that turn
//! an external signal or the time limit into the run's abort. The runner owns them as one part;
//! they all stop when the run settles or its task is dropped (a panicking task drops its runner
//! while unwinding, and its timers must not outlive it).

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::HEARTBEAT_MS;
use crate::store::Store;
use crate::tool::{AbortController, AbortReason, AbortSignal};

/// The spawned timer tasks of one run.
#[derive(Default)]
pub(crate) struct Timers {
    heartbeat: Option<JoinHandle<()>>,
    /// Signal and time-limit watchers.
    watchers: Vec<JoinHandle<()>>,
}

impl Timers {
    /// Starts (or restarts) the heartbeat of `run`'s claim on `session` in `store`.
    pub(crate) fn start_heartbeat(&mut self, store: Arc<dyn Store>, session: String, run: String) {
        self.stop_heartbeat();
        self.heartbeat = Some(tokio::spawn(async move {
            let period = Duration::from_millis(HEARTBEAT_MS);
            let mut next = tokio::time::Instant::now() + period;
            loop {
                tokio::time::sleep_until(next).await;
                // A failed heartbeat is ignored: the next write will tell whether the claim is lost.
                let _ = store.heartbeat(&session, &run).await;
                next += period;
            }
        }));
    }

    /// Stops the heartbeat, as a paused run holds no claim.
    pub(crate) fn stop_heartbeat(&mut self) {
        if let Some(task) = self.heartbeat.take() {
            task.abort();
        }
    }

    /// Connects `external` and a time limit of `timeout_ms` (0 for none) to `controller`.
    pub(crate) fn watch_aborts(
        &mut self,
        controller: AbortController,
        external: Option<AbortSignal>,
        timeout_ms: u64,
    ) {
        if let Some(external) = external {
            if external.is_aborted() {
                // Already fired: abort now, before the loop's first check.
                controller.abort(AbortReason::Cancel {
                    reason: Some("signal".into()),
                });
            }
            let controller = controller.clone();
            let mine = controller.signal();
            self.watchers.push(tokio::spawn(async move {
                tokio::select! {
                    _ = external.cancelled() => {
                        controller.abort(AbortReason::Cancel { reason: Some("signal".into()) });
                    }
                    _ = mine.cancelled() => {}
                }
            }));
        }
        if timeout_ms > 0 {
            self.watchers.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(timeout_ms)).await;
                controller.abort(AbortReason::Timeout);
            }));
        }
    }

    /// Stops every timer.
    pub(crate) fn stop_all(&mut self) {
        self.stop_heartbeat();
        for watcher in self.watchers.drain(..) {
            watcher.abort();
        }
    }
}

impl Drop for Timers {
    fn drop(&mut self) {
        self.stop_all();
    }
}
