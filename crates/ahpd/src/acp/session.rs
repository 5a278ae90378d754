//! One session open in the editor: a task that follows the host's session and default chat
//! (through the terminal client's `Conversation`), tells the editor what happens in them, and
//! turns the editor's requests into the host's actions. It runs beside the connection's
//! dispatch loop, so it may wait on the editor (a permission, a question) and on the host alike.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;

use agent_client_protocol::v1::schema::{
    CreateElicitationRequest, CreateElicitationResponse, CurrentModeUpdate, PermissionOption,
    PermissionOptionKind, PromptRequest, PromptResponse, RequestPermissionOutcome,
    RequestPermissionRequest, SessionConfigOption, SessionInfoUpdate, SessionNotification,
    SessionUpdate, StopReason, ToolCallUpdate, UsageUpdate,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Client, Error, ErrorCode, RequestCancellationHandle};
use ahp_types::actions::{
    ActionEnvelope, ChatInputCompletedAction, ChatToolCallConfirmedAction, ChatTurnStartedAction,
    SessionConfigChangedAction, StateAction,
};
use ahp_types::common::{JsonObject, StringOrMarkdown};
use ahp_types::state::{
    ChatInputAnswer, ChatInputAnswerValue, ChatInputAnswered, ChatInputBooleanAnswerValue,
    ChatInputNumberAnswerValue, ChatInputRequest, ChatInputResponseKind,
    ChatInputSelectedAnswerValue, ChatInputSelectedManyAnswerValue, ChatInputTextAnswerValue,
    ConfirmationOption, ConfirmationOptionKind, ResponsePart, SessionInputRequest,
    SessionModelInfo, ToolCallCancellationReason, ToolCallConfirmationState,
};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::settings::{self, Setting};
use super::updates::{self, Shown};
use crate::term::Conn;
use crate::term::conversation::Conversation;

/// What the model reads when a question reaches an editor that cannot show one.
pub(crate) const NO_ONE_TO_ASK: &str = "No one could be asked: the editor this session runs in cannot show questions. Decide without the answer and say what you assumed.";
/// What the model reads when the editor rejects a call.
const REJECTED: &str = "The person rejected this action.";
/// What the model reads when the editor dismissed a permission request without choosing.
const DISMISSED: &str = "The person dismissed the request without allowing it.";

/// What the editor chose for a tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Choice {
    /// This call.
    Once,
    /// This tool, for the rest of the session (the host keeps the rule).
    Session,
    /// Not this call; the sentence is what the model reads.
    Reject(String),
    /// Another approving option the host offered, by its id.
    Other(String),
}

/// A request to a session's task.
pub(crate) enum Cmd {
    /// `session/prompt` (boxed: it is several times the size of the others).
    Prompt(Box<(PromptRequest, Responder<PromptResponse>)>),
    /// `session/cancel`.
    Cancel,
    /// `session/set_config_option` (and `session/set_mode`), already checked against the
    /// settings: the host key and value.
    Configure {
        key: String,
        value: Value,
        reply: oneshot::Sender<Result<Vec<SessionConfigOption>, String>>,
    },
    /// The settings as they stand.
    Settings(oneshot::Sender<Vec<Setting>>),
    /// The editor's answer to a permission request.
    Permission {
        entry: String,
        turn: String,
        call: String,
        answer: Option<Choice>,
    },
    /// The editor's answer to a question.
    Question {
        entry: String,
        request: String,
        response: ChatInputResponseKind,
        answers: Option<HashMap<String, ChatInputAnswer>>,
    },
    /// `session/close`: ends the task once its turn is stopped.
    Close(oneshot::Sender<()>),
}

/// The task of one open session.
pub(crate) struct Handle {
    pub tx: mpsc::UnboundedSender<Cmd>,
    pub task: JoinHandle<()>,
}

/// A request put to the editor, withdrawn when someone else answers first.
struct Asking {
    cancel: RequestCancellationHandle,
    task: JoinHandle<()>,
}

impl Asking {
    /// Asks the editor to drop the request: it was settled elsewhere.
    fn withdraw(self) {
        let _ = self.cancel.cancel();
    }
}

