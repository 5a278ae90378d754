//! How many requests of one connection may be in flight at once: each request (and each
//! notification whose work has to wait its turn) takes a slot until its work is done; past the
//! cap it is refused at once instead of becoming one more task.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::error::RpcError;

/// One connection's count of work in flight.
#[derive(Clone)]
pub(crate) struct Budget {
    cap: usize,
    in_flight: Arc<AtomicUsize>,
}

/// A taken slot, given back when dropped (the work finished or was abandoned).
pub(crate) struct Slot {
    in_flight: Arc<AtomicUsize>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Host-wide figures of every connection's budget, for operators and benchmarks.
#[derive(Default)]
pub(crate) struct Marks {
    high_water: AtomicUsize,
    refused: AtomicU64,
}

impl Marks {
    /// The most work any one connection had in flight, and how much was refused at the cap.
    pub(crate) fn read(&self) -> (usize, u64) {
        (
            self.high_water.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
        )
    }
}

impl Budget {
    pub(crate) fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            in_flight: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// A slot, or `None` when the connection already has `cap` pieces of work in flight.
    /// Only the connection's reader takes slots, so the check and the increment cannot race
    /// with another taker.
    pub(crate) fn take(&self, marks: &Marks) -> Option<Slot> {
        let now = self.in_flight.load(Ordering::Acquire);
        if now >= self.cap {
            marks.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let depth = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        if depth > marks.high_water.load(Ordering::Relaxed) {
            marks.high_water.fetch_max(depth, Ordering::Relaxed);
        }
        Some(Slot {
            in_flight: self.in_flight.clone(),
        })
    }

    /// The sentence a request past the cap is answered with.
    pub(crate) fn refusal(&self) -> RpcError {
        RpcError::invalid_request(self.sentence())
            .with_data(serde_json::json!({"inFlightCap": self.cap}))
    }

    /// The close reason for a notification past the cap (a close reason has at most 123 bytes).
    pub(crate) fn close_reason(&self) -> String {
        format!("more than {} requests in flight", self.cap)
    }

    /// The cap in words, for a refused request or dispatch.
    pub(crate) fn sentence(&self) -> String {
        format!(
            "this connection already has {} requests in flight, the most a connection may have; wait for answers before sending more",
            self.cap
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_past_the_cap_are_refused_until_one_is_given_back() {
        let marks = Marks::default();
        let budget = Budget::new(2);
        let a = budget.take(&marks).expect("first");
        let _b = budget.take(&marks).expect("second");
        assert!(budget.take(&marks).is_none());
        drop(a);
        assert!(budget.take(&marks).is_some());
        assert_eq!(marks.read(), (2, 1));
        assert!(budget.refusal().message.contains("2 requests in flight"));
    }
}
