//! One session carried to an inner host: starting it, the driver task that forwards turns
//! inward and actions outward, and the failure sentences.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ahp::SubscriptionEvent;
use ahp_types::actions::{
    ChatErrorAction, ChatInputCompletedAction, ChatToolCallConfirmedAction,
    ChatTurnCancelledAction, ChatTurnResumeAction, ChatTurnStartedAction,
    SessionConfigChangedAction, StateAction,
};
use ahp_types::common::{JsonObject, StringOrMarkdown};
use ahp_types::state::{ErrorInfo, ErrorResponsePart};
use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::connect::{Conn, Link, connect};
use crate::agent::{
    Agent, AgentError, ApprovalOutcome, ApprovalRequest, Refusal, Session, SessionContext,
    SessionStart, TurnRequest,
};
use crate::machine::{COMPUTER_KEY, ComputerPort, InnerEnd, MachineError, PrepareRequest};

/// How long a closing inner host has to end after its input closed.
const CLOSE_WAIT: Duration = Duration::from_secs(3);

/// What a session in a machine is opened with.
pub(crate) struct Opening {
    pub port: Arc<dyn ComputerPort>,
    pub agent: Arc<dyn Agent>,
    pub plugin: String,
    pub provider: String,
    pub computer: String,
    pub start: SessionStart,
    pub start_timeout: Duration,
}

enum Cmd {
    Begin(Box<TurnRequest>),
    /// A turn sent again to a new inner host, because the one it went to had ended unseen.
    Retry(Box<TurnRequest>),
    Cancel(String),
    Configure(JsonObject),
    Resume(String),
    Close(oneshot::Sender<()>),
}

/// The outer backend of a session whose agent runs in a machine.
pub struct NestedSession {
    backend_id: String,
    machine: String,
    session_uri: String,
    tx: mpsc::UnboundedSender<Cmd>,
    mutable: Arc<Mutex<Vec<String>>>,
}

fn machine_error(e: MachineError) -> AgentError {
    match e {
        MachineError::Refused(m) => AgentError::Refused(m),
        MachineError::Failed(m) => AgentError::Failed(m),
    }
}

impl NestedSession {
    /// Prepares the machine, starts the inner host and opens the conversation inside.
    pub(crate) async fn open(o: Opening) -> Result<Self, AgentError> {
        let start = o.start;
        let machine = o
            .port
            .prepare(PrepareRequest {
                value: o.computer.clone(),
                provider: o.provider.clone(),
                session: start.session_uri.clone(),
                folder: start.working_directory.clone(),
                needs: o.agent.machine(),
            })
            .await
            .map_err(machine_error)?;
        let uri = format!("computer://{machine}");
        if o.computer != uri {
            let mut config = JsonObject::new();
            config.insert(COMPUTER_KEY.into(), Value::String(uri));
            start.ctx.emit(StateAction::SessionConfigChanged(
                SessionConfigChangedAction {
                    config,
                    replace: None,
                },
            ));
        }
        o.port.enter(&machine, &start.session_uri).await;
        let link = Link {
            port: o.port.clone(),
            agent: o.agent,
            plugin: o.plugin,
            provider: o.provider,
            machine: machine.clone(),
            backend_id: start.backend_id.clone(),
            settings: start.settings.clone(),
            folder: start.working_directory.clone(),
            timeout: o.start_timeout,
            ctx: start.ctx.clone(),
        };
        let mutable = Arc::new(Mutex::new(Vec::new()));
        let conn = match connect(&link, start.resume.is_some(), &mutable).await {
            Ok(c) => c,
            Err(sentence) => {
                o.port.leave(&machine, &start.session_uri).await;
                return Err(AgentError::Failed(sentence));
            }
        };
        // The record keeps where the conversation lives, to find it again after a restart.
        let inner_provider = conn.session.split_once(':').map_or("", |(p, _)| p);
        start.ctx.note_nested(&machine, inner_provider);
        let (tx, rx) = mpsc::unbounded_channel();
        let session_uri = start.session_uri.clone();
        tokio::spawn(drive(link, Some(conn), rx, mutable.clone()));
        Ok(Self {
            backend_id: start.backend_id,
            machine,
            session_uri,
            tx,
            mutable,
        })
    }

    /// The machine's id.
    pub fn machine(&self) -> &str {
        &self.machine
    }