impl Drop for Asking {
    fn drop(&mut self) {
        // After `session/cancel` the editor answers its open requests itself; whatever it
        // answers is not needed any more.
        self.task.abort();
    }
}

struct Running {
    turn: String,
    responder: Responder<PromptResponse>,
    cancelled: bool,
}

/// What a session's task needs from its connection.
pub(crate) struct Context {
    pub conn: Arc<Conn>,
    pub cx: ConnectionTo<Client>,
    pub models: Vec<SessionModelInfo>,
    /// Whether the editor shows form questions (`elicitation.form`).
    pub elicitation: bool,
}

struct Session {
    ctx: Context,
    id: String,
    conv: Conversation,
    dir: PathBuf,
    shown: HashMap<String, Shown>,
    ours: Option<Running>,
    queue: VecDeque<(PromptRequest, Responder<PromptResponse>)>,
    asking: HashMap<String, Asking>,
    settings: Vec<Setting>,
    tx: mpsc::UnboundedSender<Cmd>,
}

/// Starts the task of a session already opened with `conv`.
pub(crate) fn start(ctx: Context, conv: Conversation, dir: PathBuf) -> Handle {
    let (tx, rx) = mpsc::unbounded_channel();
    let settings = settings::settings(&conv.session_state, &ctx.models);
    let session = Session {
        id: conv.session.clone(),
        ctx,
        conv,
        dir,
        shown: HashMap::new(),
        ours: None,
        queue: VecDeque::new(),
        asking: HashMap::new(),
        settings,
        tx: tx.clone(),
    };
    let task = tokio::spawn(session.run(rx));
    Handle { tx, task }
}

/// The stop reason for a turn the host ended with an error, when ACP has one for it.
fn stop_reason_of_error(error_type: &str, message: &str) -> Option<StopReason> {
    let t = error_type.to_ascii_lowercase();
    let m = message.to_ascii_lowercase();
    if t.contains("maxtokens") || t.contains("max_tokens") || m.contains("maximum output length") {
        Some(StopReason::MaxTokens)
    } else if t.contains("turnlimit") || t.contains("maxturn") || m.contains("turn limit") {
        Some(StopReason::MaxTurnRequests)
    } else if t.contains("refusal") {
        Some(StopReason::Refusal)
    } else {
        None
    }
}

/// The turn an action ends, and how.
fn ended(action: &StateAction) -> Option<&str> {
    match action {
        StateAction::ChatTurnComplete(a) => Some(&a.turn_id),
        StateAction::ChatError(a) => Some(&a.turn_id),
        StateAction::ChatTurnCancelled(a) => Some(&a.turn_id),
        _ => None,
    }
}

impl Session {
    fn notify(&self, update: SessionUpdate) {
        // The editor going away ends the connection, and with it this task; nothing to do here.
        let _ = self
            .ctx
            .cx
            .send_notification(SessionNotification::new(self.id.clone(), update));
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Cmd>) {
        loop {
            tokio::select! {
                cmd = rx.recv() => {
                    let Some(cmd) = cmd else { break };
                    if let Cmd::Close(done) = cmd {
                        self.close().await;
                        let _ = done.send(());
                        return;
                    }
                    self.command(cmd).await;
                }
                env = self.conv.next() => {
                    let Some(env) = env else {
                        self.host_gone();
                        return;
                    };
                    self.action(env).await;
                }
            }
        }
        self.close().await;
    }

    fn host_gone(&mut self) {
        let why = "the connection to the agent host ended";
        if let Some(r) = self.ours.take() {
            let _ = r
                .responder
                .respond_with_error(Error::new(ErrorCode::INTERNAL_ERROR, why));
        }
        for (_, responder) in self.queue.drain(..) {
            let _ = responder.respond_with_error(Error::new(ErrorCode::INTERNAL_ERROR, why));
        }
    }

