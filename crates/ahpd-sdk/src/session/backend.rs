//! What a backend sends its session's task: emitted actions (filtered and completed before they are applied),
//! approvals, questions and client-tool calls, and how parked entries are settled.

use std::sync::Arc;

use ahp_types::actions::*;
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::*;
use serde_json::Value;

use crate::session::actor::Actor;
use crate::session::asks::{Pending, PendingKind};
use crate::session::coalesce::is_mergeable;
use crate::session::context::BackendMsg;
use crate::session::exchange::{ApprovalOutcome, ApprovalRequest, InputOutcome};

pub(crate) fn tool_call_of<'a>(
    state: &'a ChatState,
    turn_id: &str,
    tool_call_id: &str,
) -> Option<&'a ToolCallState> {
    let turn = state.active_turn.as_ref().filter(|t| t.id == turn_id)?;
    turn.response_parts.iter().find_map(|p| match p {
        ResponsePart::ToolCall(tc) if tool_call_id_of(&tc.tool_call) == Some(tool_call_id) => {
            Some(&tc.tool_call)
        }
        _ => None,
    })
}

pub(crate) fn tool_call_id_of(tc: &ToolCallState) -> Option<&str> {
    Some(match tc {
        ToolCallState::Streaming(s) => &s.tool_call_id,
        ToolCallState::PendingConfirmation(s) => &s.tool_call_id,
        ToolCallState::Running(s) => &s.tool_call_id,
        ToolCallState::AuthRequired(s) => &s.tool_call_id,
        ToolCallState::PendingResultConfirmation(s) => &s.tool_call_id,
        ToolCallState::Completed(s) => &s.tool_call_id,
        ToolCallState::Cancelled(s) => &s.tool_call_id,
        ToolCallState::Unknown(_) => return None,
    })
}

fn tool_names(tc: &ToolCallState) -> (String, String) {
    match tc {
        ToolCallState::Streaming(s) => (s.tool_name.clone(), s.display_name.clone()),
        ToolCallState::PendingConfirmation(s) => (s.tool_name.clone(), s.display_name.clone()),
        ToolCallState::Running(s) => (s.tool_name.clone(), s.display_name.clone()),
        ToolCallState::AuthRequired(s) => (s.tool_name.clone(), s.display_name.clone()),
        ToolCallState::PendingResultConfirmation(s) => {
            (s.tool_name.clone(), s.display_name.clone())
        }
        ToolCallState::Completed(s) => (s.tool_name.clone(), s.display_name.clone()),
        ToolCallState::Cancelled(s) => (s.tool_name.clone(), s.display_name.clone()),
        ToolCallState::Unknown(_) => (String::new(), String::new()),
    }
}

pub(crate) fn failure(message: &str) -> ToolCallResult {
    ToolCallResult {
        success: false,
        past_tense_message: StringOrMarkdown::Plain(message.to_owned()),
        content: None,
        structured_content: None,
        error: Some(Value::String(message.to_owned())),
    }
}

/// Whether a backend may emit this action.
fn allowed(action: &StateAction) -> bool {
    use StateAction as A;
    match action {
        A::ChatResponsePart(a) => !matches!(
            a.part,
            ResponsePart::ToolCall(_) | ResponsePart::InputRequest(_) | ResponsePart::Error(_)
        ),
        A::ChatDelta(_)
        | A::ChatReasoning(_)
        | A::ChatUsage(_)
        | A::ChatActivityChanged(_)
        | A::ChatTurnComplete(_)
        | A::ChatTurnCancelled(_)
        | A::ChatError(_)
        | A::ChatToolCallStart(_)
        | A::ChatToolCallDelta(_)
        | A::ChatToolCallReady(_)
        | A::ChatToolCallComplete(_)
        | A::ChatToolCallContentChanged(_)
        | A::ChatPendingMessageRemoved(_)
        | A::ChatTurnStarted(_)
        | A::SessionTitleChanged(_)
        | A::SessionCustomizationsChanged(_)
        | A::SessionCustomizationUpdated(_)
        | A::SessionCustomizationRemoved(_)
        | A::SessionMcpServerStateChanged(_)
        | A::SessionServerToolsChanged(_)
        | A::SessionMetaChanged(_)
        | A::SessionChangesetsChanged(_)
        | A::ChatChangesetsChanged(_)
        | A::SessionConfigChanged(_) => true,
        _ => false,
    }
}

fn is_session_action(action: &StateAction) -> bool {
    use StateAction as A;
    matches!(
        action,
        A::SessionTitleChanged(_)
            | A::SessionCustomizationsChanged(_)
            | A::SessionCustomizationUpdated(_)
            | A::SessionCustomizationRemoved(_)
            | A::SessionMcpServerStateChanged(_)
            | A::SessionServerToolsChanged(_)
            | A::SessionMetaChanged(_)
            | A::SessionChangesetsChanged(_)
            | A::SessionConfigChanged(_)
    )
}