    /// The outer session's URI.
    pub fn session_uri(&self) -> &str {
        &self.session_uri
    }
}

#[async_trait]
impl Session for NestedSession {
    fn backend_id(&self) -> String {
        self.backend_id.clone()
    }

    fn begin(&mut self, turn: TurnRequest) {
        let _ = self.tx.send(Cmd::Begin(Box::new(turn)));
    }

    fn cancel(&mut self, turn_id: &str) {
        let _ = self.tx.send(Cmd::Cancel(turn_id.to_owned()));
    }

    fn configure(&mut self, changes: &JsonObject) -> Result<(), Refusal> {
        let mutable = self.mutable.lock().map(|m| m.clone()).unwrap_or_default();
        if let Some(k) = changes.keys().find(|k| !mutable.contains(k)) {
            return Err(Refusal::new(format!(
                "{k} cannot change during a session in a machine"
            )));
        }
        let _ = self.tx.send(Cmd::Configure(changes.clone()));
        Ok(())
    }

    fn resume_turn(&mut self, turn_id: &str) -> Result<(), Refusal> {
        let _ = self.tx.send(Cmd::Resume(turn_id.to_owned()));
        Ok(())
    }

    fn rewind(&mut self, _turn_id: Option<&str>) -> Result<(), Refusal> {
        Err(Refusal::new(
            "a session in a machine cannot be forked or rewound in this version",
        ))
    }

    async fn close(&mut self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Cmd::Close(done)).is_ok() {
            let _ = tokio::time::timeout(CLOSE_WAIT * 2, wait).await;
        }
    }
}

/// The running turn: its id and when it started.
struct Running {
    id: String,
    since: Instant,
    /// The turn as sent, until the host inside shows it took it. A host found ended before
    /// then never saw the turn (a machine stopped a moment before it, say), so the turn goes
    /// to a new host once rather than failing.
    unseen: Option<Box<TurnRequest>>,
    /// Whether this turn was already sent again.
    retried: bool,
}

fn fail_turn(ctx: &SessionContext, turn: &Running, message: String) {
    ctx.emit(StateAction::ChatError(ChatErrorAction {
        turn_id: turn.id.clone(),
        duration: i64::try_from(turn.since.elapsed().as_millis()).unwrap_or(i64::MAX),
        part: ErrorResponsePart {
            error: ErrorInfo {
                error_type: "turnFailed".into(),
                message,
                stack: None,
                meta: None,
            },
            resumable: None,
        },
        meta: None,
    }));
}

/// Runs the session's commands and forwards the inner host's actions until closed.
async fn drive(
    link: Link,
    mut conn: Option<Conn>,
    mut rx: mpsc::UnboundedReceiver<Cmd>,
    mutable: Arc<Mutex<Vec<String>>>,
) {
    let mut running: Option<Running> = None;
    loop {
        // The event stream and the end are watched apart from the connection, so a command can
        // replace the connection while neither is borrowed.
        let watch = conn.as_mut().map(|c| (c.ended.clone(), &mut c.events));
        let (ended, events) = match watch {
            Some((e, ev)) => (Some(e), Some(ev)),
            None => (None, None),
        };
        let event = async {
            match events {
                Some(ev) => ev.recv().await,
                None => std::future::pending().await,
            }
        };
        let ended = async {
            match ended {
                Some(e) => e.await,
                None => std::future::pending().await,
            }
        };
        enum Next {
            Cmd(Option<Cmd>),
            Event(Option<Box<ahp::ClientEvent>>),
            Ended(InnerEnd),
        }
        let next = tokio::select! {
            cmd = rx.recv() => Next::Cmd(cmd),
            ev = event => Next::Event(ev.map(Box::new)),
            end = ended => Next::Ended(end),
        };
        match next {
            Next::Cmd(None) => break,
            Next::Cmd(Some(Cmd::Close(done))) => {
                if let Some(c) = conn.take() {
                    close(c, &link.machine).await;
                }
                let _ = done.send(());
                return;
            }
            Next::Cmd(Some(cmd)) => {
                command(&link, &mut conn, &mut running, cmd, &mutable).await;
            }
            Next::Event(Some(ev)) => {
                if let Some(c) = conn.as_ref() {
                    forward(&link, c, *ev, &mut running);
                }
            }
            Next::Event(None) => {
                if let Some(c) = conn.take() {
                    let end = c.ended.clone().await;
                    if let Some(turn) = ended_now(&link, &c, end, &mut running) {
                        command(&link, &mut conn, &mut running, Cmd::Retry(turn), &mutable).await;
                    }
                }
            }
            Next::Ended(end) => {
                if let Some(c) = conn.take()
                    && let Some(turn) = ended_now(&link, &c, end, &mut running)
                {
                    command(&link, &mut conn, &mut running, Cmd::Retry(turn), &mutable).await;
                }
            }
        }
    }
    if let Some(c) = conn.take() {
        close(c, &link.machine).await;
    }
}

