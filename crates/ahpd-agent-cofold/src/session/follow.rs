//! Following one run: its events become actions while its turn is shown, and its approvals
//! and questions are put to the host, whose answers go back to the run.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use ahp_types::state::ChatInputResponseKind;
use ahpd_sdk::agent::{ApprovalOutcome, ApprovalRequest};
use cofold_agents::event::{Command, EventBody};
use cofold_agents::run::RunHandle;
use futures::StreamExt;

use super::{Core, Follow, NOT_JSON, UNANSWERED, lock};
use crate::actions as act;
use crate::asks::{self, EDIT_REFUSED};
use crate::edits::OpenEdits;
use crate::previews;
use crate::turn_facts;
use crate::turns::{Carry, TurnMapper};

/// What the ask of one approval needs besides the question: the request it answers and the
/// call's input, how the input is shown, and the call's title.
struct Asked {
    request_id: String,
    input: serde_json::Value,
    shell: bool,
    title: String,
}

impl Core {
    /// Follows one run's events to its end, emitting while the turn is shown.
    pub(super) async fn follow(
        self: Arc<Self>,
        turn_id: String,
        follow: Follow,
        steers: Arc<Mutex<VecDeque<String>>>,
    ) -> (bool, Carry, Vec<ahp_types::actions::StateAction>) {
        let Follow {
            handle,
            mut mapper,
            shown,
            edits,
            mut requests,
            reopened,
            images: _,
        } = follow;
        let mut failed = false;
        let mut ending = Vec::new();
        let mut events = Box::pin(handle.events());
        // A reopened run already said its activity; it has no start of its own to announce.
        let mut first = !reopened;
        while let Some(event) = events.next().await {
            let visible = shown.load(Ordering::SeqCst);
            if first {
                first = false;
                if visible {
                    self.ctx.emit(act::activity(Some("Thinking")));
                    self.title_if_first(&event).await;
                }
            }
            match &event.body {
                EventBody::ApprovalRequested { .. } | EventBody::InputRequested { .. } => {
                    self.raise(
                        &handle,
                        &event.body,
                        &mapper,
                        &turn_id,
                        &mut requests,
                        &edits,
                    );
                }
                EventBody::RunSteered { .. } => {
                    let id = lock(&steers).pop_front();
                    if let (Some(id), true) = (id, visible) {
                        self.ctx.emit(act::steering_removed(&id));
                    }
                }
                _ => {}
            }
            if let EventBody::RunFinished { outcome } = &event.body {
                failed = outcome.status() == cofold_agents::store::RunStatus::Failed;
                if outcome.status() != cofold_agents::store::RunStatus::Awaiting
                    && let Some(edits) = &edits
                {
                    edits.settle_all();
                }
            }
            if let (EventBody::ToolDenied { call_id, .. }, Some(edits)) = (&event.body, &edits) {
                edits.after(call_id);
            }
            let actions = mapper.map(&event);
            if shown.load(Ordering::SeqCst) {
                if let EventBody::RunFinished { outcome } = &event.body
                    && outcome.status() != cofold_agents::store::RunStatus::Awaiting
                {
                    // The ending actions wait until the turn is recorded as finished, so a
                    // client answering them (a resume) finds it.
                    ending.extend(actions);
                    ending.push(act::activity(None));
                    continue;
                }
                for action in actions {
                    self.ctx.emit(action);
                }
            }
        }
        (failed && mapper.failed_in_model(), mapper.carry(), ending)
    }

    /// Puts a run's approval or question to the host and hands the answer back to the run.
    pub(super) fn raise(
        &self,
        handle: &RunHandle,
        body: &EventBody,
        mapper: &TurnMapper,
        turn_id: &str,
        requests: &mut HashMap<String, String>,
        edits: &Option<OpenEdits>,
    ) {
        match body {
            EventBody::ApprovalRequested {
                request_id,
                call_id,
                name,
                input,
                prompt,
                risk,
            } => {
                requests.insert(request_id.clone(), call_id.clone());
                let request =
                    mapper.approval_request(call_id, name, prompt.as_deref(), risk.as_deref());
                let asked = Asked {
                    request_id: request_id.clone(),
                    input: input.clone(),
                    shell: mapper.is_shell(call_id),
                    title: mapper.title_of(call_id),
                };
                self.spawn_approval(
                    handle.clone(),
                    asked,
                    request,
                    edits.clone().map(|e| (e, call_id.clone())),
                );
            }
            EventBody::InputRequested {
                request_id,
                questions,
                ..
            } => {
                let ctx = self.ctx.clone();
                let handle = handle.clone();
                let request = asks::input_request(request_id, questions);
                let request_id = request_id.clone();
                let turn = turn_id.to_owned();
                let store = self.agent.store.clone();
                let session = self.backend_id.clone();
                tokio::spawn(async move {
                    let outcome = ctx.ask_input(&turn, request).await;
                    if let Some(answer) = turn_facts::input_answer_of(&outcome) {
                        turn_facts::answered(store.as_ref(), &session, &request_id, &answer).await;
                    }
                    let command = match outcome.response {
                        ChatInputResponseKind::Accept => Command::Answer {
                            request_id,
                            answers: asks::answers_value(outcome.answers.as_ref()),
                        },
                        ChatInputResponseKind::Decline => Command::Deny {
                            request_id,
                            reason: Some(asks::DECLINED.to_owned()),
                        },
                        // Nobody can answer (the host could not place the question, or the
                        // turn ended): the run is told so rather than left waiting. A stop
                        // cancels the run as well; either way nothing runs.
                        _ => Command::Deny {
                            request_id,
                            reason: Some(UNANSWERED.to_owned()),
                        },
                    };
                    let _ = handle.submit(command).await;
                });
            }
            _ => {}
        }
    }

