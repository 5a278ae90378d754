//! Delta coalescing: consecutive text deltas for one part are merged by concatenating
//! their content, so a fast stream costs few frames while reducing to the same state.
//! Leading edge: a part with no frame in the last window goes out at once.

use std::collections::HashMap;
use std::time::Duration;

use ahp_types::actions::StateAction;
use tokio::time::Instant;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    kind: u8,
    turn: String,
    part: String,
}

/// What to do with an offered delta.
pub(crate) enum Offer {
    /// Apply and publish these, in order (a flushed older merge may come first).
    PublishNow(Vec<StateAction>),
    /// Merged into the pending action; flushed when the window closes.
    Held,
}

pub(crate) struct Coalescer {
    window: Duration,
    pending: Option<(Key, StateAction, Instant)>,
    last: HashMap<Key, Instant>,
}

/// Whether an action is a delta the coalescer may merge.
pub(crate) fn is_mergeable(action: &StateAction) -> bool {
    key_of(action).is_some()
}

fn key_of(action: &StateAction) -> Option<Key> {
    match action {
        StateAction::ChatDelta(a) if a.meta.is_none() => Some(Key {
            kind: 0,
            turn: a.turn_id.clone(),
            part: a.part_id.clone(),
        }),
        StateAction::ChatReasoning(a) if a.meta.is_none() => Some(Key {
            kind: 1,
            turn: a.turn_id.clone(),
            part: a.part_id.clone(),
        }),
        StateAction::ChatToolCallDelta(a)
            if a.content.is_some() && a.invocation_message.is_none() && a.meta.is_none() =>
        {
            Some(Key {
                kind: 2,
                turn: a.turn_id.clone(),
                part: a.tool_call_id.clone(),
            })
        }
        _ => None,
    }
}

fn merge(into: &mut StateAction, more: StateAction) {
    match (into, more) {
        (StateAction::ChatDelta(a), StateAction::ChatDelta(b)) => a.content.push_str(&b.content),
        (StateAction::ChatReasoning(a), StateAction::ChatReasoning(b)) => {
            a.content.push_str(&b.content)
        }
        (StateAction::ChatToolCallDelta(a), StateAction::ChatToolCallDelta(b)) => {
            if let (Some(x), Some(y)) = (a.content.as_mut(), b.content) {
                x.push_str(&y);
            }
        }
        _ => {}
    }
}

impl Coalescer {
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            pending: None,
            last: HashMap::new(),
        }
    }

    pub(crate) fn offer(&mut self, action: StateAction) -> Offer {
        let Some(key) = key_of(&action).filter(|_| !self.window.is_zero()) else {
            let mut out: Vec<StateAction> = self.take().into_iter().collect();
            out.push(action);
            return Offer::PublishNow(out);
        };
        let now = Instant::now();
        let mut out = Vec::new();
        if let Some((k, pending, _)) = self.pending.as_mut() {
            if *k == key {
                merge(pending, action);
                return Offer::Held;
            }
            if let Some(old) = self.take() {
                out.push(old);
            }
        }
        match self.last.get(&key) {
            Some(&sent) if now.duration_since(sent) < self.window => {
                self.pending = Some((key, action, sent + self.window));
                if out.is_empty() {
                    Offer::Held
                } else {
                    Offer::PublishNow(out)
                }
            }
            _ => {
                self.last.insert(key, now);
                out.push(action);
                Offer::PublishNow(out)
            }
        }
    }

    /// The merged pending action, if any; it counts as sent now.
    pub(crate) fn take(&mut self) -> Option<StateAction> {
        let (key, action, _) = self.pending.take()?;
        self.last.insert(key, Instant::now());
        Some(action)
    }

    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.pending.as_ref().map(|(_, _, d)| *d)
    }

    /// Forget timing for ended turns so the table does not grow.
    pub(crate) fn forget_turn(&mut self, turn_id: &str) {
        self.last.retain(|k, _| k.turn != turn_id);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ahp_types::actions::ChatDeltaAction;

    fn delta(text: &str) -> StateAction {
        StateAction::ChatDelta(ChatDeltaAction {
            turn_id: "t".into(),
            part_id: "p".into(),
            content: text.into(),
            meta: None,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn leading_edge_then_merge_then_flush() {
        let mut c = Coalescer::new(Duration::from_millis(75));
        assert!(matches!(c.offer(delta("a")), Offer::PublishNow(v) if v.len() == 1));
        assert!(matches!(c.offer(delta("b")), Offer::Held));
        assert!(matches!(c.offer(delta("c")), Offer::Held));
        assert!(c.deadline().is_some());
        match c.take().unwrap() {
            StateAction::ChatDelta(d) => assert_eq!(d.content, "bc"),
            _ => panic!("expected a delta"),
        }
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(matches!(c.offer(delta("d")), Offer::PublishNow(v) if v.len() == 1));
    }

    #[test]
    fn zero_window_passes_everything_through() {
        let mut c = Coalescer::new(Duration::ZERO);
        for _ in 0..3 {
            assert!(matches!(c.offer(delta("x")), Offer::PublishNow(v) if v.len() == 1));
        }
    }
}