/// Fails the running turn with how the inner host ended, or hands it back to be sent again
/// when that host never took it.
fn ended_now(
    link: &Link,
    c: &Conn,
    end: InnerEnd,
    running: &mut Option<Running>,
) -> Option<Box<TurnRequest>> {
    let deleted = end.deleted;
    let sentence = if end.deleted {
        format!(
            "computer://{} was deleted while this session ran in it",
            link.machine
        )
    } else {
        format!(
            "the host inside computer://{} ended: {}{}",
            link.machine,
            end.how(),
            c.tail.said()
        )
    };
    match running.take() {
        Some(Running {
            unseen: Some(turn),
            retried: false,
            ..
        }) if !deleted => {
            tracing::info!(machine = %link.machine, "{sentence}; turn {} goes to a new one", turn.turn_id);
            Some(turn)
        }
        Some(turn) => {
            fail_turn(&link.ctx, &turn, sentence);
            None
        }
        None => {
            tracing::info!(machine = %link.machine, "{sentence}");
            None
        }
    }
}

async fn close(c: Conn, machine: &str) {
    c.client.shutdown().await;
    drop(c.events);
    if tokio::time::timeout(CLOSE_WAIT, c.ended).await.is_err() {
        tracing::warn!(
            machine,
            "the host inside computer://{machine} did not end within 3 s of its input closing; it ends with the machine"
        );
    }
}

async fn command(
    link: &Link,
    conn: &mut Option<Conn>,
    running: &mut Option<Running>,
    cmd: Cmd,
    mutable: &Arc<Mutex<Vec<String>>>,
) {
    if conn.is_none() {
        match connect(link, true, mutable).await {
            Ok(c) => *conn = Some(c),
            Err(sentence) => {
                if let Cmd::Begin(turn) | Cmd::Retry(turn) = &cmd {
                    let turn = Running {
                        id: turn.turn_id.clone(),
                        since: Instant::now(),
                        unseen: None,
                        retried: true,
                    };
                    fail_turn(&link.ctx, &turn, sentence);
                } else {
                    tracing::warn!(machine = %link.machine, "{sentence}");
                }
                return;
            }
        }
    }
    let Some(c) = conn.as_ref() else { return };
    let retried = matches!(cmd, Cmd::Retry(_));
    let (channel, action) = match cmd {
        Cmd::Begin(turn) | Cmd::Retry(turn) => {
            *running = Some(Running {
                id: turn.turn_id.clone(),
                since: Instant::now(),
                unseen: Some(turn.clone()),
                retried,
            });
            (
                c.chat.clone(),
                StateAction::ChatTurnStarted(ChatTurnStartedAction {
                    turn_id: turn.turn_id,
                    started_at: jiff::Timestamp::now().to_string(),
                    message: turn.message,
                    queued_message_id: None,
                    meta: None,
                }),
            )
        }
        Cmd::Cancel(turn_id) => {
            *running = None;
            (
                c.chat.clone(),
                StateAction::ChatTurnCancelled(ChatTurnCancelledAction {
                    turn_id,
                    duration: 0,
                    meta: None,
                }),
            )
        }
        Cmd::Configure(config) => (
            c.session.clone(),
            StateAction::SessionConfigChanged(SessionConfigChangedAction {
                config,
                replace: None,
            }),
        ),
        Cmd::Resume(turn_id) => (
            c.chat.clone(),
            StateAction::ChatTurnResume(ChatTurnResumeAction { turn_id }),
        ),
        Cmd::Close(_) => return,
    };
    if let Err(e) = c.client.dispatch(channel, action).await {
        tracing::warn!(machine = %link.machine, "cannot reach the host inside computer://{}: {e}", link.machine);
    }
}