    async fn close(&mut self) {
        if let Some(r) = &mut self.ours {
            r.cancelled = true;
            let turn = r.turn.clone();
            let _ = self.conv.stop(&self.ctx.conn, &turn).await;
        }
        if let Some(r) = self.ours.take() {
            let _ = r
                .responder
                .respond(PromptResponse::new(StopReason::Cancelled));
        }
        for (_, responder) in self.queue.drain(..) {
            let _ = responder.respond(PromptResponse::new(StopReason::Cancelled));
        }
        self.asking.clear();
        let client = &self.ctx.conn.client;
        let _ = client.unsubscribe(self.conv.chat.clone()).await;
        let _ = client.unsubscribe(self.conv.session.clone()).await;
    }

    async fn command(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Prompt(prompt) => {
                let (req, responder) = *prompt;
                if self.ours.is_some() || self.conv.chat_state.active_turn.is_some() {
                    // ACP has no steering: a prompt sent during a turn waits for its end.
                    self.queue.push_back((req, responder));
                } else {
                    self.begin(req, responder).await;
                }
            }
            Cmd::Cancel => {
                for (_, responder) in self.queue.drain(..) {
                    let _ = responder.respond(PromptResponse::new(StopReason::Cancelled));
                }
                // The editor answers its open permission requests `cancelled` itself.
                self.asking.clear();
                if let Some(r) = &mut self.ours
                    && !r.cancelled
                {
                    r.cancelled = true;
                    let turn = r.turn.clone();
                    if let Err(e) = self.conv.stop(&self.ctx.conn, &turn).await {
                        tracing::warn!("cannot stop the turn: {e}");
                    }
                }
            }
            Cmd::Configure { key, value, reply } => {
                let _ = reply.send(self.configure(key, value).await);
            }
            Cmd::Settings(reply) => {
                let _ = reply.send(self.settings.clone());
            }
            Cmd::Permission {
                entry,
                turn,
                call,
                answer,
            } => {
                self.asking.remove(&entry);
                let answer = match answer {
                    Some(a) => a,
                    // Dismissed while the prompt runs on: the call is not allowed. Dismissed
                    // because the prompt was cancelled: the cancel settles it.
                    None if self.ours.as_ref().is_some_and(|r| r.cancelled) => return,
                    None => Choice::Reject(DISMISSED.into()),
                };
                self.confirm(turn, call, answer).await;
            }
            Cmd::Question {
                entry,
                request,
                response,
                answers,
            } => {
                self.asking.remove(&entry);
                self.answer_question(request, response, answers).await;
            }
            Cmd::Close(_) => {}
        }
    }

    async fn begin(&mut self, req: PromptRequest, responder: Responder<PromptResponse>) {
        let message = match super::prompt::message_of(&req.prompt) {
            Ok(m) => m,
            Err(why) => {
                let _ = responder.respond_with_error(Error::new(ErrorCode::INVALID_PARAMS, why));
                return;
            }
        };
        let turn = format!("t-{}", uuid::Uuid::new_v4().simple());
        let action = StateAction::ChatTurnStarted(ChatTurnStartedAction {
            turn_id: turn.clone(),
            started_at: ahpd_sdk::util::now_iso(),
            message,
            queued_message_id: None,
            meta: None,
        });
        match self
            .ctx
            .conn
            .client
            .dispatch(self.conv.chat.clone(), action)
            .await
        {
            Ok(_) => {
                self.ours = Some(Running {
                    turn,
                    responder,
                    cancelled: false,
                });
            }
            Err(e) => {
                let _ = responder.respond_with_error(Error::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!("the agent host did not take the prompt: {e}"),
                ));
            }
        }
    }

    /// Starts the next queued prompt once no turn runs.
    async fn next_prompt(&mut self) {
        while self.ours.is_none() && self.conv.chat_state.active_turn.is_none() {
            let Some((req, responder)) = self.queue.pop_front() else {
                return;
            };
            self.begin(req, responder).await;
        }
    }

    async fn configure(
        &mut self,
        key: String,
        value: Value,
    ) -> Result<Vec<SessionConfigOption>, String> {
        let now = self
            .conv
            .session_state
            .config
            .as_ref()
            .and_then(|c| c.values.get(&key));
        if now != Some(&value) {
            let mut config = JsonObject::new();
            config.insert(key.clone(), value.clone());
            let action = StateAction::SessionConfigChanged(SessionConfigChangedAction {
                config,
                replace: None,
            });
            self.ctx
                .conn
                .client
                .dispatch(self.conv.session.clone(), action)
                .await
                .map_err(|e| format!("the agent host connection ended: {e}"))?;
        }
        // The host applies it in order before the next turn; the editor is answered with the
        // settings as they will stand, and told again when the host says so.
        let mut state = self.conv.session_state.clone();
        if let Some(c) = &mut state.config {
            c.values.insert(key, value);
        }
        Ok(settings::options(&settings::settings(
            &state,
            &self.ctx.models,
        )))
    }

    async fn action(&mut self, env: ActionEnvelope) {
        if env.channel == self.conv.chat {
            self.chat_action(env).await;
        } else if env.channel == self.conv.session {
            self.session_action(env);
        }
    }

    async fn chat_action(&mut self, env: ActionEnvelope) {
        if let Some(why) = &env.rejection_reason {
            if let StateAction::ChatTurnStarted(s) = &env.action
                && self.ours.as_ref().is_some_and(|r| r.turn == s.turn_id)
                && let Some(r) = self.ours.take()
            {
                let _ = r.responder.respond_with_error(Error::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!("the agent host refused the prompt: {why}"),
                ));
                self.next_prompt().await;
            }
            return;
        }
        if let StateAction::ChatTurnStarted(s) = &env.action
            && self.ours.as_ref().is_none_or(|r| r.turn != s.turn_id)
        {
            // Another client's turn in the same conversation: the editor shows it as said.
            for u in updates::user_message(&s.message) {
                self.notify(u);
            }
        }
        if let StateAction::ChatUsage(u) = &env.action {
            self.usage(&u.usage);
        }
        if let Some(turn) = &self.conv.chat_state.active_turn {
            let id = turn.id.clone();
            let parts = turn.response_parts.clone();
            self.show(&id, &parts);
        }
        let Some(turn_id) = ended(&env.action).map(str::to_owned) else {
            return;
        };
        let parts = self
            .conv
            .chat_state
            .turns
            .iter()
            .rev()
            .find(|t| t.id == turn_id)
            .map(|t| t.response_parts.clone());
        if let Some(parts) = parts {
            self.show(&turn_id, &parts);
        }
        self.shown.remove(&turn_id);
        if self.ours.as_ref().is_some_and(|r| r.turn == turn_id)
            && let Some(r) = self.ours.take()
        {
            let answer = match &env.action {
                _ if r.cancelled => Ok(StopReason::Cancelled),
                StateAction::ChatTurnComplete(_) => Ok(StopReason::EndTurn),
                StateAction::ChatTurnCancelled(_) => Ok(StopReason::Cancelled),
                StateAction::ChatError(e) => {
                    let error = &e.part.error;
                    stop_reason_of_error(&error.error_type, &error.message)
                        .ok_or_else(|| error.message.clone())
                }
                _ => Ok(StopReason::EndTurn),
            };
            let _ = match answer {
                Ok(reason) => r.responder.respond(PromptResponse::new(reason)),
                Err(message) => r.responder.respond_with_error(Error::new(
                    ErrorCode::INTERNAL_ERROR,
                    format!("the turn failed: {message}"),
                )),
            };
        }
        self.next_prompt().await;
    }

    fn show(&mut self, turn: &str, parts: &[ResponsePart]) {
        let dir = self.dir.clone();
        let updates = self
            .shown
            .entry(turn.to_owned())
            .or_default()
            .advance(parts, &dir);
        for u in updates {
            self.notify(u);
        }
    }

    fn usage(&self, usage: &ahp_types::state::UsageInfo) {
        let used = usage.input_tokens.unwrap_or(0) + usage.output_tokens.unwrap_or(0);
        let model = usage.model.clone().or_else(|| self.conv.setting("model"));
        let named = |m: &&SessionModelInfo| {
            model.as_deref().is_some_and(|want| {
                m.id == want
                    || m.name == want
                    || m.id.rsplit_once('/').is_some_and(|(_, tail)| tail == want)
            })
        };
        let size = self
            .ctx
            .models
            .iter()
            .filter(named)
            .find_map(|m| m.max_context_window);
        // ACP reports the share of the context window in use, which needs the window's size.
        if let (Ok(used), Some(Ok(size))) = (u64::try_from(used), size.map(u64::try_from)) {
            self.notify(SessionUpdate::UsageUpdate(UsageUpdate::new(used, size)));
        }
    }

    fn session_action(&mut self, env: ActionEnvelope) {
        if env.rejection_reason.is_some() {
            return;
        }
        match &env.action {
            StateAction::SessionInputNeededSet(set) => match &set.request {
                SessionInputRequest::ToolConfirmation(req) if req.chat == self.conv.chat => {
                    if let ToolCallConfirmationState::PendingConfirmation(tc) = &req.tool_call {
                        let offered = tc.options.clone().unwrap_or_default();
                        let tc = ahp_types::state::ToolCallState::PendingConfirmation(tc.clone());
                        if let Some(view) = updates::view(&tc) {
                            self.ask_permission(req.id.clone(), req.turn_id.clone(), view, offered);
                        }
                    }
                }
                SessionInputRequest::ChatInput(req) if req.chat == self.conv.chat => {
                    self.ask_question(req.id.clone(), req.request.clone());
                }
                _ => {}
            },
            StateAction::SessionInputNeededRemoved(r) => {
                // Answered by another client, or settled by the turn's end.
                if let Some(a) = self.asking.remove(&r.id) {
                    a.withdraw();
                }
            }
            StateAction::SessionConfigChanged(_) => {
                let now = settings::settings(&self.conv.session_state, &self.ctx.models);
                if now != self.settings {
                    let mode =
                        |s: &[Setting]| settings::modes(s).map(|m| m.current_mode_id.to_string());
                    let (before, after) = (mode(&self.settings), mode(&now));
                    self.notify(SessionUpdate::ConfigOptionUpdate(
                        agent_client_protocol::v1::schema::ConfigOptionUpdate::new(
                            settings::options(&now),
                        ),
                    ));
                    if let Some(m) = after
                        && before.as_ref() != Some(&m)
                    {
                        self.notify(SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(m)));
                    }
                    self.settings = now;
                }
            }
            StateAction::SessionTitleChanged(t) => {
                self.notify(SessionUpdate::SessionInfoUpdate(
                    SessionInfoUpdate::new().title(t.title.clone()),
                ));
            }
            _ => {}
        }
    }

    fn ask_permission(
        &mut self,
        entry: String,
        turn: String,
        view: updates::CallView,
        offered: Vec<ConfirmationOption>,
    ) {
        let fields = updates::permission_fields(&view, &self.dir);
        let options = permission_options(&view.name, &offered);
        let request = RequestPermissionRequest::new(
            self.id.clone(),
            ToolCallUpdate::new(view.id.clone(), fields),
            options,
        );
        let approving: Vec<String> = offered
            .iter()
            .filter(|o| o.kind != ConfirmationOptionKind::Deny)
            .map(|o| o.id.clone())
            .collect();
        let sent = self.ctx.cx.send_request(request);
        let cancel = sent.cancellation_handle();
        let tx = self.tx.clone();
        let key = entry.clone();
        let call = view.id;
        let task = tokio::spawn(async move {
            let answer = match sent.block_task().await {
                Ok(resp) => match resp.outcome {
                    RequestPermissionOutcome::Selected(s) => Some(match &*s.option_id.0 {
                        "allow-once" => Choice::Once,
                        "allow-session" => Choice::Session,
                        other if approving.iter().any(|id| id == other) => {
                            Choice::Other(other.to_owned())
                        }
                        _ => Choice::Reject(REJECTED.into()),
                    }),
                    _ => None,
                },
                Err(e) => {
                    tracing::debug!("the permission request failed: {e}");
                    None
                }
            };
            let _ = tx.send(Cmd::Permission {
                entry: key,
                turn,
                call,
                answer,
            });
        });
        self.asking.insert(entry, Asking { cancel, task });
    }

    fn ask_question(&mut self, entry: String, request: ChatInputRequest) {
        let questions: Vec<Value> = request
            .questions
            .iter()
            .flatten()
            .filter_map(|q| serde_json::to_value(q).ok())
            .collect();
        let tx = self.tx.clone();
        let request_id = request.id.clone();
        if !self.ctx.elicitation {
            let answers = questions
                .iter()
                .filter_map(|q| q.get("id").and_then(Value::as_str))
                .map(|id| {
                    (
                        id.to_owned(),
                        ChatInputAnswer::Submitted(ChatInputAnswered {
                            value: ChatInputAnswerValue::Text(ChatInputTextAnswerValue {
                                value: NO_ONE_TO_ASK.into(),
                            }),
                        }),
                    )
                })
                .collect();
            let _ = tx.send(Cmd::Question {
                entry,
                request: request_id,
                response: ChatInputResponseKind::Accept,
                answers: Some(answers),
            });
            return;
        }
        let elicitation = match elicitation_of(&self.id, &request, &questions) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!("cannot put the question to the editor: {e}");
                let _ = tx.send(Cmd::Question {
                    entry,
                    request: request_id,
                    response: ChatInputResponseKind::Decline,
                    answers: None,
                });
                return;
            }
        };
        let sent = self.ctx.cx.send_request(elicitation);
        let cancel = sent.cancellation_handle();
        let key = entry.clone();
        let task = tokio::spawn(async move {
            let (response, answers) = match sent.block_task().await {
                Ok(resp) => answers_of(&resp, &questions),
                Err(_) => (ChatInputResponseKind::Cancel, None),
            };
            let _ = tx.send(Cmd::Question {
                entry: key,
                request: request_id,
                response,
                answers,
            });
        });
        self.asking.insert(entry, Asking { cancel, task });
    }

    /// Answers the host's approval of `call` with the option of the same id the host offers
    /// (`allow-session` is what makes it keep the session's rule).
    async fn confirm(&mut self, turn: String, call: String, choice: Choice) {
        let (approved, option, reason, sentence) = match choice {
            Choice::Once => (true, "allow-once".to_owned(), None, None),
            Choice::Session => (true, "allow-session".to_owned(), None, None),
            Choice::Other(id) => (true, id, None, None),
            Choice::Reject(why) => (
                false,
                "deny".to_owned(),
                Some(ToolCallCancellationReason::Denied),
                Some(StringOrMarkdown::Plain(why)),
            ),
        };
        let action = StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
            turn_id: turn,
            tool_call_id: call,
            meta: None,
            approved,
            confirmed: None,
            reason,
            edited_tool_input: None,
            user_suggestion: None,
            reason_message: sentence,
            selected_option_id: Some(option),
        });
        if let Err(e) = self
            .ctx
            .conn
            .client
            .dispatch(self.conv.chat.clone(), action)
            .await
        {
            tracing::warn!("cannot answer the approval: {e}");
        }
    }

    async fn answer_question(
        &mut self,
        request: String,
        response: ChatInputResponseKind,
        answers: Option<HashMap<String, ChatInputAnswer>>,
    ) {
        let action = StateAction::ChatInputCompleted(ChatInputCompletedAction {
            request_id: request,
            response,
            answers,
        });
        if let Err(e) = self
            .ctx
            .conn
            .client
            .dispatch(self.conv.chat.clone(), action)
            .await
        {
            tracing::warn!("cannot answer the question: {e}");
        }
    }
}

