//! The global `serverSeq`, the channel → subscriber table, fan-out into connection queues and
//! the replay ring. One short critical section numbers an envelope and enqueues it everywhere,
//! so every connection sees envelopes in increasing `serverSeq` order.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ahp_types::actions::{ActionOrigin, StateAction};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::channels::ring::{Ring, RingEntry};

/// One serialised outbound message, shared by every queue it goes to.
pub(crate) type Frame = Arc<str>;

/// Ends a connection from outside its tasks, with a close code and reason.
#[derive(Default)]
pub(crate) struct KillSwitch {
    token: CancellationToken,
    reason: Mutex<Option<(u16, String)>>,
}

impl KillSwitch {
    pub(crate) fn kill(&self, code: u16, reason: &str) {
        if let Ok(mut slot) = self.reason.lock()
            && slot.is_none()
        {
            *slot = Some((code, reason.to_owned()));
        }
        self.token.cancel();
    }

    pub(crate) fn token(&self) -> &CancellationToken {
        &self.token
    }

    pub(crate) fn reason(&self) -> Option<(u16, String)> {
        self.reason.lock().ok().and_then(|r| r.clone())
    }
}

struct ConnEntry {
    tx: mpsc::Sender<Frame>,
    kill: Arc<KillSwitch>,
    legacy: bool,
    /// Requests of this connection building a reply that registers subscriptions; while any
    /// is, frames wait in `held` (several may run at once, see `connection`).
    holds: usize,
    held: Vec<Frame>,
    held_bytes: usize,
}

struct HubState {
    seq: u64,
    conns: HashMap<u64, ConnEntry>,
    subs: HashMap<Arc<str>, HashSet<u64>>,
    ring: Ring,
}

/// What [`Hub::replay`] found.
pub(crate) enum Replay {
    /// Envelope JSON texts after the given number, in order.
    Actions(Vec<Arc<str>>),
    /// The ring no longer reaches back far enough.
    TooOld,
}

pub(crate) struct Hub {
    state: Mutex<HubState>,
    /// The deepest any outbound queue has been right after an enqueue (for benchmarks and
    /// operators; one relaxed load per frame, a write only when the mark rises).
    queue_high_water: AtomicUsize,
    /// Connections closed because their outbound queue was full.
    full_closes: AtomicU64,
    /// Bytes of frames one connection may have held back (see `HostOptions::held_bytes`).
    held_cap: usize,
    /// The most bytes any one connection had held back.
    held_high_water: AtomicUsize,
    /// Connections closed because what they held back passed `held_cap`.
    held_closes: AtomicU64,
}

/// Action types that exist only in protocol 1.0; withheld from 0.9 connections.
pub(crate) fn one_zero_only(action: &StateAction) -> bool {
    matches!(
        action,
        StateAction::SessionChatsReordered(_)
            | StateAction::ChatIsReadChanged(_)
            | StateAction::ChatIsArchivedChanged(_)
            | StateAction::ChatBackgroundWorkSet(_)
            | StateAction::ChatBackgroundWorkRemoved(_)
            | StateAction::ChatMovableChanged(_)
            | StateAction::ChatChangesetsChanged(_)
            | StateAction::ChatCanvasesChanged(_)
            | StateAction::CanvasStateChanged(_)
            | StateAction::SessionMcpServerBackgroundRequested(_)
    )
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

fn envelope_text(
    channel: &str,
    action_json: &str,
    seq: u64,
    origin: Option<&ActionOrigin>,
    rejection: Option<&str>,
) -> String {
    let mut out = String::with_capacity(action_json.len() + channel.len() + 96);
    out.push_str("{\"channel\":");
    out.push_str(&json_str(channel));
    out.push_str(",\"action\":");
    out.push_str(action_json);
    out.push_str(",\"serverSeq\":");
    out.push_str(&seq.to_string());
    if let Some(origin) = origin {
        out.push_str(",\"origin\":{\"clientId\":");
        out.push_str(&json_str(&origin.client_id));
        out.push_str(",\"clientSeq\":");
        out.push_str(&origin.client_seq.to_string());
        out.push('}');
    }
    if let Some(reason) = rejection {
        out.push_str(",\"rejectionReason\":");
        out.push_str(&json_str(reason));
    }
    out.push('}');
    out
}

/// A whole `action` notification frame around an envelope.
pub(crate) fn action_frame(envelope: &str) -> Frame {
    let mut out = String::with_capacity(envelope.len() + 48);
    out.push_str("{\"jsonrpc\":\"2.0\",\"method\":\"action\",\"params\":");
    out.push_str(envelope);
    out.push('}');
    Arc::from(out)
}

/// A notification frame with any params.
pub(crate) fn notification_frame(method: &str, params: &Value) -> Frame {
    let value = serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params});
    Arc::from(value.to_string())
}

