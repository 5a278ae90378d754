//! The event → action mapping of one turn: the only one. A live run's events go through it as
//! they happen (`session/follow.rs`), a stored run's events through it again when a conversation
//! is read back (`readback.rs`), so a turn reads back as clients saw it.
//!
//! The mapper is pure: it takes cofold run events in order and returns the AHP actions they
//! become, with the times the events carry. Asking the host (approvals, questions) is the
//! runner's job.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use ahp_types::actions::StateAction;
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::ToolInput;
use ahpd_sdk::agent::ApprovalRequest;
use cofold_agents::event::{ApprovalDecision, DeltaKind, Event, EventBody, OutcomeKind};
use cofold_agents::id::Timestamp;
use cofold_agents::message::{Message, Part};
use cofold_agents::model::Usage;
use serde_json::{Value, json};

use crate::actions as act;
use crate::turn_parts::{add_usage, call_title, usage_info};

/// Facts about one proposed call, kept until it completes.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallView {
    pub title: String,
    pub shell: bool,
    pub tool_input: Option<String>,
    pub ready: bool,
    pub client: bool,
    pub name: String,
    pub approved: bool,
    pub started_at: Option<String>,
}

/// What one attempt of a turn hands to the next when the turn is resumed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Carry {
    step: u32,
    compactions: u32,
    attempt: u32,
    calls: HashSet<String>,
}

/// Maps one turn's events to actions.
pub(crate) struct TurnMapper {
    turn_id: String,
    workspace: PathBuf,
    memory_dir: Option<PathBuf>,
    model: Option<String>,
    step: u32,
    parts_opened: u32,
    reasoning_part: Option<String>,
    markdown_part: Option<String>,
    held_space: String,
    held_reply: Option<Message>,
    streamed_this_step: bool,
    compactions: u32,
    in_model: bool,
    running: Usage,
    pub(crate) calls: HashMap<String, CallView>,
    /// Which attempt of the turn this is (1 for the first run).
    attempt: u32,
    /// Call ids earlier attempts of this turn used.
    earlier_calls: HashSet<String>,
    /// Call ids this attempt proposed.
    seen_calls: HashSet<String>,
    /// Offered name → client id of the tools clients run.
    client_tools: HashMap<String, String>,
    /// Name → display name of the host's tools this turn offers.
    host_tools: HashMap<String, String>,
    /// When the attempt's first event happened: its duration runs from there, by the events'
    /// own times, so a turn read back from them lasts as long as it did live.
    first_at: Option<Timestamp>,
    /// Open approval requests → their call ids.
    requests: HashMap<String, String>,
}

impl TurnMapper {
    pub(crate) fn new(
        turn_id: &str,
        workspace: PathBuf,
        memory_dir: Option<PathBuf>,
        model: Option<String>,
    ) -> TurnMapper {
        TurnMapper {
            turn_id: turn_id.to_owned(),
            workspace,
            memory_dir,
            model,
            step: 0,
            parts_opened: 0,
            reasoning_part: None,
            markdown_part: None,
            held_space: String::new(),
            held_reply: None,
            streamed_this_step: false,
            compactions: 0,
            in_model: false,
            running: Usage::default(),
            calls: HashMap::new(),
            client_tools: HashMap::new(),
            host_tools: HashMap::new(),
            attempt: 1,
            earlier_calls: HashSet::new(),
            seen_calls: HashSet::new(),
            first_at: None,
            requests: HashMap::new(),
        }
    }

    fn duration_ms(&self, at: &Timestamp) -> i64 {
        let first = self.first_at.as_ref().unwrap_or(at);
        ((at.unix_micros() - first.unix_micros()) / 1000).max(0)
    }

    fn open_part(&mut self, out: &mut Vec<StateAction>, reasoning: bool) -> String {
        let id = format!("{}:{}:{}", self.turn_id, self.step, self.parts_opened);
        self.parts_opened += 1;
        if reasoning {
            out.push(act::reasoning_part(&self.turn_id, &id));
            self.reasoning_part = Some(id.clone());
        } else {
            out.push(act::markdown_part(&self.turn_id, &id));
            self.markdown_part = Some(id.clone());
        }
        id
    }

    fn reasoning_delta(&mut self, out: &mut Vec<StateAction>, text: &str) {
        if text.is_empty() {
            return;
        }
        let id = match self.reasoning_part.clone() {
            Some(id) => id,
            None => self.open_part(out, true),
        };
        out.push(act::reasoning(&self.turn_id, &id, text.to_owned()));
    }

    fn text_delta(&mut self, out: &mut Vec<StateAction>, text: &str) {
        if self.markdown_part.is_none() {
            if text.trim().is_empty() {
                self.held_space.push_str(text);
                return;
            }
            self.open_part(out, false);
        }
        let content = std::mem::take(&mut self.held_space) + text;
        if let Some(id) = &self.markdown_part {
            out.push(act::delta(&self.turn_id, id, content));
        }
    }

