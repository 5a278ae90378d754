//! One session's default chat as this client holds it: the session and chat states kept by the
//! official reducers from a snapshot and every action after it, and the actions a person's
//! commands become (a turn, a stop, a steering message, an approval, a setting).

use std::path::Path;

use ahp::client::{ClientEventStream, SubscriptionEvent};
use ahp::reducers::{apply_action_to_chat, apply_action_to_session};
use std::collections::HashMap;

use ahp_types::actions::{
    ActionEnvelope, ChatInputCompletedAction, ChatPendingMessageSetAction,
    ChatToolCallConfirmedAction, ChatTurnCancelledAction, ChatTurnStartedAction,
    SessionConfigChangedAction, StateAction,
};
use ahp_types::common::{JsonObject, StringOrMarkdown};
use ahp_types::state::{
    ChatInputAnswer, ChatInputResponseKind, ChatState, Message, MessageAttachment, MessageKind,
    MessageOrigin, ModelSelection, PendingMessageKind, SessionState, SnapshotState,
    ToolCallCancellationReason, TurnState,
};
use serde_json::{Value, json};

use super::Conn;
use crate::commands::CommandError;

/// How a person answered an approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Allow this call.
    Once,
    /// Allow this tool for the rest of the session.
    Session,
    /// Refuse, with what the model reads as the reason, when one was given.
    Deny(Option<String>),
}

/// What a new session starts with.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    /// `model` and `permissionMode`, when given.
    pub config: JsonObject,
}

/// A session and its default chat, followed.
pub struct Conversation {
    /// The session URI.
    pub session: String,
    /// Its default chat's URI.
    pub chat: String,
    /// The session's state.
    pub session_state: SessionState,
    /// The chat's state.
    pub chat_state: ChatState,
    events: ClientEventStream,
    /// The sequence numbers the snapshots already include, session then chat.
    seen: (u64, u64),
}

fn usage(msg: impl Into<String>) -> CommandError {
    CommandError::Usage(msg.into())
}

fn failed(msg: impl Into<String>) -> CommandError {
    CommandError::Failed(msg.into())
}

/// The provider new sessions use: `cofold` when offered, else the first agent.
fn provider(conn: &Conn) -> Result<String, CommandError> {
    let agents = &conn.root.agents;
    agents
        .iter()
        .find(|a| a.provider == "cofold")
        .or_else(|| agents.first())
        .map(|a| a.provider.clone())
        .ok_or_else(|| {
            failed(format!(
                "the host at {} offers no agent: enable one with ahpd plugin enable @ahpd/agent-cofold",
                conn.place
            ))
        })
}

impl Conversation {
    /// Creates a session working in `dir`.
    pub async fn create(
        conn: &Conn,
        dir: &Path,
        new: &NewSession,
    ) -> Result<Conversation, CommandError> {
        let provider = provider(conn)?;
        let session = format!("{provider}:/{}", uuid::Uuid::new_v4());
        let mut params = json!({
            "channel": session,
            "provider": provider,
            "workingDirectories": [ahpd_sdk::util::file_uri(dir)],
        });
        if !new.config.is_empty() {
            params["config"] = Value::Object(new.config.clone());
        }
        let _: Value = conn
            .client
            .request("createSession", params)
            .await
            .map_err(|e| failed(format!("cannot create a session: {e}")))?;
        Self::open(conn, &session).await
    }