/// The host's choices for an approval as ACP permission options, under the host's ids and
/// labels; the host's usual three when it named none.
fn permission_options(tool: &str, offered: &[ConfirmationOption]) -> Vec<PermissionOption> {
    if offered.is_empty() {
        return vec![
            PermissionOption::new("allow-once", "Allow once", PermissionOptionKind::AllowOnce),
            PermissionOption::new(
                "allow-session",
                format!("Allow {tool} for this session"),
                PermissionOptionKind::AllowAlways,
            ),
            PermissionOption::new("deny", "Reject", PermissionOptionKind::RejectOnce),
        ];
    }
    offered
        .iter()
        .map(|o| {
            let kind = match (&o.kind, o.id.as_str()) {
                (ConfirmationOptionKind::Deny, _) => PermissionOptionKind::RejectOnce,
                (_, "allow-session") => PermissionOptionKind::AllowAlways,
                _ => PermissionOptionKind::AllowOnce,
            };
            PermissionOption::new(o.id.clone(), o.label.clone(), kind)
        })
        .collect()
}

/// The form an editor shows for the host's questions.
fn elicitation_of(
    session: &str,
    request: &ChatInputRequest,
    questions: &[Value],
) -> Result<CreateElicitationRequest, serde_json::Error> {
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    for q in questions {
        let Some(id) = q.get("id").and_then(Value::as_str) else {
            continue;
        };
        let message = q.get("message").and_then(Value::as_str).unwrap_or(id);
        let title = q.get("title").and_then(Value::as_str).unwrap_or(message);
        let options = || -> Vec<Value> {
            q.get("options")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|o| {
                    let value = o.get("id").and_then(Value::as_str)?;
                    let label = o.get("label").and_then(Value::as_str).unwrap_or(value);
                    Some(json!({ "const": value, "title": label }))
                })
                .collect()
        };
        let schema = match q.get("kind").and_then(Value::as_str).unwrap_or("text") {
            "number" => json!({ "type": "number" }),
            "integer" => json!({ "type": "integer" }),
            "boolean" => json!({ "type": "boolean" }),
            "single-select" => json!({ "type": "string", "oneOf": options() }),
            "multi-select" => json!({ "type": "array", "items": { "anyOf": options() } }),
            _ => json!({ "type": "string" }),
        };
        let mut schema = schema;
        schema["title"] = json!(title);
        schema["description"] = json!(message);
        properties.insert(id.to_owned(), schema);
        if q.get("required").and_then(Value::as_bool) != Some(false) {
            required.push(id.to_owned());
        }
    }
    serde_json::from_value(json!({
        "mode": "form",
        "sessionId": session,
        "message": request.message.clone().unwrap_or_else(|| "The agent has a question".into()),
        "requestedSchema": { "type": "object", "properties": properties, "required": required },
    }))
}

