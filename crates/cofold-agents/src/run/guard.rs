//! A run's task, guarded against panics.
//!
//! A panic anywhere in a run (a tool, a hook, the policy, a capability, the store) would otherwise
//! drop the task silently: `events()` and `outcome()` would wait forever and the writer claim
//! would stay held. The guard catches it, then settles the run from what the store holds, much
//! as a resume settles a run whose process died: open steps closed, open calls answered, the
//! record `failed` with a sentence naming where it panicked, the claim released, the handle
//! closed. If even that panics, the handle is closed without writing.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;

use super::handle::{Shared, detached_side};
use super::settle::RUN_CRASHED;
use super::{Exit, Hold, RunKind, Runner, failed_outcome, stored_outcome};
use crate::agent::Agent;
use crate::error::{AgentError, ErrorCode};
use crate::event::OutcomeKind;
use crate::store::RunStatus;

/// Spawns a run's task; a panic in it settles the run `failed internal`.
pub(crate) fn spawn(
    agent: &Agent,
    shared: Arc<Shared>,
    kind: RunKind,
    work: impl Future<Output = ()> + Send + 'static,
) {
    let agent = agent.clone();
    tokio::spawn(async move {
        let Err(payload) = AssertUnwindSafe(work).catch_unwind().await else {
            return;
        };
        let sentence = format!(
            "the run stopped because {} panicked: {}",
            shared.doing(),
            panic_text(payload.as_ref())
        );
        tracing::error!(run = %shared.run_id, session = %shared.session_id, "{sentence}");
        agent.warn(&sentence);
        let recovered = AssertUnwindSafe(recover(&agent, shared.clone(), kind, &sentence))
            .catch_unwind()
            .await;
        if recovered.is_err() {
            shared.close(failed_outcome(AgentError::internal(sentence)));
        }
    });
}

/// The text a panic was raised with.
fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "no message".to_owned()
    }
}

/// Settles a run whose task panicked, from the store.
async fn recover(agent: &Agent, shared: Arc<Shared>, kind: RunKind, sentence: &str) {
    if shared.is_closed() {
        return;
    }
    let mut runner = Runner::new(agent, detached_side(shared), kind);
    let error = AgentError::internal(sentence);
    let run = runner.run_ref();
    let record = match runner.store.get_run(&run).await {
        Ok(Some(record)) => record,
        // Nothing was stored for the run yet (or the store cannot say): only the handle ends.
        _ => return runner.settle(failed_outcome(error)),
    };
    let events = runner
        .store
        .list_events(&run, None)
        .await
        .unwrap_or_default();
    runner.next_seq = events.last().map_or(1, |e| e.seq + 1);
    if record.status.is_terminal() {
        // It panicked between its last writes: the claim must not outlive it.
        let _ = runner
            .store
            .release_writer(&run.session_id, &run.run_id)
            .await;
    }
    if record.status.is_terminal() || record.status == RunStatus::Awaiting {
        // It already ended, or it waits on a person with its request stored: leave the record
        // as it is, so a later resume can still answer the request.
        let outcome = stored_outcome(&events).unwrap_or_else(|| {
            runner.outcome(OutcomeKind::Failed {
                error: error.info(),
            })
        });
        return runner.settle(outcome);
    }
    let Some(hold) = Hold::take(runner.store_key(), &run.session_id, &run.run_id) else {
        // Another handle of this process took the run meanwhile; it settles it.
        return runner.settle(failed_outcome(error));
    };
    runner.hold = Some(hold);
    runner.input_message_id = record.input_message_id.clone().unwrap_or_default();
    runner.claimed = matches!(
        runner.store.get_session(&run.session_id).await,
        Ok(Some(session)) if session.active_writer_run_id.as_deref() == Some(run.run_id.as_str())
    );
    let steps = runner.store.list_steps(&run).await.unwrap_or_default();
    runner.recount(&steps);
    runner.tally.denials = record.denials.clone();
    if runner.claimed
        && let Err(failed) = runner.close_left_open(&steps, &RUN_CRASHED).await
    {
        agent.warn(&format!(
            "run {} left open calls after its panic: {}",
            run.run_id, failed.message
        ));
    }
    let error = AgentError::new(ErrorCode::Internal, sentence);
    runner.conclude(Exit::Error(error)).await;
}
