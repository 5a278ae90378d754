//! Calls of tools a client runs: shown as running on the client, parked until that client
//! completes them, and failed when it leaves or the time limit passes.

use std::sync::Arc;

use ahp_types::actions::*;
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::*;

use crate::session::SessionMsg;
use crate::session::actor::Actor;
use crate::session::asks::{Pending, PendingKind};
use crate::session::backend::{failure, tool_call_of};
use crate::session::exchange::ClientToolCall;

impl Actor {
    /// Shows a client-run call as running (started first when the backend did not start it)
    /// and returns its running state, as the client's `inputNeeded` entry carries it.
    fn show_client_call(
        &mut self,
        chat: &Arc<str>,
        call: &ClientToolCall,
    ) -> Option<ToolCallRunningState> {
        let has_part = self
            .chats
            .get(chat)
            .and_then(|c| tool_call_of(&c.state, &call.turn_id, &call.tool_call_id))
            .is_some();
        if !has_part {
            let start = StateAction::ChatToolCallStart(ChatToolCallStartAction {
                turn_id: call.turn_id.clone(),
                tool_call_id: call.tool_call_id.clone(),
                meta: None,
                tool_name: call.tool_name.clone(),
                display_name: call.tool_name.clone(),
                intention: None,
                contributor: None,
            });
            self.apply_chat(chat, &start, None);
        }
        let contributor = ToolCallContributor::Client(ToolCallClientContributor {
            client_id: call.client_id.clone(),
        });
        let ready = StateAction::ChatToolCallReady(ChatToolCallReadyAction {
            turn_id: call.turn_id.clone(),
            tool_call_id: call.tool_call_id.clone(),
            meta: None,
            contributor: Some(contributor),
            intention: None,
            invocation_message: StringOrMarkdown::Plain(format!(
                "Running {} on {}",
                call.tool_name, call.client_id
            )),
            tool_input: Some(ToolInput::Inline(call.input.clone())),
            confirmation_title: None,
            risk_assessment: None,
            edits: None,
            editable: None,
            confirmed: Some(ToolCallConfirmationReason::NotNeeded),
            options: None,
        });
        self.apply_chat(chat, &ready, None);
        self.chats
            .get(chat)
            .and_then(|c| tool_call_of(&c.state, &call.turn_id, &call.tool_call_id))
            .and_then(|tc| match tc {
                ToolCallState::Running(r) => Some(r.clone()),
                _ => None,
            })
    }

    pub(crate) fn call_client_tool(
        &mut self,
        chat: &Arc<str>,
        call: ClientToolCall,
        reply: tokio::sync::oneshot::Sender<ToolCallResult>,
    ) {
        let exists = self.chats.get(chat).is_some_and(|c| {
            c.state
                .active_turn
                .as_ref()
                .is_some_and(|t| t.id == call.turn_id)
        });
        if !exists {
            let _ = reply.send(failure(&format!(
                "The turn ended before {} answered.",
                call.client_id
            )));
            return;
        }
        let running = self.show_client_call(chat, &call);
        let Some(running) = running else {
            let _ = reply.send(failure("The host could not start the client tool call."));
            return;
        };
        let entry = format!("client:{}", call.tool_call_id);
        let action = StateAction::SessionInputNeededSet(Box::new(SessionInputNeededSetAction {
            request: SessionInputRequest::ToolClientExecution(SessionToolClientExecutionRequest {
                id: entry.clone(),
                chat: chat.to_string(),
                turn_id: call.turn_id.clone(),
                client_id: call.client_id.clone(),
                tool_call: running,
            }),
        }));
        self.apply_session(&action, None);
        let timeout = self.inner.options.client_tool_timeout;
        let timer = (!timeout.is_zero()).then(|| {
            let tx = self.self_tx.clone();
            let entry = entry.clone();
            tokio::spawn(async move {
                tokio::time::sleep(timeout).await;
                if let Some(tx) = tx.upgrade() {
                    let _ = tx.send(SessionMsg::ClientToolTimeout { entry }).await;
                }
            })
        });
        self.asks.open(
            entry,
            Pending {
                chat: chat.clone(),
                turn_id: call.turn_id.clone(),
                kind: PendingKind::ClientTool {
                    reply,
                    client_id: call.client_id,
                    tool_call_id: call.tool_call_id,
                    timer,
                },
            },
        );
    }

    pub(crate) fn client_tool_timeout(&mut self, entry: &str) {
        let Some(Pending {
            kind: PendingKind::ClientTool { client_id, .. },
            ..
        }) = self.asks.get(entry)
        else {
            return;
        };
        let minutes = (self.inner.options.client_tool_timeout.as_secs() / 60).max(1);
        let sentence = format!("The host got no answer from {client_id} within {minutes} minutes.");
        self.settle(entry, &sentence);
    }
}