    /// Follows an existing session (live or stored).
    pub async fn open(conn: &Conn, session: &str) -> Result<Conversation, CommandError> {
        // Subscribed to before the snapshots are asked for, so no action falls between them.
        let events = conn.client.events();
        // The session and its usual default chat are asked for together, saving a round trip.
        let usual = ahpd_sdk::util::default_chat_uri(session);
        let (session_snap, usual_snap) =
            tokio::join!(snapshot(conn, session), snapshot(conn, &usual));
        let (session_seq, state) = session_snap?;
        let session_state = match state {
            SnapshotState::Session(s) => *s,
            _ => return Err(usage(format!("{session} is not a session"))),
        };
        let chat = session_state.default_chat.clone().unwrap_or(usual.clone());
        let (chat_seq, state) = if chat == usual {
            usual_snap?
        } else {
            snapshot(conn, &chat).await?
        };
        let chat_state = match state {
            SnapshotState::Chat(c) => *c,
            _ => return Err(failed(format!("{chat} is not a chat"))),
        };
        Ok(Conversation {
            session: session.to_owned(),
            chat,
            session_state,
            chat_state,
            events,
            seen: (session_seq, chat_seq),
        })
    }

    /// The next action on this session or its chat, applied to the states; `None` when the
    /// connection ended.
    pub async fn next(&mut self) -> Option<ActionEnvelope> {
        loop {
            let ev = self.events.recv().await?;
            let SubscriptionEvent::Action(env) = ev.event else {
                continue;
            };
            // A refused action is shown, never applied.
            let applies = env.rejection_reason.is_none();
            if env.channel == self.chat {
                if env.server_seq <= self.seen.1 {
                    continue;
                }
                if applies {
                    apply_action_to_chat(&mut self.chat_state, &env.action);
                }
            } else if env.channel == self.session {
                if env.server_seq <= self.seen.0 {
                    continue;
                }
                if applies {
                    apply_action_to_session(&mut self.session_state, &env.action);
                }
            } else {
                continue;
            }
            return Some(env);
        }
    }

    /// Starts a turn with `text`; returns its id.
    pub async fn send(
        &self,
        conn: &Conn,
        text: &str,
        model: Option<&str>,
        attachments: Vec<MessageAttachment>,
    ) -> Result<String, CommandError> {
        let turn = format!("t-{}", uuid::Uuid::new_v4().simple());
        let mut message = user_message(text);
        message.attachments = (!attachments.is_empty()).then_some(attachments);
        message.model = model.map(|m| ModelSelection {
            id: m.to_owned(),
            config: None,
        });
        let action = StateAction::ChatTurnStarted(ChatTurnStartedAction {
            turn_id: turn.clone(),
            started_at: ahpd_sdk::util::now_iso(),
            message,
            queued_message_id: None,
            meta: None,
        });
        self.dispatch(conn, &self.chat, action).await?;
        Ok(turn)
    }

    /// Asks the running turn to stop.
    pub async fn stop(&self, conn: &Conn, turn: &str) -> Result<(), CommandError> {
        let started = self
            .chat_state
            .active_turn
            .as_ref()
            .filter(|t| t.id == turn)
            .and_then(|t| ahpd_sdk::util::millis_since(&t.started_at))
            .unwrap_or(0);
        let action = StateAction::ChatTurnCancelled(ChatTurnCancelledAction {
            turn_id: turn.to_owned(),
            duration: started,
            meta: None,
        });
        self.dispatch(conn, &self.chat, action).await
    }

    /// Adds a steering message to the running turn.
    pub async fn steer(&self, conn: &Conn, text: &str) -> Result<(), CommandError> {
        let action = StateAction::ChatPendingMessageSet(ChatPendingMessageSetAction {
            kind: PendingMessageKind::Steering,
            id: format!("s-{}", uuid::Uuid::new_v4().simple()),
            message: user_message(text),
        });
        self.dispatch(conn, &self.chat, action).await
    }

