//! Aborting a run: the controller that fires once and the signal everything else watches.

use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};
use tokio_util::sync::CancellationToken;

/// Why a run was aborted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum AbortReason {
    /// A cancel, with the reason given.
    Cancel {
        /// Why, when someone said.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The run's time limit passed.
    Timeout,
}

#[derive(Debug, Default)]
struct AbortState {
    token: CancellationToken,
    reason: OnceLock<AbortReason>,
}

/// Sets the abort of a run; only the first abort counts.
#[derive(Debug, Clone, Default)]
pub struct AbortController {
    state: Arc<AbortState>,
}

impl AbortController {
    /// A controller that has not aborted.
    pub fn new() -> AbortController {
        AbortController::default()
    }

    /// The signal watchers hold.
    pub fn signal(&self) -> AbortSignal {
        AbortSignal {
            state: self.state.clone(),
        }
    }

    /// Aborts with `reason`; returns false (and changes nothing) when already aborted.
    pub fn abort(&self, reason: AbortReason) -> bool {
        // The reason is set before the token fires, so whoever wakes sees it.
        let first = self.state.reason.set(reason).is_ok();
        if first {
            self.state.token.cancel();
        }
        first
    }
}

/// The watch side of an abort: cloneable, built on a [`CancellationToken`].
#[derive(Debug, Clone, Default)]
pub struct AbortSignal {
    state: Arc<AbortState>,
}

impl AbortSignal {
    /// A signal no one can fire.
    pub fn never() -> AbortSignal {
        AbortSignal::default()
    }

    /// The token underneath, for `select!` on `cancelled()`.
    pub fn token(&self) -> &CancellationToken {
        &self.state.token
    }

    /// Whether the abort fired.
    pub fn is_aborted(&self) -> bool {
        self.state.token.is_cancelled()
    }

    /// The first abort reason, once aborted.
    pub fn reason(&self) -> Option<AbortReason> {
        self.state.reason.get().cloned()
    }

    /// Waits until the abort fires.
    pub async fn cancelled(&self) {
        self.state.token.cancelled().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_the_first_abort_counts() {
        let controller = AbortController::new();
        let signal = controller.signal();
        assert!(!signal.is_aborted());
        assert!(controller.abort(AbortReason::Timeout));
        assert!(!controller.abort(AbortReason::Cancel {
            reason: Some("late".into())
        }));
        signal.cancelled().await;
        assert_eq!(signal.reason(), Some(AbortReason::Timeout));
        assert!(signal.token().is_cancelled());
    }
}
