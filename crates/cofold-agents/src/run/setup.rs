//! Setting up a run and resolving capabilities.

use super::offer::Offer;
use super::{CompactOptions, Exit, Flow, Hold, RunKind, RunOptions, Runner, failed_outcome};
use crate::capability::{CapabilityArgs, resolve_capabilities};
use crate::compaction::COMPACT_ASK;
use crate::error::{AgentError, ErrorCode};
use crate::event::{EventBody, RunStatus};
use crate::id::{Timestamp, new_id};
use crate::message::{Message, MessageSource, Part, Role};
use crate::store::{NewSession, RunRecord};
use crate::tool::AbortSignal;
use crate::usage::ZERO_USAGE;

/// What a fresh run starts from.
pub(crate) enum Start {
    Run(RunOptions),
    Compact(CompactOptions),
}

impl Runner {
    /// The whole life of a `run` or `compact` task.
    pub(crate) async fn start(mut self, start: Start) {
        let exit = match self.set_up(start).await {
            Ok(()) => self.drive().await,
            Err(exit) => exit,
        };
        self.conclude(exit).await;
    }

    async fn set_up(&mut self, start: Start) -> Flow<()> {
        let Opening {
            signal,
            workspace,
            model,
            message_id,
            parts,
            source,
        } = Opening::of(start)?;
        // 1. The abort: an external signal and the run's time limit.
        self.watch_aborts(signal);

        // 2. The session, created when absent.
        let session = self
            .session_or_create(workspace)
            .await
            .map_err(|error| Exit::Settle(failed_outcome(AgentError::internal(error.message))))?;
        self.workspace = session.workspace;

        // 3. A caller-chosen message id must be new to the session.
        let message_id = self.input_id(message_id).await?;
        self.input_message_id = message_id.clone();

        // 4. The writer claim, then 5. the run record.
        let claimed = self.claim().await?;
        self.create_record(model, &message_id, claimed).await?;

        // 6. Capabilities, before anything is written to the transcript.
        self.resolve_capabilities().await?;

        // 7. The input message and `run.started`.
        let input = Message {
            id: message_id,
            role: Role::User,
            parts,
            source,
            created_at: Timestamp::now(),
            summarizes: None,
        };
        self.append(std::slice::from_ref(&input)).await?;
        self.emit(EventBody::RunStarted { input }).await?;

        // 8. The heartbeat; the loop follows.
        self.start_heartbeat();
        Ok(())
    }

    /// The id of the input message: the caller's, when new to the session, else a fresh one.
    async fn input_id(&self, chosen: Option<String>) -> Flow<String> {
        // A fresh id is new by construction; only a chosen one needs the transcript read.
        let Some(message_id) = chosen else {
            return Ok(new_id());
        };
        let history = self
            .store
            .list_messages(self.session_id(), None)
            .await
            .map_err(|error| Exit::Settle(failed_outcome(AgentError::internal(error.message))))?;
        if history.iter().any(|m| m.id == message_id) {
            return Err(Exit::Settle(failed_outcome(AgentError::already_exists(
                format!(
                    "message {message_id} is already in session {}",
                    self.session_id()
                ),
            ))));
        }
        Ok(message_id)
    }

    /// Takes the session's writer claim, before the run record: a `running` record then always
    /// has had a claim naming its process, so one left by a killed process is found dead and
    /// settled; a claim left without its record is taken by the next run. A claim left by a run
    /// whose process is gone is settled first, so a person never waits on a dead run (a store
    /// that judges holders would otherwise hand the claim straight over, leaving that run
    /// `running` with its calls unanswered); a live holder keeps its claim. Whether the claim
    /// was had is returned: a refused run still gets its record.
    async fn claim(&self) -> Flow<bool> {
        let settle_on = |error: AgentError| Exit::Settle(failed_outcome(error));
        if self
            .store
            .dead_writer(self.session_id())
            .await
            .map_err(settle_on)?
            .is_some()
        {
            self.settle_holder().await;
        }
        let claimed = self
            .store
            .claim_writer(self.session_id(), self.run_id())
            .await
            .map_err(settle_on)?;
        if claimed {
            return Ok(true);
        }
        self.settle_holder().await;
        self.store
            .claim_writer(self.session_id(), self.run_id())
            .await
            .map_err(settle_on)
    }