    /// Answers the approval of `call` in `turn`.
    pub async fn confirm(
        &self,
        conn: &Conn,
        turn: &str,
        call: &str,
        answer: &Answer,
    ) -> Result<(), CommandError> {
        let (approved, option, reason, sentence) = match answer {
            Answer::Once => (true, Some("allow-once"), None, None),
            Answer::Session => (true, Some("allow-session"), None, None),
            Answer::Deny(why) => (
                false,
                Some("deny"),
                Some(ToolCallCancellationReason::Denied),
                why.clone().map(StringOrMarkdown::Plain),
            ),
        };
        let action = StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
            turn_id: turn.to_owned(),
            tool_call_id: call.to_owned(),
            meta: None,
            approved,
            confirmed: None,
            reason,
            edited_tool_input: None,
            user_suggestion: None,
            reason_message: sentence,
            selected_option_id: option.map(str::to_owned),
        });
        self.dispatch(conn, &self.chat, action).await
    }

    /// Answers the request `request` of the chat `chat`: accepted with `answers`, or, with
    /// `None`, cancelled.
    pub async fn answer_input(
        &self,
        conn: &Conn,
        chat: &str,
        request: &str,
        answers: Option<HashMap<String, ChatInputAnswer>>,
    ) -> Result<(), CommandError> {
        let response = if answers.is_some() {
            ChatInputResponseKind::Accept
        } else {
            ChatInputResponseKind::Cancel
        };
        let action = StateAction::ChatInputCompleted(ChatInputCompletedAction {
            request_id: request.to_owned(),
            response,
            answers,
        });
        self.dispatch(conn, chat, action).await
    }

    /// Changes one session setting (`model`, `permissionMode`).
    pub async fn configure(&self, conn: &Conn, key: &str, value: &str) -> Result<(), CommandError> {
        let mut config = JsonObject::new();
        config.insert(key.to_owned(), Value::String(value.to_owned()));
        let action = StateAction::SessionConfigChanged(SessionConfigChangedAction {
            config,
            replace: None,
        });
        self.dispatch(conn, &self.session, action).await
    }

    /// How `turn` ended according to a fresh snapshot of the chat, `None` while it runs. The
    /// event queue skips what a reader falls too far behind on (a blocked standard output), so
    /// a quiet stream is checked against the host's own state rather than waited on for ever.
    pub async fn ended(&self, conn: &Conn, turn: &str) -> Result<Option<TurnState>, CommandError> {
        let (_, state) = snapshot(conn, &self.chat).await?;
        let SnapshotState::Chat(chat) = state else {
            return Ok(None);
        };
        if chat.active_turn.as_ref().is_some_and(|t| t.id == turn) {
            return Ok(None);
        }
        Ok(chat.turns.iter().find(|t| t.id == turn).map(|t| t.state))
    }

    /// A setting's value in force, as the session state shows it.
    pub fn setting(&self, key: &str) -> Option<String> {
        self.session_state
            .config
            .as_ref()?
            .values
            .get(key)?
            .as_str()
            .map(str::to_owned)
    }

    async fn dispatch(
        &self,
        conn: &Conn,
        channel: &str,
        action: StateAction,
    ) -> Result<(), CommandError> {
        conn.client
            .dispatch(channel.to_owned(), action)
            .await
            .map(|_| ())
            .map_err(|e| failed(format!("the host connection ended: {e}")))
    }
}

fn user_message(text: &str) -> Message {
    Message {
        text: text.to_owned(),
        origin: MessageOrigin {
            kind: MessageKind::User,
        },
        attachments: None,
        model: None,
        agent: None,
        meta: None,
    }
}

async fn snapshot(conn: &Conn, uri: &str) -> Result<(u64, SnapshotState), CommandError> {
    // Asked for directly: `Client::subscribe` would also open a per-channel queue as large as
    // the event queue, and this client reads every action from that one queue.
    let result: ahp_types::commands::SubscribeResult = conn
        .client
        .request("subscribe", json!({ "channel": uri }))
        .await
        .map_err(|e| match &e {
            ahp::ClientError::Rpc(rpc) if rpc.code == -32001 || rpc.code == -32602 => {
                usage(format!("no session {uri}: {}", rpc.message))
            }
            _ => failed(format!("cannot open {uri}: {e}")),
        })?;
    result
        .snapshot
        .map(|s| (u64::try_from(s.from_seq).unwrap_or(0), s.state))
        .ok_or_else(|| failed(format!("{uri} sent no state")))
}