impl Actor {
    pub(crate) fn on_backend(&mut self, msg: BackendMsg) {
        if self.closed {
            return;
        }
        match msg {
            BackendMsg::Emit { chat, action } => self.backend_emit(&chat, action),
            BackendMsg::Changeset {
                chat,
                channel,
                action,
            } => self.backend_changeset(&chat, &channel, action),
            BackendMsg::Approval {
                chat,
                request,
                options,
                reply,
            } => self.ask_approval(&chat, request, options, reply),
            BackendMsg::Input {
                chat,
                turn_id,
                request,
                reply,
            } => self.ask_input(&chat, turn_id, request, reply),
            BackendMsg::ClientTool { chat, call, reply } => {
                self.call_client_tool(&chat, call, reply)
            }
        }
    }

    fn backend_emit(&mut self, chat: &Arc<str>, mut action: StateAction) {
        if !self.chats.contains_key(chat) {
            return;
        }
        if !allowed(&action) {
            tracing::warn!(chat = %chat, "a backend emitted an action only the host may publish; dropped");
            return;
        }
        if is_session_action(&action) {
            if matches!(action, StateAction::SessionTitleChanged(_)) && self.title_locked {
                return;
            }
            if let StateAction::SessionConfigChanged(a) = &mut action {
                a.replace = None;
            }
            self.apply_session(&action, None);
            if matches!(action, StateAction::SessionConfigChanged(_)) {
                self.refresh_settings_view();
            }
            return;
        }
        let active = self
            .chats
            .get(chat)
            .and_then(|c| c.state.active_turn.as_ref().map(|t| t.id.clone()));
        match &mut action {
            StateAction::ChatTurnStarted(a) if active.as_deref() == Some(a.turn_id.as_str()) => {
                tracing::warn!(chat = %chat, "a backend said the running turn again (it would wipe the streamed parts); dropped");
                return;
            }
            StateAction::ChatTurnStarted(a) if !crate::util::is_rfc3339(&a.started_at) => {
                a.started_at = crate::util::now_iso();
            }
            StateAction::ChatToolCallReady(a) if a.confirmed.is_none() => {
                tracing::warn!(chat = %chat, tool_call = %a.tool_call_id, "a backend made a call ready without saying whether it was confirmed; sent as not-needed");
                a.confirmed = Some(ToolCallConfirmationReason::NotNeeded);
            }
            _ => {}
        }
        if is_mergeable(&action) {
            self.delta(chat, action);
            return;
        }
        let ending = match &action {
            StateAction::ChatTurnComplete(a) => Some((a.turn_id.clone(), true)),
            StateAction::ChatError(a) => Some((a.turn_id.clone(), true)),
            StateAction::ChatTurnCancelled(a) => Some((a.turn_id.clone(), false)),
            _ => None,
        };
        let applied = self.apply_chat(chat, &action, None);
        if !applied && ending.is_none() {
            tracing::warn!(chat = %chat, "a backend action changed nothing (no such turn or part?) and was not published");
        }
        if let Some((turn, advance)) = ending {
            // Parked entries of the turn settle even when the ending itself reduced to nothing.
            self.turn_ended(chat, &turn, advance && applied);
        }
    }

    /// Settle a parked entry as unanswered and remove its `inputNeeded` row.
    pub(crate) fn settle(&mut self, entry: &str, sentence: &str) {
        let Some(p) = self.asks.take(entry) else {
            return;
        };
        match p.kind {
            PendingKind::Approval { reply, .. } => {
                let _ = reply.send(ApprovalOutcome::Cancelled);
            }
            PendingKind::Input { reply, .. } => {
                let _ = reply.send(InputOutcome {
                    response: ChatInputResponseKind::Cancel,
                    answers: None,
                });
            }
            PendingKind::ClientTool {
                reply,
                tool_call_id,
                client_id,
                timer,
            } => {
                if let Some(t) = timer {
                    t.abort();
                }
                let sentence = sentence.replace("the client", &client_id);
                let result = failure(&sentence);
                let action = StateAction::ChatToolCallComplete(ChatToolCallCompleteAction {
                    turn_id: p.turn_id.clone(),
                    tool_call_id,
                    meta: None,
                    result: result.clone(),
                    requires_result_confirmation: None,
                });
                self.apply_chat(&p.chat, &action, None);
                let _ = reply.send(result);
            }
        }
        self.remove_input_needed(entry);
    }