/// Whether the inner host says this itself, so the outer host says its own instead.
fn said_by_host(action: &StateAction) -> bool {
    !matches!(
        action,
        StateAction::ChatResponsePart(_)
            | StateAction::ChatDelta(_)
            | StateAction::ChatReasoning(_)
            | StateAction::ChatUsage(_)
            | StateAction::ChatToolCallStart(_)
            | StateAction::ChatToolCallDelta(_)
            | StateAction::ChatToolCallReady(_)
            | StateAction::ChatToolCallComplete(_)
            | StateAction::ChatToolCallContentChanged(_)
            | StateAction::ChatActivityChanged(_)
            | StateAction::ChatTurnComplete(_)
            | StateAction::ChatError(_)
            | StateAction::SessionTitleChanged(_)
            | StateAction::SessionCustomizationsChanged(_)
            | StateAction::SessionServerToolsChanged(_)
    )
}

fn forward(link: &Link, c: &Conn, ev: ahp::ClientEvent, running: &mut Option<Running>) {
    let SubscriptionEvent::Action(envelope) = ev.event else {
        return;
    };
    if envelope.channel != c.chat && envelope.channel != c.session {
        return;
    }
    let action = envelope.action;
    if let (StateAction::ChatTurnStarted(a), Some(r)) = (&action, running.as_mut())
        && a.turn_id == r.id
    {
        r.unseen = None;
    }
    match action {
        StateAction::ChatToolCallReady(a) if a.confirmed.is_none() => {
            let ctx = link.ctx.clone();
            let client = c.client.clone();
            let chat = c.chat.clone();
            tokio::spawn(async move {
                let request = ApprovalRequest {
                    turn_id: a.turn_id.clone(),
                    tool_call_id: a.tool_call_id.clone(),
                    invocation_message: a.invocation_message,
                    tool_input: a.tool_input,
                    confirmation_title: a.confirmation_title,
                    edits: a.edits,
                    risk_assessment: a.risk_assessment,
                    editable: a.editable,
                    meta: a.meta,
                };
                let mut said = None;
                let (approved, reason, edited, option, why) = match ctx.ask_approval(request).await
                {
                    ApprovalOutcome::Approved {
                        edited_input,
                        option_id,
                        confirmed,
                    } => (true, None, edited_input, option_id, Some(confirmed)),
                    ApprovalOutcome::Denied { reason, message } => {
                        said = message.map(StringOrMarkdown::Plain);
                        (false, reason, None, None, None)
                    }
                    ApprovalOutcome::Cancelled => (false, None, None, None, None),
                };
                let confirmed = StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
                    turn_id: a.turn_id,
                    tool_call_id: a.tool_call_id,
                    meta: None,
                    approved,
                    confirmed: why,
                    reason,
                    edited_tool_input: edited,
                    user_suggestion: None,
                    reason_message: said,
                    selected_option_id: option,
                });
                let _ = client.dispatch(chat, confirmed).await;
            });
        }
        StateAction::ChatInputRequested(a) => {
            let Some(turn) = running.as_ref().map(|r| r.id.clone()) else {
                return;
            };
            let ctx = link.ctx.clone();
            let client = c.client.clone();
            let chat = c.chat.clone();
            tokio::spawn(async move {
                let request_id = a.request.id.clone();
                let outcome = ctx.ask_input(&turn, a.request).await;
                let done = StateAction::ChatInputCompleted(ChatInputCompletedAction {
                    request_id,
                    response: outcome.response,
                    answers: outcome.answers,
                });
                let _ = client.dispatch(chat, done).await;
            });
        }
        other if said_by_host(&other) => {}
        other => {
            if let (StateAction::ChatTurnComplete(_) | StateAction::ChatError(_), Some(_)) =
                (&other, running.as_ref())
            {
                *running = None;
            }
            link.ctx.emit(remap(other, c.remap.as_ref()));
        }
    }
}

/// Inner working folder URIs become the host's.
fn remap(action: StateAction, remap: Option<&(String, String)>) -> StateAction {
    let Some((inside, host)) = remap else {
        return action;
    };
    let Ok(text) = serde_json::to_string(&action) else {
        return action;
    };
    if !text.contains(inside.as_str()) {
        return action;
    }
    serde_json::from_str(&text.replace(inside.as_str(), host)).unwrap_or(action)
}