    /// The first turn of a conversation names the session.
    async fn title_if_first(&self, event: &cofold_agents::event::Event) {
        let EventBody::RunStarted { input } = &event.body else {
            return;
        };
        // Counted in runs, not messages: by the time this event is read the run may have
        // stored its answer too, and a message count then missed the first turn.
        let runs = self
            .agent
            .store
            .list_runs(&self.backend_id, None)
            .await
            .map(|r| r.len())
            .unwrap_or(0);
        if runs <= 1 {
            let text = cofold_agents::message::text_of(input);
            let title = ahpd_sdk::util::title_from(&text);
            if !title.is_empty() {
                self.ctx.emit(act::title(&title));
            }
        }
    }

    // Long: the preview, the question, the answer kept, and the answer turned into the run's
    // command (an edit checked by the run, and refused with its reason) happen in this order.
    fn spawn_approval(
        &self,
        handle: RunHandle,
        asked: Asked,
        mut request: ApprovalRequest,
        edits: Option<(OpenEdits, String)>,
    ) {
        let ctx = self.ctx.clone();
        let store = self.agent.store.clone();
        let session = self.backend_id.clone();
        tokio::spawn(async move {
            let Asked {
                request_id,
                input,
                shell,
                title,
            } = asked;
            let held = crate::approval_keys::hold(ctx.session_uri(), &request.tool_call_id).await;
            // The tool tells what the call would do, by the code the call runs, before anyone
            // is asked about it.
            let tool = handle.paused_tool(&request_id).await;
            if let Some(preview) = previews::preview_of(tool, input.clone()).await
                && let Some(note) = previews::show(&mut request, &preview, &title)
            {
                turn_facts::previewed(store.as_ref(), &session, &request_id, &note).await;
            }
            let outcome = ctx.ask_approval(request).await;
            drop(held);
            // Kept before the run hears it, so the turn reads back with the answer it shows.
            if let Some(answer) = turn_facts::answer_of(&outcome) {
                turn_facts::answered(store.as_ref(), &session, &request_id, &answer).await;
            }
            let settle = || {
                if let Some((edits, call_id)) = &edits {
                    edits.after(call_id);
                }
            };
            let command = match outcome {
                ApprovalOutcome::Approved { edited_input, .. } => {
                    match edited_input.map(|text| asks::edited_input(&text, shell, &input)) {
                        None => Command::Approve {
                            request_id,
                            input: None,
                            always_approve: None,
                        },
                        Some(Ok(edited)) => {
                            let approve = Command::Approve {
                                request_id: request_id.clone(),
                                input: Some(edited),
                                always_approve: None,
                            };
                            // The run checks the edit against the tool's schema before it takes
                            // it; a refused edit runs nothing and the model reads why.
                            match handle.submit(approve).await {
                                Ok(()) => return,
                                Err(e) => {
                                    settle();
                                    Command::Deny {
                                        request_id,
                                        reason: Some(format!("{EDIT_REFUSED}: {}", e.message)),
                                    }
                                }
                            }
                        }
                        // Running the original instead would run what the person did not
                        // approve; the call is refused with the reason.
                        Some(Err(e)) => {
                            settle();
                            Command::Deny {
                                request_id,
                                reason: Some(format!("{NOT_JSON}: {e}")),
                            }
                        }
                    }
                }
                ApprovalOutcome::Denied { message, .. } => {
                    settle();
                    Command::Deny {
                        request_id,
                        reason: Some(asks::declined(message.as_deref())),
                    }
                }
                // Nobody can answer: the host could not place the request (another chat's
                // call of the same id, a turn it no longer shows) or the turn ended. The run
                // is told rather than left waiting; a stop or close cancels the run as
                // well, and whichever arrives first, the call does not run.
                ApprovalOutcome::Cancelled => {
                    settle();
                    Command::Deny {
                        request_id,
                        reason: Some(UNANSWERED.to_owned()),
                    }
                }
            };
            let _ = handle.submit(command).await;
        });
    }
}