    /// The run record, also for a run refused the claim, so that it is found failed; such a run
    /// then ends `writer_busy`.
    async fn create_record(
        &mut self,
        model: Option<String>,
        message_id: &str,
        claimed: bool,
    ) -> Flow<()> {
        let now = Timestamp::now();
        let record = RunRecord {
            run_id: self.run_id().to_owned(),
            session_id: self.session_id().to_owned(),
            agent_id: self.agent.id().to_owned(),
            model,
            status: RunStatus::Running,
            created_at: now.clone(),
            updated_at: now,
            pending_request_id: None,
            usage: ZERO_USAGE,
            cost: self.tally.cost.map(|_| 0.0),
            steps: 0,
            denials: Vec::new(),
            input_message_id: Some(message_id.to_owned()),
            last_message_id: None,
        };
        if let Err(error) = self.store.create_run(record).await {
            // A run id already taken (never so for a fresh one) is another run's, and so may be
            // its claim.
            if claimed && error.code != ErrorCode::AlreadyExists {
                let _ = self
                    .store
                    .release_writer(self.session_id(), self.run_id())
                    .await;
            }
            return Err(Exit::Settle(failed_outcome(error)));
        }
        self.hold = Hold::take(self.store_key(), self.session_id(), self.run_id());
        if !claimed {
            return Err(Exit::Error(AgentError::new(
                ErrorCode::WriterBusy,
                format!(
                    "session {} is being written by another run",
                    self.session_id()
                ),
            )));
        }
        self.claimed = true;
        Ok(())
    }

    /// Settles the run holding the session's claim when its holder is gone; a failure is only
    /// warned about, as the claim that follows says whether the way is clear.
    async fn settle_holder(&self) {
        if let Err(error) = super::settle_dead_runs(&self.agent, self.session_id()).await {
            self.agent.warn(&format!(
                "could not settle the run holding session {}: {}",
                self.session_id(),
                error.message
            ));
        }
    }

    async fn session_or_create(
        &self,
        workspace: Option<String>,
    ) -> Result<crate::store::SessionRecord, AgentError> {
        if let Some(session) = self.store.get_session(self.session_id()).await? {
            return Ok(session);
        }
        let new = NewSession {
            session_id: self.session_id().to_owned(),
            agent_id: self.agent.id().to_owned(),
            workspace,
        };
        match self.store.create_session(new).await {
            Ok(session) => Ok(session),
            // Someone created it meanwhile: theirs is the session.
            Err(error) if error.code == ErrorCode::AlreadyExists => self
                .store
                .get_session(self.session_id())
                .await?
                .ok_or(error),
            Err(error) => Err(error),
        }
    }

    /// Connects the external signal and the time limit to the run's abort.
    pub(crate) fn watch_aborts(&mut self, external: Option<AbortSignal>) {
        let controller = self.side.shared.abort.clone();
        let timeout = self.agent.limits().timeout_ms;
        self.timers.watch_aborts(controller, external, timeout);
    }

    /// Resolves the agent's capabilities into this run's tools and instructions.
    pub(crate) async fn resolve_capabilities(&mut self) -> Flow<()> {
        let args = CapabilityArgs {
            agent_id: self.agent.id().to_owned(),
            session_id: self.session_id().to_owned(),
            run_id: self.run_id().to_owned(),
            workspace: self.workspace.clone(),
            kv: self.kv(),
            signal: self.signal(),
        };
        let resolving = resolve_capabilities(
            self.agent.instructions(),
            self.agent.tools(),
            self.agent.capabilities(),
            &args,
        );
        let Some(resolved) = self
            .unless_stopped("capability resolution".into(), resolving)
            .await
        else {
            // Stopped meanwhile: the run goes on with the agent's own tools only, to its first
            // abort check, which writes the marker like any other stop.
            let tools = match self.kind {
                RunKind::Compact => Vec::new(),
                RunKind::Turn => self.agent.tools().to_vec(),
            };
            self.offer = Offer::new(self.agent.instructions().to_owned(), tools);
            return Ok(());
        };
        let resolved = resolved?;
        // A compact run offers no tools; it only needs the resolved instructions.
        let tools = if self.kind == RunKind::Compact {
            Vec::new()
        } else {
            resolved.tools
        };
        self.offer = Offer::new(resolved.instructions, tools);
        Ok(())
    }
}

/// What a run or a compaction starts from.
struct Opening {
    signal: Option<AbortSignal>,
    workspace: Option<String>,
    model: Option<String>,
    message_id: Option<String>,
    parts: Vec<Part>,
    source: MessageSource,
}

impl Opening {
    // The large exit is the run's settled outcome, made once per run; boxing it buys nothing.
    #[allow(clippy::result_large_err)]
    fn of(start: Start) -> Flow<Opening> {
        Ok(match start {
            Start::Run(opts) => Opening {
                parts: opts
                    .input
                    .into_parts()
                    .map_err(|e| Exit::Settle(failed_outcome(e)))?,
                signal: opts.signal,
                workspace: opts.workspace,
                model: opts.model,
                message_id: opts.message_id,
                source: MessageSource::Input,
            },
            Start::Compact(opts) => Opening {
                signal: opts.signal,
                workspace: None,
                model: None,
                message_id: opts.message_id,
                parts: vec![Part::text(COMPACT_ASK)],
                source: MessageSource::System,
            },
        })
    }
}