impl Hub {
    /// A hub whose replay ring keeps at most `capacity` envelopes weighing at most
    /// `max_bytes` together (the newest envelope is always kept), and that holds back at most
    /// `held_cap` bytes of frames for one connection.
    pub(crate) fn new(capacity: usize, max_bytes: usize, held_cap: usize) -> Self {
        Self {
            state: Mutex::new(HubState {
                seq: 0,
                conns: HashMap::new(),
                subs: HashMap::new(),
                ring: Ring::new(capacity, max_bytes),
            }),
            queue_high_water: AtomicUsize::new(0),
            full_closes: AtomicU64::new(0),
            held_cap,
            held_high_water: AtomicUsize::new(0),
            held_closes: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        // A poisoned lock only means another thread panicked mid-update of plain data; the
        // table is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn current_seq(&self) -> u64 {
        self.lock().seq
    }

    pub(crate) fn add_conn(&self, id: u64, tx: mpsc::Sender<Frame>, kill: Arc<KillSwitch>) {
        self.lock().conns.insert(
            id,
            ConnEntry {
                tx,
                kill,
                legacy: false,
                holds: 0,
                held: Vec::new(),
                held_bytes: 0,
            },
        );
    }

    pub(crate) fn set_legacy(&self, id: u64, legacy: bool) {
        if let Some(c) = self.lock().conns.get_mut(&id) {
            c.legacy = legacy;
        }
    }

    /// Forget a connection and every subscription it held; returns the channels it held.
    pub(crate) fn remove_conn(&self, id: u64) -> Vec<Arc<str>> {
        let mut st = self.lock();
        st.conns.remove(&id);
        let mut held = Vec::new();
        st.subs.retain(|channel, set| {
            if set.remove(&id) {
                held.push(channel.clone());
            }
            !set.is_empty()
        });
        held
    }

    /// Register a subscription and return the `fromSeq` for its snapshot. The caller must be
    /// the only publisher of `channel` while it builds the snapshot (the channel's actor).
    pub(crate) fn subscribe(&self, conn: u64, channel: &str) -> u64 {
        self.subscribe_with(conn, channel, |_| ()).0
    }

    /// Register a subscription and run `f` inside the same critical section, so a snapshot
    /// taken by `f` and the returned `fromSeq` agree even with concurrent publishers.
    pub(crate) fn subscribe_with<R>(
        &self,
        conn: u64,
        channel: &str,
        f: impl FnOnce(u64) -> R,
    ) -> (u64, R) {
        let mut st = self.lock();
        let seq = st.seq;
        let key: Arc<str> = st
            .subs
            .get_key_value(channel)
            .map(|(k, _)| k.clone())
            .unwrap_or_else(|| Arc::from(channel));
        st.subs.entry(key).or_default().insert(conn);
        (seq, f(seq))
    }

    pub(crate) fn unsubscribe(&self, conn: u64, channel: &str) -> bool {
        let mut st = self.lock();
        let mut removed = false;
        if let Some(set) = st.subs.get_mut(channel) {
            removed = set.remove(&conn);
            if set.is_empty() {
                st.subs.remove(channel);
            }
        }
        removed
    }

    /// Whether any connection subscribes to the channel.
    pub(crate) fn has_subscribers(&self, channel: &str) -> bool {
        self.lock().subs.get(channel).is_some_and(|s| !s.is_empty())
    }

    /// Drop every subscription to a channel (the channel is gone).
    pub(crate) fn drop_channel(&self, channel: &str) {
        self.lock().subs.remove(channel);
    }

    /// The deepest outbound queue seen so far and the number of connections closed for a
    /// full one.
    pub(crate) fn queue_marks(&self) -> (usize, u64) {
        (
            self.queue_high_water.load(Ordering::Relaxed),
            self.full_closes.load(Ordering::Relaxed),
        )
    }

    /// The most bytes any one connection held back, and the connections closed for passing
    /// the bound.
    pub(crate) fn held_marks(&self) -> (usize, u64) {
        (
            self.held_high_water.load(Ordering::Relaxed),
            self.held_closes.load(Ordering::Relaxed),
        )
    }

    fn push(&self, entry: &mut ConnEntry, frame: &Frame) {
        if entry.holds == 0 {
            return self.enqueue(entry, frame);
        }
        if entry.kill.token().is_cancelled() {
            return;
        }
        let bytes = entry.held_bytes + frame.len();
        // Held frames go to the outbound queue together when released: more than it takes
        // would close the connection then, so it is closed now, before they pile up further.
        if bytes > self.held_cap || entry.held.len() >= entry.tx.max_capacity() {
            self.held_closes.fetch_add(1, Ordering::Relaxed);
            entry.held = Vec::new();
            entry.held_bytes = 0;
            entry
                .kill
                .kill(1013, "frames held for a subscription passed the bound");
            return;
        }
        entry.held.push(frame.clone());
        entry.held_bytes = bytes;
        if bytes > self.held_high_water.load(Ordering::Relaxed) {
            self.held_high_water.fetch_max(bytes, Ordering::Relaxed);
        }
    }

    fn enqueue(&self, entry: &mut ConnEntry, frame: &Frame) {
        match entry.tx.try_send(frame.clone()) {
            Ok(()) => {
                let depth = entry.tx.max_capacity() - entry.tx.capacity();
                if depth > self.queue_high_water.load(Ordering::Relaxed) {
                    self.queue_high_water.fetch_max(depth, Ordering::Relaxed);
                }
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                if !entry.kill.token().is_cancelled() {
                    self.full_closes.fetch_add(1, Ordering::Relaxed);
                }
                entry.kill.kill(1013, "outbound queue full");
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    /// Number and fan out an action that changed `channel`'s state; store it for replay.
    pub(crate) fn publish(
        &self,
        channel: &str,
        action: &StateAction,
        origin: Option<&ActionOrigin>,
    ) -> u64 {
        let action_json = match serde_json::to_string(action) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "an action could not be serialised and was dropped");
                return self.current_seq();
            }
        };
        let legacy_hidden = one_zero_only(action);
        self.publish_raw(channel, &action_json, origin, legacy_hidden)
    }

    /// As [`Hub::publish`] for an action already in JSON (extension actions).
    pub(crate) fn publish_raw(
        &self,
        channel: &str,
        action_json: &str,
        origin: Option<&ActionOrigin>,
        legacy_hidden: bool,
    ) -> u64 {
        let mut st = self.lock();
        st.seq += 1;
        let seq = st.seq;
        let envelope: Arc<str> = Arc::from(envelope_text(channel, action_json, seq, origin, None));
        let frame = action_frame(&envelope);
        let st = &mut *st;
        let key: Arc<str> = match st.subs.get_key_value(channel) {
            Some((k, set)) => {
                for id in set {
                    if let Some(conn) = st.conns.get_mut(id)
                        && !(legacy_hidden && conn.legacy)
                    {
                        self.push(conn, &frame);
                    }
                }
                k.clone()
            }
            None => Arc::from(channel),
        };
        st.ring.push(RingEntry {
            seq,
            channel: key,
            envelope,
            one_zero_only: legacy_hidden,
        });
        seq
    }

    /// Send a refused dispatch back to its sender only; `serverSeq` does not move.
    pub(crate) fn reject(
        &self,
        conn: u64,
        channel: &str,
        action_json: &str,
        origin: &ActionOrigin,
        reason: &str,
    ) {
        let mut st = self.lock();
        let seq = st.seq;
        let frame = action_frame(&envelope_text(
            channel,
            action_json,
            seq,
            Some(origin),
            Some(reason),
        ));
        if let Some(c) = st.conns.get_mut(&conn) {
            self.push(c, &frame);
        }
    }

    /// A protocol notification (not numbered, not replayed) to a channel's subscribers.
    pub(crate) fn notify(&self, channel: &str, method: &str, params: &Value) {
        let frame = notification_frame(method, params);
        let mut st = self.lock();
        let st = &mut *st;
        if let Some(set) = st.subs.get(channel) {
            for id in set {
                if let Some(conn) = st.conns.get_mut(id) {
                    self.push(conn, &frame);
                }
            }
        }
    }

    /// A frame to one connection (replies, progress).
    pub(crate) fn send_to(&self, conn: u64, frame: Frame) {
        let mut st = self.lock();
        if let Some(c) = st.conns.get_mut(&conn) {
            self.push(c, &frame);
        }
    }

    /// Start holding envelopes for a connection while a reply that registers subscriptions is
    /// being built.
    pub(crate) fn hold(&self, conn: u64) {
        if let Some(c) = self.lock().conns.get_mut(&conn) {
            c.holds += 1;
        }
    }

    /// Write the reply ahead of everything held back; once no other request of the connection
    /// holds, write what was held, in order. Frames held for another request's channels stay
    /// behind its reply, so no envelope overtakes the snapshot it builds on.
    pub(crate) fn release(&self, conn: u64, reply: Frame) {
        let mut st = self.lock();
        if let Some(c) = st.conns.get_mut(&conn) {
            c.holds = c.holds.saturating_sub(1);
            self.enqueue(c, &reply);
            if c.holds == 0 {
                c.held_bytes = 0;
                for frame in std::mem::take(&mut c.held) {
                    self.enqueue(c, &frame);
                }
            }
        }
    }

    /// As [`Hub::replay`], and on success register `conn` on every channel in the same
    /// critical section, so nothing published meanwhile is lost or sent twice.
    pub(crate) fn replay_and_subscribe(
        &self,
        conn: u64,
        last_seen: u64,
        channels: &HashSet<&str>,
        legacy: bool,
    ) -> Replay {
        let mut st = self.lock();
        let found = Self::replay_locked(&st, last_seen, channels, legacy);
        if matches!(found, Replay::Actions(_)) {
            for ch in channels {
                let key: Arc<str> = st
                    .subs
                    .get_key_value(*ch)
                    .map(|(k, _)| k.clone())
                    .unwrap_or_else(|| Arc::from(*ch));
                st.subs.entry(key).or_default().insert(conn);
            }
        }
        found
    }

    /// The replay ring's length and weight in bytes.
    pub(crate) fn ring_usage(&self) -> (usize, usize) {
        self.lock().ring.usage()
    }

    /// Envelopes after `last_seen` on the given channels, or `TooOld` when the ring has lost
    /// some of them.
    #[cfg(test)]
    pub(crate) fn replay(&self, last_seen: u64, channels: &HashSet<&str>, legacy: bool) -> Replay {
        let st = self.lock();
        Self::replay_locked(&st, last_seen, channels, legacy)
    }

    fn replay_locked(
        st: &HubState,
        last_seen: u64,
        channels: &HashSet<&str>,
        legacy: bool,
    ) -> Replay {
        if !st.ring.reaches(last_seen, st.seq) {
            return Replay::TooOld;
        }
        Replay::Actions(st.ring.after(last_seen, channels, legacy))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ahp_types::actions::{ActionEnvelope, RootActiveSessionsChangedAction};

    fn action(n: i64) -> StateAction {
        StateAction::RootActiveSessionsChanged(RootActiveSessionsChangedAction {
            active_sessions: n,
        })
    }

    #[test]
    fn envelopes_decode_as_protocol_envelopes() {
        let origin = ActionOrigin {
            client_id: "c\"1".into(),
            client_seq: 4,
        };
        let text = envelope_text(
            "ahp-root://",
            &serde_json::to_string(&action(2)).unwrap(),
            9,
            Some(&origin),
            Some("no"),
        );
        let env: ActionEnvelope = serde_json::from_str(&text).unwrap();
        assert_eq!(env.server_seq, 9);
        assert_eq!(env.origin.unwrap().client_id, "c\"1");
        assert_eq!(env.rejection_reason.as_deref(), Some("no"));
        let plain = envelope_text("ahp-root://", "{}", 1, None, None);
        assert!(!plain.contains("origin"));
    }

    #[test]
    fn full_queue_kills_only_that_connection() {
        let hub = Hub::new(8, usize::MAX, usize::MAX);
        let (tx_a, mut rx_a) = mpsc::channel(16);
        let (tx_b, _rx_b) = mpsc::channel(1);
        let kill_a = Arc::new(KillSwitch::default());
        let kill_b = Arc::new(KillSwitch::default());
        hub.add_conn(1, tx_a, kill_a.clone());
        hub.add_conn(2, tx_b, kill_b.clone());
        hub.subscribe(1, "ahp-root://");
        hub.subscribe(2, "ahp-root://");
        for n in 0..3 {
            hub.publish("ahp-root://", &action(n), None);
        }
        assert!(kill_b.token().is_cancelled());
        assert_eq!(kill_b.reason().unwrap().0, 1013);
        assert!(!kill_a.token().is_cancelled());
        // A's queue held all three; B's overflowed twice but counts as one closed connection.
        assert_eq!(hub.queue_marks(), (3, 1));
        let mut got = 0;
        while rx_a.try_recv().is_ok() {
            got += 1;
        }
        assert_eq!(got, 3);
    }

    #[test]
    fn frames_held_past_the_byte_bound_close_only_that_connection() {
        let hub = Hub::new(8, usize::MAX, 100);
        let (tx, mut rx) = mpsc::channel(16);
        let kill = Arc::new(KillSwitch::default());
        hub.add_conn(1, tx, kill.clone());
        let (tx_other, _rx_other) = mpsc::channel(16);
        let kill_other = Arc::new(KillSwitch::default());
        hub.add_conn(2, tx_other, kill_other.clone());
        hub.hold(1);
        hub.hold(2);
        hub.send_to(1, Arc::from("x".repeat(60)));
        hub.send_to(2, Arc::from("x".repeat(60)));
        assert!(!kill.token().is_cancelled());
        hub.send_to(1, Arc::from("y".repeat(60)));
        assert!(kill.token().is_cancelled());
        assert_eq!(kill.reason().unwrap().0, 1013);
        assert!(!kill_other.token().is_cancelled());
        assert_eq!(hub.held_marks(), (60, 1));
        // Nothing of what was held reaches the closed connection's queue.
        hub.release(1, Arc::from("reply"));
        assert_eq!(&*rx.try_recv().unwrap(), "reply");
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn replay_detects_a_ring_that_no_longer_reaches() {
        let hub = Hub::new(2, usize::MAX, usize::MAX);
        for n in 0..5 {
            hub.publish("ahp-root://", &action(n), None);
        }
        let chans: HashSet<&str> = ["ahp-root://"].into_iter().collect();
        assert!(matches!(hub.replay(1, &chans, false), Replay::TooOld));
        match hub.replay(3, &chans, false) {
            Replay::Actions(a) => assert_eq!(a.len(), 2),
            Replay::TooOld => panic!("ring should reach"),
        }
        assert!(matches!(hub.replay(5, &chans, false), Replay::Actions(a) if a.is_empty()));
        assert!(matches!(hub.replay(6, &chans, false), Replay::TooOld));
    }

    #[test]
    fn the_ring_is_bounded_in_bytes_as_well_as_in_count() {
        let one = {
            let hub = Hub::new(100, usize::MAX, usize::MAX);
            hub.publish("ahp-root://", &action(1), None);
            hub.ring_usage().1
        };
        // Room for three envelopes of this size, though the count would allow a hundred.
        let hub = Hub::new(100, one * 3 + one / 2, usize::MAX);
        for n in 0..10 {
            hub.publish("ahp-root://", &action(n), None);
            assert!(hub.ring_usage().1 <= one * 3 + one / 2);
        }
        assert_eq!(hub.ring_usage().0, 3);
        let chans: HashSet<&str> = ["ahp-root://"].into_iter().collect();
        assert!(matches!(hub.replay(6, &chans, false), Replay::TooOld));
        assert!(matches!(hub.replay(7, &chans, false), Replay::Actions(a) if a.len() == 3));
        // One envelope heavier than the whole bound is still kept, alone.
        let tiny = Hub::new(100, 1, usize::MAX);
        tiny.publish("ahp-root://", &action(1), None);
        tiny.publish("ahp-root://", &action(2), None);
        assert_eq!(tiny.ring_usage().0, 1);
    }
}