/// The host's answers from the editor's form.
fn answers_of(
    resp: &CreateElicitationResponse,
    questions: &[Value],
) -> (
    ChatInputResponseKind,
    Option<HashMap<String, ChatInputAnswer>>,
) {
    let Ok(v) = serde_json::to_value(resp) else {
        return (ChatInputResponseKind::Cancel, None);
    };
    match v.get("action").and_then(Value::as_str) {
        Some("accept") => {}
        Some("decline") => return (ChatInputResponseKind::Decline, None),
        _ => return (ChatInputResponseKind::Cancel, None),
    }
    let kind_of = |id: &str| {
        questions
            .iter()
            .find(|q| q.get("id").and_then(Value::as_str) == Some(id))
            .and_then(|q| q.get("kind").and_then(Value::as_str))
            .unwrap_or("text")
            .to_owned()
    };
    let mut out = HashMap::new();
    for (id, value) in v
        .get("content")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let answer = match (kind_of(id).as_str(), value) {
            ("single-select", Value::String(s)) => {
                ChatInputAnswerValue::Selected(ChatInputSelectedAnswerValue {
                    value: s.clone(),
                    freeform_values: None,
                })
            }
            (_, Value::Array(items)) => {
                ChatInputAnswerValue::SelectedMany(ChatInputSelectedManyAnswerValue {
                    value: items
                        .iter()
                        .filter_map(|i| i.as_str().map(str::to_owned))
                        .collect(),
                    freeform_values: None,
                })
            }
            (_, Value::Bool(b)) => {
                ChatInputAnswerValue::Boolean(ChatInputBooleanAnswerValue { value: *b })
            }
            (_, Value::Number(n)) => ChatInputAnswerValue::Number(ChatInputNumberAnswerValue {
                value: n.as_f64().unwrap_or(0.0),
            }),
            (_, Value::String(s)) => {
                ChatInputAnswerValue::Text(ChatInputTextAnswerValue { value: s.clone() })
            }
            _ => continue,
        };
        out.insert(
            id.clone(),
            ChatInputAnswer::Submitted(ChatInputAnswered { value: answer }),
        );
    }
    (ChatInputResponseKind::Accept, Some(out))
}
