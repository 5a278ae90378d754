//! A turn that arrives while one of the session's MCP servers is still starting waits for it
//! (each server's start is bounded by its `startupTimeoutSec`), so the model sees the tools
//! the person configured from the first turn on. Turns keep their order.

use std::collections::VecDeque;
use std::sync::Arc;

use ahpd_sdk::TurnRequest;

use super::{Core, lock};

impl Core {
    pub(super) fn begin_when_mcp_started(self: &Arc<Self>, turn: TurnRequest) {
        let Some(mcp) = self.mcp.get().cloned() else {
            return self.begin(turn);
        };
        let mut held = lock(&self.mcp_held);
        match held.as_mut() {
            Some(queue) => queue.push_back(turn),
            None if mcp.starting() => {
                *held = Some(VecDeque::from([turn]));
                let core = self.clone();
                tokio::spawn(async move {
                    mcp.settled().await;
                    // Held while the turns begin, so one arriving meanwhile goes after them.
                    let mut held = lock(&core.mcp_held);
                    for turn in held.take().unwrap_or_default() {
                        core.begin(turn);
                    }
                });
            }
            None => {
                drop(held);
                self.begin(turn);
            }
        }
    }
}