    pub(crate) fn remove_input_needed(&mut self, entry: &str) {
        let action = StateAction::SessionInputNeededRemoved(SessionInputNeededRemovedAction {
            id: entry.to_owned(),
        });
        self.apply_session(&action, None);
    }

    fn permissions(&self) -> (Vec<String>, Vec<String>) {
        let list = |key: &str| -> Vec<String> {
            self.settings()
                .get("permissions")
                .and_then(|p| p.get(key))
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        (list("allow"), list("deny"))
    }

    // Long: the permission rules (deny, allow, allowed for the session, a replaced turn) are
    // tried in order before the approval is parked.
    fn ask_approval(
        &mut self,
        chat: &Arc<str>,
        req: ApprovalRequest,
        custom: Option<Vec<ConfirmationOption>>,
        reply: tokio::sync::oneshot::Sender<ApprovalOutcome>,
    ) {
        self.flush_chat(chat);
        let Some(slot) = self.chats.get(chat) else {
            let _ = reply.send(ApprovalOutcome::Cancelled);
            return;
        };
        let replaced = slot.turns.is_replaced(&req.turn_id);
        let Some(tc) = tool_call_of(&slot.state, &req.turn_id, &req.tool_call_id).cloned() else {
            if !replaced {
                let _ = reply.send(ApprovalOutcome::Cancelled);
                return;
            }
            // A replaced turn's run asks: only the session entry can carry the question.
            // Its tool is not known here, so "for this session" stores nothing.
            self.park_approval(chat, &req, None, String::new(), String::new(), reply);
            return;
        };
        let (tool_name, display_name) = tool_names(&tc);
        let (allow, deny) = self.permissions();
        let ready = |confirmed: Option<ToolCallConfirmationReason>,
                     options: Option<Vec<ConfirmationOption>>| {
            StateAction::ChatToolCallReady(ChatToolCallReadyAction {
                turn_id: req.turn_id.clone(),
                tool_call_id: req.tool_call_id.clone(),
                meta: req.meta.clone(),
                contributor: None,
                intention: None,
                invocation_message: req.invocation_message.clone(),
                tool_input: req.tool_input.clone(),
                confirmation_title: req.confirmation_title.clone(),
                risk_assessment: req.risk_assessment.clone(),
                edits: req.edits.clone(),
                editable: req.editable,
                confirmed,
                options,
            })
        };
        if deny.contains(&tool_name) {
            self.apply_chat(chat, &ready(None, None), None);
            let denied = StateAction::ChatToolCallConfirmed(ChatToolCallConfirmedAction {
                turn_id: req.turn_id.clone(),
                tool_call_id: req.tool_call_id.clone(),
                meta: None,
                approved: false,
                confirmed: None,
                reason: Some(ToolCallCancellationReason::Denied),
                edited_tool_input: None,
                user_suggestion: None,
                reason_message: Some(StringOrMarkdown::Plain(format!(
                    "The session's permissions deny {tool_name}."
                ))),
                selected_option_id: None,
            });
            self.apply_chat(chat, &denied, None);
            let _ = reply.send(ApprovalOutcome::Denied {
                reason: Some(ToolCallCancellationReason::Denied),
                message: None,
            });
            return;
        }
        let base = self.first_dir();
        let input = req.tool_input.as_ref();
        let allowed = |rule: &String| {
            crate::session::scopes::allows(rule, &tool_name, input, base.as_deref())
        };
        if allow.iter().any(allowed) || self.asks.allowed_for_session().iter().any(allowed) {
            self.apply_chat(
                chat,
                &ready(Some(ToolCallConfirmationReason::Setting), None),
                None,
            );
            let _ = reply.send(ApprovalOutcome::Approved {
                edited_input: None,
                option_id: None,
                confirmed: ToolCallConfirmationReason::Setting,
            });
            return;
        }
        // "For this session" allows what the call's scope covers, and the question says so; a
        // backend's own choices (an ACP agent's options) are offered as they are.
        let scope =
            crate::session::scopes::scope_of(&tool_name, &display_name, input, base.as_deref());
        let options = custom.unwrap_or_else(|| {
            let mut options = crate::agent::approval_options(&display_name);
            if let Some(o) = options.iter_mut().find(|o| o.id == "allow-session") {
                o.label = scope.label.clone();
            }
            options
        });
        self.apply_chat(chat, &ready(None, Some(options)), None);
        let pending_state = self
            .chats
            .get(chat)
            .and_then(|c| tool_call_of(&c.state, &req.turn_id, &req.tool_call_id))
            .and_then(|tc| match tc {
                ToolCallState::PendingConfirmation(p) => Some(p.clone()),
                _ => None,
            });
        self.park_approval(chat, &req, pending_state, tool_name, scope.rule, reply);
    }

    /// The session's first working folder, which relative paths in a call are read against.
    fn first_dir(&self) -> Option<std::path::PathBuf> {
        self.state
            .working_directories
            .as_ref()
            .and_then(|d| d.first())
            .and_then(|u| crate::util::path_of(u))
    }

    /// Stores a rule "allow for this session" made in the session's `permissions.allow`,
    /// where every client sees it and later approvals are checked against it.
    pub(crate) fn allow_for_session(&mut self, rule: String) {
        if rule.is_empty() {
            return;
        }
        self.asks.allow_for_session(rule.clone());
        let Some(config) = self.state.config.as_ref() else {
            return;
        };
        let mut permissions = config
            .values
            .get("permissions")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut allow: Vec<Value> = permissions
            .get("allow")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if allow.iter().any(|r| r.as_str() == Some(rule.as_str())) {
            return;
        }
        allow.push(Value::String(rule));
        permissions.insert("allow".into(), Value::Array(allow));
        let mut changed = ahp_types::common::JsonObject::new();
        changed.insert("permissions".into(), Value::Object(permissions));
        let action = StateAction::SessionConfigChanged(SessionConfigChangedAction {
            config: changed,
            replace: None,
        });
        self.apply_session(&action, None);
        self.refresh_settings_view();
    }

    fn park_approval(
        &mut self,
        chat: &Arc<str>,
        req: &ApprovalRequest,
        state: Option<ToolCallPendingConfirmationState>,
        tool_name: String,
        scope: String,
        reply: tokio::sync::oneshot::Sender<ApprovalOutcome>,
    ) {
        let entry = format!("tool:{}", req.tool_call_id);
        let tool_call = state.unwrap_or_else(|| ToolCallPendingConfirmationState {
            tool_call_id: req.tool_call_id.clone(),
            tool_name: tool_name.clone(),
            display_name: tool_name.clone(),
            intention: None,
            contributor: None,
            meta: req.meta.clone(),
            invocation_message: req.invocation_message.clone(),
            tool_input: req.tool_input.clone(),
            confirmation_title: req.confirmation_title.clone(),
            risk_assessment: req.risk_assessment.clone(),
            edits: req.edits.clone(),
            editable: req.editable,
            options: None,
        });
        let action = StateAction::SessionInputNeededSet(Box::new(SessionInputNeededSetAction {
            request: SessionInputRequest::ToolConfirmation(SessionToolConfirmationRequest {
                id: entry.clone(),
                chat: chat.to_string(),
                turn_id: req.turn_id.clone(),
                tool_call: ToolCallConfirmationState::PendingConfirmation(tool_call),
            }),
        }));
        self.apply_session(&action, None);
        self.asks.open(
            entry,
            Pending {
                chat: chat.clone(),
                turn_id: req.turn_id.clone(),
                kind: PendingKind::Approval { reply, scope },
            },
        );
    }

    fn ask_input(
        &mut self,
        chat: &Arc<str>,
        turn_id: String,
        request: ChatInputRequest,
        reply: tokio::sync::oneshot::Sender<InputOutcome>,
    ) {
        let cancel = InputOutcome {
            response: ChatInputResponseKind::Cancel,
            answers: None,
        };
        let Some(slot) = self.chats.get(chat) else {
            let _ = reply.send(cancel);
            return;
        };
        let active = slot
            .state
            .active_turn
            .as_ref()
            .is_some_and(|t| t.id == turn_id);
        if !active && !slot.turns.is_replaced(&turn_id) {
            let _ = reply.send(cancel);
            return;
        }
        if active {
            let action = StateAction::ChatInputRequested(ChatInputRequestedAction {
                request: request.clone(),
            });
            self.apply_chat(chat, &action, None);
        }
        let required = request
            .questions
            .as_ref()
            .map(|qs| {
                qs.iter()
                    .filter_map(|q| serde_json::to_value(q).ok())
                    .filter(|q| q.get("required").and_then(Value::as_bool).unwrap_or(false))
                    .filter_map(|q| q.get("id").and_then(Value::as_str).map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let entry = format!("input:{}", request.id);
        let action = StateAction::SessionInputNeededSet(Box::new(SessionInputNeededSetAction {
            request: SessionInputRequest::ChatInput(SessionChatInputRequest {
                id: entry.clone(),
                chat: chat.to_string(),
                request,
            }),
        }));
        self.apply_session(&action, None);
        self.asks.open(
            entry,
            Pending {
                chat: chat.clone(),
                turn_id,
                kind: PendingKind::Input { reply, required },
            },
        );
    }
}
