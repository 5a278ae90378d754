//! The replay ring: the newest envelopes, bounded in count and in bytes, so a client that
//! reconnects can be sent what it missed instead of fresh snapshots.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

pub(crate) struct RingEntry {
    pub(crate) seq: u64,
    pub(crate) channel: Arc<str>,
    pub(crate) envelope: Arc<str>,
    pub(crate) one_zero_only: bool,
}

impl RingEntry {
    /// The envelope text plus a fixed share for the entry and its allocation; the channel
    /// name is shared with the subscription table, so it is not counted again.
    fn weight(&self) -> usize {
        self.envelope.len() + 64
    }
}

pub(crate) struct Ring {
    entries: VecDeque<RingEntry>,
    /// What the entries weigh (see [`RingEntry::weight`]).
    bytes: usize,
    capacity: usize,
    max_bytes: usize,
    /// The highest length and weight so far. Each rise is logged at `debug`, so an operator
    /// (or the soak benchmark, reading the daemon's log) can see the ring stay in its bounds.
    high: (usize, usize),
}

impl Ring {
    /// A ring of at most `capacity` envelopes weighing at most `max_bytes` together (the
    /// newest envelope is always kept).
    pub(crate) fn new(capacity: usize, max_bytes: usize) -> Ring {
        Ring {
            entries: VecDeque::new(),
            bytes: 0,
            capacity: capacity.max(1),
            max_bytes,
            high: (0, 0),
        }
    }

    /// Keeps the entry, letting the oldest go until the ring is within its bounds again.
    pub(crate) fn push(&mut self, entry: RingEntry) {
        self.bytes += entry.weight();
        self.entries.push_back(entry);
        while self.entries.len() > self.capacity
            || (self.bytes > self.max_bytes && self.entries.len() > 1)
        {
            if let Some(old) = self.entries.pop_front() {
                self.bytes -= old.weight();
            }
        }
        let (len, bytes) = self.usage();
        if len > self.high.0 || bytes > self.high.1 {
            self.high = (len.max(self.high.0), bytes.max(self.high.1));
            tracing::debug!(
                envelopes = self.high.0,
                bytes = self.high.1,
                "replay ring at a new high"
            );
        }
    }

    /// The length and weight in bytes.
    pub(crate) fn usage(&self) -> (usize, usize) {
        (self.entries.len(), self.bytes)
    }

    /// The highest length and weight so far.
    #[cfg(test)]
    pub(crate) fn high(&self) -> (usize, usize) {
        self.high
    }

    /// Whether the ring still holds every envelope numbered after `last_seen`, the newest
    /// being `seq`.
    pub(crate) fn reaches(&self, last_seen: u64, seq: u64) -> bool {
        if last_seen > seq {
            return false;
        }
        last_seen == seq
            || self
                .entries
                .front()
                .is_some_and(|first| first.seq <= last_seen + 1)
    }

    /// The envelopes after `last_seen` on the given channels (without those a 0.9 client
    /// may not see when `legacy`).
    pub(crate) fn after(
        &self,
        last_seen: u64,
        channels: &HashSet<&str>,
        legacy: bool,
    ) -> Vec<Arc<str>> {
        self.entries
            .iter()
            .filter(|e| e.seq > last_seen)
            .filter(|e| channels.contains(&*e.channel))
            .filter(|e| !(legacy && e.one_zero_only))
            .map(|e| e.envelope.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, text: &str) -> RingEntry {
        RingEntry {
            seq,
            channel: Arc::from("ahp-root://"),
            envelope: Arc::from(text),
            one_zero_only: false,
        }
    }

    #[test]
    fn the_high_mark_is_the_most_the_ring_ever_held_and_stays_in_the_bounds() {
        let big = "0123456789".repeat(10);
        let mut ring = Ring::new(100, 500);
        for seq in 1..=10 {
            ring.push(entry(seq, &big));
            assert!(ring.usage().1 <= 500);
        }
        // Three envelopes of 164 bytes each (100 of text, 64 for the entry).
        assert_eq!(ring.usage(), (3, 492));
        assert_eq!(ring.high(), (3, 492));
        // Smaller envelopes: more of them fit, and the weight never passes the bound.
        for seq in 11..=40 {
            ring.push(entry(seq, "x"));
            assert!(ring.usage().1 <= 500);
        }
        assert_eq!(ring.usage(), (7, 455));
        assert_eq!(ring.high(), (7, 492));
        assert!(ring.reaches(33, 40));
        assert!(!ring.reaches(32, 40));
        assert!(ring.reaches(40, 40));
        assert!(!ring.reaches(41, 40));
    }
}
