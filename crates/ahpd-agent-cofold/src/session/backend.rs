//! The `Session` contract of a cofold chat: turns, cancels, steering, resume, rewind, fork
//! points, configuration and close, each handed to the session's core.

use std::sync::atomic::Ordering;

use ahp_types::state::PendingMessage;
use ahpd_sdk::{Session, TurnRequest};
use serde_json::Value;

use super::{CLOSE_REASON, CofoldSession, STOP_REASON, lock};

#[async_trait::async_trait]
impl Session for CofoldSession {
    fn backend_id(&self) -> String {
        self.core.backend_id.clone()
    }

    fn begin(&mut self, turn: TurnRequest) {
        self.core.begin_when_mcp_started(turn);
    }

    fn mcp_server(&mut self, id: &str, run: bool) -> Result<(), ahpd_sdk::Refusal> {
        match self.core.mcp.get() {
            Some(mcp) => mcp.request(id, run).map_err(ahpd_sdk::Refusal::new),
            None => Err(ahpd_sdk::Refusal::new("this session uses no MCP servers")),
        }
    }

    fn changeset(&self, channel: &str) -> Option<ahp_types::state::ChangesetState> {
        self.core.changes.state(channel)
    }

    fn changeset_operation(
        &mut self,
        params: ahp_types::commands::InvokeChangesetOperationParams,
    ) -> Option<ahpd_sdk::OperationFuture> {
        self.core.changes.state(&params.channel)?;
        let core = self.core.clone();
        Some(Box::pin(async move {
            let worker = core.clone();
            let done = tokio::task::spawn_blocking(move || worker.changes.operate(&params))
                .await
                .map_err(|e| ahpd_sdk::Refusal::new(format!("the operation stopped: {e}")))?;
            core.set_meta(crate::changes::META_KEY, core.changes.meta());
            done.map(|(_, result)| result)
        }))
    }

    fn watched(&mut self) {
        // Opened for a client after a restart: the paused run is asked again at once.
        self.core.reopen_watched();
    }

    fn cancel(&mut self, _turn_id: &str) {
        lock(&self.core.mcp_held).take();
        self.core.reopen_pending();
        self.core.cancel_all(STOP_REASON);
    }

    fn stopped(&mut self, turn_id: &str, duration: i64) {
        lock(&self.core.state)
            .stops
            .insert(turn_id.to_owned(), duration);
        self.cancel(turn_id);
    }

    fn steer(&mut self, message: PendingMessage) -> bool {
        self.core.reopen_pending();
        let state = lock(&self.core.state);
        let Some(running) = &state.running else {
            return false;
        };
        let Some(handle) = running.handle.clone() else {
            return false;
        };
        if !running.shown.load(Ordering::SeqCst) {
            return false;
        }
        let (text, parts) = match crate::attachments::input_of(
            &message.message,
            running.images,
            &self.core.attachments_dir(),
        ) {
            // The message's text leads; cofold puts it first itself.
            Ok(cofold_agents::message::Input::Parts(parts)) => (
                message.message.text.clone(),
                Some(parts.into_iter().skip(1).collect()),
            ),
            Ok(cofold_agents::message::Input::Text(text)) => (text, None),
            // Attachments that cannot be read leave the message to a turn of its own.
            Err(_) => return false,
        };
        lock(&running.steers).push_back(message.id.clone());
        let steers = running.steers.clone();
        let id = message.id.clone();
        let forget = move || {
            // Never written: the host keeps the entry and runs it as a turn of its own.
            lock(&steers).retain(|s| s != &id);
        };
        // Queued before this returns, so a step that starts after the host has said the steer
        // always finds it; waiting until it is written goes on in a task.
        match handle.queue_steer(text, parts) {
            Ok(written) => {
                tokio::spawn(async move {
                    if written.await.is_err() {
                        forget();
                    }
                });
            }
            Err(_) => forget(),
        }
        true
    }

    fn resume_turn(&mut self, turn_id: &str) -> Result<(), ahpd_sdk::Refusal> {
        self.core.reopen_pending();
        let refusal = || {
            ahpd_sdk::Refusal::new(format!(
                "{}: turn {turn_id} cannot be resumed",
                self.core.agent.id
            ))
        };
        let mut state = lock(&self.core.state);
        if state.closed || state.running.is_some() || state.cutting {
            return Err(refusal());
        }
        match &state.last {
            Some(last) if last.turn.turn_id == turn_id && last.resumable => {}
            _ => return Err(refusal()),
        }
        let Some(finished) = state.last.take() else {
            return Err(refusal());
        };
        state.cutting = true;
        tokio::spawn(self.core.clone().resume(finished));
        Ok(())
    }

    fn rewind(&mut self, turn_id: Option<&str>) -> Result<(), ahpd_sdk::Refusal> {
        self.core.reopen_pending();
        let id = &self.core.agent.id;
        let mut state = lock(&self.core.state);
        if state.running.is_some() || state.cutting {
            return Err(ahpd_sdk::Refusal::new(format!(
                "{id}: a turn is running; stop it before cutting the conversation"
            )));
        }
        let through = match turn_id {
            Some(turn) => match state.cut_points.get(turn) {
                Some(point) => Some(point.clone()),
                None => {
                    return Err(ahpd_sdk::Refusal::new(format!(
                        "{id}: turn {turn} has no cut point in this process"
                    )));
                }
            },
            None => None,
        };
        state.cutting = true;
        tokio::spawn(self.core.clone().cut(through));
        Ok(())
    }

    fn fork_point(&self, turn_id: &str) -> Option<ahpd_sdk::agent::ForkPoint> {
        let state = lock(&self.core.state);
        state
            .cut_points
            .get(turn_id)
            .map(|point| ahpd_sdk::agent::ForkPoint {
                turn_id: turn_id.to_owned(),
                data: Value::String(point.clone()),
            })
    }

    fn configure(
        &mut self,
        changes: &serde_json::Map<String, Value>,
    ) -> Result<(), ahpd_sdk::Refusal> {
        crate::session_config::check_config(&self.core.agent.id, changes)?;
        {
            let mut settings = lock(&self.core.settings);
            for (k, v) in changes {
                settings.insert(k.clone(), v.clone());
            }
        }
        // A config change is what opens a session read back from the store.
        self.core.reopen_pending();
        Ok(())
    }

    async fn close(&mut self) {
        self.shut(false).await;
    }

    async fn suspend(&mut self) {
        self.shut(true).await;
    }
}

impl CofoldSession {
    /// Closes the session: the running run is cancelled, or, with `keep_paused` and a run that
    /// only waits on a person, let go as the store holds it for the next process to reopen.
    /// Returns once the run has ended or been let go.
    async fn shut(&mut self, keep_paused: bool) {
        let done = {
            let waiting = if keep_paused {
                self.core.let_go_all(CLOSE_REASON)
            } else {
                self.core.cancel_all(CLOSE_REASON)
            };
            let mut state = lock(&self.core.state);
            state.closed = true;
            // A paused run nothing reattached stays as it is in the store.
            state.reopen = None;
            drop(state);
            waiting
        };
        if let Some(mut done) = done {
            let _ = done.wait_for(|finished| *finished).await;
        }
    }
}
