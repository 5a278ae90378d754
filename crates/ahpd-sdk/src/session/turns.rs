//! A chat's turn bookkeeping beside its protocol state: the turns the running one replaced
//! (their approvals and questions stay answerable until they end) and the stray streams
//! already warned about. The running turn, steering and queued messages themselves are the
//! chat's state; this part holds only what the host adds to it. The actor changes it through
//! these methods only.

use std::collections::HashSet;

#[derive(Default)]
pub(crate) struct TurnBook {
    /// Turns the active turn replaced; their approvals stay answerable.
    replaced: HashSet<String>,
    /// The turn and the parts a stray stream was already warned about, so a backend
    /// that keeps streaming into a missing part logs one warning, not one per delta.
    stray_warned: (String, HashSet<String>),
}

impl TurnBook {
    /// A client started a turn while `turn_id` ran: it keeps running until it ends.
    pub(crate) fn replace(&mut self, turn_id: &str) {
        self.replaced.insert(turn_id.to_owned());
    }

    /// Whether `turn_id` was replaced and has not ended yet.
    pub(crate) fn is_replaced(&self, turn_id: &str) -> bool {
        self.replaced.contains(turn_id)
    }

    /// The replaced turns that have not ended yet.
    pub(crate) fn replaced(&self) -> Vec<String> {
        self.replaced.iter().cloned().collect()
    }

    /// `turn_id` ended.
    pub(crate) fn ended(&mut self, turn_id: &str) {
        self.replaced.remove(turn_id);
    }

    /// Whether this is the first stray stream into `part` of `turn` (it is then remembered).
    /// Only the latest turn's parts are kept.
    pub(crate) fn first_stray(&mut self, turn: &str, part: &str) -> bool {
        let (warned_turn, parts) = &mut self.stray_warned;
        if warned_turn != turn {
            turn.clone_into(warned_turn);
            parts.clear();
        }
        parts.insert(part.to_owned())
    }
}