    /// A non-streamed reply is shown at the next event.
    fn flush_held(&mut self, out: &mut Vec<StateAction>) {
        let Some(reply) = self.held_reply.take() else {
            return;
        };
        for part in &reply.parts {
            match part {
                Part::Reasoning { text } => self.reasoning_delta(out, text),
                Part::Text { text } => self.text_delta(out, text),
                _ => {}
            }
        }
    }

    /// The actions one event becomes.
    pub(crate) fn map(&mut self, event: &Event) -> Vec<StateAction> {
        let mut out = Vec::new();
        if self.first_at.is_none() {
            self.first_at = Some(event.at.clone());
        }
        match &event.body {
            EventBody::ApprovalRequested {
                request_id,
                call_id,
                ..
            } => {
                self.requests.insert(request_id.clone(), call_id.clone());
            }
            EventBody::ApprovalResolved {
                request_id,
                decision,
                reason,
            } => {
                if let Some(call_id) = self.requests.remove(request_id) {
                    match reason.as_deref() {
                        // The person approved, so the host shows the call running; only its
                        // edited input was refused, and the call ends failed with why.
                        Some(why)
                            if *decision == ApprovalDecision::Deny
                                && crate::asks::approved_but_refused(why) =>
                        {
                            self.refused_after_approval(&mut out, &call_id, why);
                        }
                        _ => self.settle(&call_id, decision),
                    }
                }
            }
            _ => {}
        }
        if matches!(event.body, EventBody::ContextCompacted { .. }) {
            self.held_reply = None;
        } else {
            self.flush_held(&mut out);
        }
        let turn = self.turn_id.clone();
        match &event.body {
            EventBody::ModelStarted { .. } => {
                self.step += 1;
                self.in_model = true;
                self.parts_opened = 0;
                self.reasoning_part = None;
                self.markdown_part = None;
                self.held_space.clear();
                self.streamed_this_step = false;
            }
            EventBody::ModelDelta { kind, text, .. } => {
                self.streamed_this_step = true;
                match kind {
                    DeltaKind::Reasoning => self.reasoning_delta(&mut out, text),
                    DeltaKind::Text => self.text_delta(&mut out, text),
                }
            }
            EventBody::ModelCompleted { message, usage, .. } => {
                self.in_model = false;
                if !self.streamed_this_step {
                    self.held_reply = Some(message.clone());
                }
                add_usage(&mut self.running, usage);
                out.push(act::usage(
                    &turn,
                    usage_info(&self.running, self.model.as_deref(), None),
                ));
            }
            EventBody::ContextCompacted {
                estimated_tokens,
                after_tokens,
                ..
            } => {
                self.compactions += 1;
                out.push(act::notice(
                    &turn,
                    &format!(
                        "Context compacted automatically: {estimated_tokens} tokens to {after_tokens}."
                    ),
                ));
            }
            EventBody::ToolProposed { .. } => self.tool_proposed(&mut out, event),
            EventBody::ToolStarted { .. } => self.tool_started(&mut out, event),
            EventBody::ToolCompleted { .. } => self.tool_completed(&mut out, event),
            EventBody::ToolDenied { .. } => self.tool_denied(&mut out, event),
            EventBody::RunFinished { .. } => self.run_finished(&mut out, event),
            _ => {}
        }
        out
    }

    /// A proposed call starts its tool call (a client-run one is started by its wrapper).
    fn tool_proposed(&mut self, out: &mut Vec<StateAction>, event: &Event) {
        let EventBody::ToolProposed {
            call_id,
            name,
            input,
            subject,
        } = &event.body
        else {
            return;
        };
        let turn = self.turn_id.clone();
        // A host tool is titled by its name, whatever cofold tool it shares it with.
        let host = self.host_tools.get(name).cloned();
        let shell = name == "shell_exec" && host.is_none();
        let title = if host.is_some() {
            name.clone()
        } else {
            call_title(
                name,
                subject.as_deref(),
                &self.workspace,
                self.memory_dir.as_deref(),
            )
        };
        let tool_input = if shell {
            input
                .as_ref()
                .and_then(|i| i.get("command"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        } else {
            input.as_ref().map(|i| match i {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
        };
        let (intention, meta) = if shell {
            (
                tool_input.clone(),
                act::meta(vec![("toolKind", json!("terminal"))]),
            )
        } else {
            (None, None)
        };
        self.seen_calls.insert(call_id.clone());
        let client = self.client_tools.get(name).cloned();
        // A client-run call is started by its wrapper, ahead of the host's ask.
        if client.is_none() {
            let shown = self.shown_id(call_id);
            let mut start = act::tool_start(&turn, &shown, name, intention, meta, None);
            if let (Some(display), StateAction::ChatToolCallStart(s)) = (&host, &mut start) {
                s.display_name = display.clone();
            }
            out.push(start);
        }
        self.calls.insert(
            call_id.clone(),
            CallView {
                title,
                shell,
                tool_input,
                client: client.is_some(),
                name: name.clone(),
                ..CallView::default()
            },
        );
    }

    /// A call that starts without an approval is made ready as it starts.
    fn tool_started(&mut self, out: &mut Vec<StateAction>, event: &Event) {
        let EventBody::ToolStarted { call_id, .. } = &event.body else {
            return;
        };
        let turn = self.turn_id.clone();
        let shown = self.shown_id(call_id);
        if let Some(call) = self.calls.get_mut(call_id) {
            let at = event.at.to_string();
            call.started_at = Some(at.clone());
            // A client-run call is made ready by the host.
            if !call.approved && !call.ready && !call.client {
                call.ready = true;
                let mut meta = vec![("ahpd.startedAt", json!(at))];
                if call.shell {
                    meta.insert(0, ("toolKind", json!("terminal")));
                }
                out.push(act::tool_ready(
                    &turn,
                    &shown,
                    &call.title,
                    call.tool_input.clone(),
                    call.shell.then(|| call.tool_input.clone()).flatten(),
                    act::meta(meta),
                ));
            }
        }
    }

    /// A finished call completes, with its start, end and duration.
    fn tool_completed(&mut self, out: &mut Vec<StateAction>, event: &Event) {
        let EventBody::ToolCompleted {
            call_id: raw_call_id,
            content,
            is_error,
            duration_ms,
            ..
        } = &event.body
        else {
            return;
        };
        let turn = self.turn_id.clone();
        let call_id = &self.shown_id(raw_call_id);
        if let Some(call) = self.calls.remove(raw_call_id)
            && !call.client
        {
            let mut meta = Vec::new();
            if call.shell {
                meta.push(("toolKind", json!("terminal")));
            }
            // A store written before starts were recorded has only the end and the
            // duration; the start follows from them.
            let started = call.started_at.clone().or_else(|| {
                let micros = event.at.unix_micros() - (*duration_ms as i64) * 1000;
                Some(Timestamp::from_unix_micros(micros).to_string())
            });
            if let Some(at) = &started {
                meta.push(("ahpd.startedAt", json!(at)));
            }
            meta.push(("ahpd.endedAt", json!(event.at.to_string())));
            meta.push(("ahpd.durationMs", json!(duration_ms)));
            out.push(act::tool_complete(
                &turn,
                call_id,
                &call.title,
                content,
                *is_error,
                act::meta(meta),
            ));
        }
    }

    /// A denied call is started and made ready when nothing said so yet, then completes as failed.
    fn tool_denied(&mut self, out: &mut Vec<StateAction>, event: &Event) {
        let EventBody::ToolDenied {
            call_id: raw_call_id,
            reason,
            ..
        } = &event.body
        else {
            return;
        };
        let turn = self.turn_id.clone();
        let call_id = &self.shown_id(raw_call_id);
        if let Some(call) = self.calls.remove(raw_call_id) {
            if call.client {
                // Its wrapper never ran, so nothing said its start yet.
                let owner = self.client_tools.get(&call.name).cloned();
                out.push(act::tool_start(
                    &turn,
                    call_id,
                    &call.name,
                    None,
                    None,
                    owner.as_deref(),
                ));
            }
            let meta = call
                .shell
                .then(|| act::meta(vec![("toolKind", json!("terminal"))]))
                .flatten();
            if !call.ready && !call.approved {
                out.push(act::tool_ready(
                    &turn,
                    call_id,
                    &call.title,
                    call.tool_input.clone(),
                    call.shell.then(|| call.tool_input.clone()).flatten(),
                    meta.clone(),
                ));
            }
            out.push(act::tool_complete(
                &turn,
                call_id,
                &call.title,
                reason,
                true,
                meta,
            ));
        }
    }

    /// An approved call the run then refused (its edited input did not fit): it completes as
    /// failed, since the host already shows it running.
    fn refused_after_approval(&mut self, out: &mut Vec<StateAction>, call_id: &str, why: &str) {
        let shown = self.shown_id(call_id);
        if let Some(call) = self.calls.remove(call_id) {
            let meta = call
                .shell
                .then(|| act::meta(vec![("toolKind", json!("terminal"))]))
                .flatten();
            out.push(act::tool_complete(
                &self.turn_id,
                &shown,
                &call.title,
                why,
                true,
                meta,
            ));
        }
    }

    /// The run's end: final usage, then the turn completes or fails (cancels and pauses say nothing).
    fn run_finished(&mut self, out: &mut Vec<StateAction>, event: &Event) {
        let EventBody::RunFinished { outcome } = &event.body else {
            return;
        };
        let turn = self.turn_id.clone();
        let duration = self.duration_ms(&event.at);
        let final_usage = usage_info(&outcome.usage, self.model.as_deref(), outcome.cost);
        match &outcome.kind {
            OutcomeKind::Completed { .. } | OutcomeKind::Stopped { .. } => {
                out.push(act::usage(&turn, final_usage));
                out.push(act::turn_complete(&turn, duration));
            }
            OutcomeKind::Failed { error } => {
                out.push(act::usage(&turn, final_usage));
                let message = if error.message.is_empty() {
                    "The turn failed"
                } else {
                    &error.message
                };
                // Only a failure of a model call can be tried again.
                out.push(act::turn_error(&turn, duration, message, self.in_model));
            }
            OutcomeKind::Cancelled { .. } | OutcomeKind::Awaiting { .. } => {}
        }
    }

    /// Names the tools clients run, so their calls carry the client as contributor.
    pub(crate) fn set_client_tools(&mut self, tools: HashMap<String, String>) {
        self.client_tools = tools;
    }

    /// Names the host's tools this turn offers, with the names they are displayed under.
    pub(crate) fn set_host_tools(&mut self, tools: HashMap<String, String>) {
        self.host_tools = tools;
    }

    /// What a resumed attempt carries over, so no part or call id repeats in the turn.
    pub(crate) fn carry(&self) -> Carry {
        let mut calls = self.earlier_calls.clone();
        calls.extend(self.seen_calls.iter().cloned());
        Carry {
            step: self.step,
            compactions: self.compactions,
            attempt: self.attempt,
            calls,
        }
    }

    /// Continues the counters of an earlier attempt of the same turn.
    pub(crate) fn continue_from(&mut self, carry: Carry) {
        self.step = carry.step;
        self.compactions = carry.compactions;
        self.attempt = carry.attempt + 1;
        self.earlier_calls = carry.calls;
    }

    /// The id a call is shown under: a call id an earlier attempt of this turn already used
    /// gets `:<attempt>`.
    pub(crate) fn shown_id(&self, call_id: &str) -> String {
        if self.attempt > 1 && self.earlier_calls.contains(call_id) {
            format!("{call_id}:{}", self.attempt)
        } else {
            call_id.to_owned()
        }
    }

    /// Whether the run failed inside a model call (the turn may be resumed).
    pub(crate) fn failed_in_model(&self) -> bool {
        self.in_model
    }

    /// Takes a person's answer about a call: an approved one is marked (the host already shows
    /// it `running`), a declined one forgotten (the host already cancelled it).
    pub(crate) fn settle(&mut self, call_id: &str, decision: &ApprovalDecision) {
        match decision {
            ApprovalDecision::Approve => {
                if let Some(call) = self.calls.get_mut(call_id) {
                    call.approved = true;
                }
            }
            ApprovalDecision::Deny => {
                self.calls.remove(call_id);
            }
        }
    }

    /// The approval a proposed call asks the host for: as it is put live, and as a turn read
    /// back shows the question. The tool's preview of the call (its `edits`) is added by the
    /// live ask, which can still read the files; `risk` is the policy's reason for asking.
    pub(crate) fn approval_request(
        &self,
        call_id: &str,
        name: &str,
        prompt: Option<&str>,
        risk: Option<&str>,
    ) -> ApprovalRequest {
        let view = self.calls.get(call_id).cloned().unwrap_or_default();
        let title = prompt.map_or_else(
            || crate::previews::confirmation_title(name, &view.title),
            str::to_owned,
        );
        ApprovalRequest {
            turn_id: self.turn_id.clone(),
            tool_call_id: self.shown_id(call_id),
            invocation_message: StringOrMarkdown::Plain(view.title),
            tool_input: view.tool_input.map(ToolInput::Inline),
            confirmation_title: Some(StringOrMarkdown::Plain(title)),
            edits: None,
            risk_assessment: risk.map(crate::previews::risk_assessment),
            // A client-run call's input is its client's; every other call can be changed
            // before it is approved, and is checked again when it is.
            editable: Some(!view.client),
            meta: None,
        }
    }

    /// Whether the call runs in a shell, so its shown input is the command alone.
    pub(crate) fn is_shell(&self, call_id: &str) -> bool {
        self.calls.get(call_id).is_some_and(|c| c.shell)
    }

    /// The title a call is shown under.
    pub(crate) fn title_of(&self, call_id: &str) -> String {
        self.calls
            .get(call_id)
            .map(|c| c.title.clone())
            .unwrap_or_default()
    }
}
