//! The one place an ACP `session/update` becomes AHP `chat/*` actions, for one turn.
//!
//! ACP chunks carry no part index, so a run of chunks of one kind goes into one part, and a
//! chunk of the other kind or one after a tool call opens the next. A tool call is started at
//! its first sight, whichever update that is, and made ready only when it is known nobody will
//! be asked: Vibe marks a call `in_progress` before it asks permission for it, so a status alone
//! says nothing; the call is made ready by its permission question (the host's), by output, or
//! by its end. ACP tool-call ids repeat across sessions and turns (Vibe's do), so the AHP id is
//! the turn's id with the agent's. A plan is one call per turn, rewritten by every plan update
//! and completed when the turn ends.

use std::collections::HashMap;

use agent_client_protocol::v1::schema as acp;
use ahp_types::actions::*;
use ahp_types::common::{JsonObject, StringOrMarkdown};
use ahp_types::state::*;
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    Markdown,
    Reasoning,
}

/// One tool call of the turn.
#[derive(Debug, Clone)]
pub struct Call {
    /// Its AHP id.
    pub id: String,
    title: String,
    input: Option<String>,
    status: acp::ToolCallStatus,
    /// Made ready (by us or by a permission question).
    readied: bool,
    /// A permission question for it was put to the host.
    pub asked: bool,
    ended: bool,
    content: Vec<ToolResultContent>,
}

/// What one turn has seen so far.
pub struct TurnMap {
    turn_id: String,
    run: Option<(Run, String)>,
    parts: usize,
    /// Whitespace held before a markdown run opens.
    held: String,
    calls: HashMap<String, Call>,
    order: Vec<String>,
    /// Usage reported by the agent for this turn, for the turn's end.
    pub usage: Option<UsageInfo>,
}

const PLAN_ID: &str = "plan";

fn kind_word(kind: acp::ToolKind) -> &'static str {
    match kind {
        acp::ToolKind::Read => "read",
        acp::ToolKind::Edit => "edit",
        acp::ToolKind::Delete => "delete",
        acp::ToolKind::Move => "move",
        acp::ToolKind::Search => "search",
        acp::ToolKind::Execute => "execute",
        acp::ToolKind::Think => "think",
        acp::ToolKind::Fetch => "fetch",
        acp::ToolKind::SwitchMode => "switch_mode",
        _ => "other",
    }
}

/// A file URI for a path the agent names.
pub fn file_uri(path: &std::path::Path) -> String {
    ahpd_sdk::util::file_uri(path)
}

/// Text of a content block, with the other kinds named in words.
pub fn block_text(block: &acp::ContentBlock) -> Option<String> {
    match block {
        acp::ContentBlock::Text(t) => Some(t.text.clone()),
        acp::ContentBlock::ResourceLink(l) => Some(format!("[{}]({})", l.name, l.uri)),
        acp::ContentBlock::Resource(r) => match &r.resource {
            acp::EmbeddedResourceResource::TextResourceContents(t) => Some(t.text.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// One diff as the file edit a client draws: the path's `after` side (no URI addresses what
/// the file was before), with line counts.
pub fn file_edit(diff: &acp::Diff) -> FileEdit {
    let uri = file_uri(&diff.path);
    let side = |uri: &str| FileEditSide {
        uri: uri.to_owned(),
        content: ContentRef {
            uri: uri.to_owned(),
            size_hint: None,
            content_type: None,
            nonce: None,
        },
    };
    let (added, removed) = line_changes(diff.old_text.as_deref().unwrap_or(""), &diff.new_text);
    FileEdit {
        before: diff.old_text.as_ref().map(|_| side(&uri)),
        after: Some(side(&uri)),
        diff: Some(FileEditDiffStats {
            added: Some(added),
            removed: Some(removed),
        }),
    }
}

/// Lines added and removed, counting lines by multiset: cheap and right for the common edits.
fn line_changes(old: &str, new: &str) -> (i64, i64) {
    let mut counts: HashMap<&str, i64> = HashMap::new();
    for l in old.lines() {
        *counts.entry(l).or_default() += 1;
    }
    let mut added = 0;
    for l in new.lines() {
        match counts.get_mut(l) {
            Some(c) if *c > 0 => *c -= 1,
            _ => added += 1,
        }
    }
    let removed = counts.values().sum();
    (added, removed)
}

fn content_of(items: &[acp::ToolCallContent]) -> Vec<ToolResultContent> {
    let mut out = Vec::new();
    for item in items {
        match item {
            acp::ToolCallContent::Content(c) => {
                if let Some(text) = block_text(&c.content) {
                    out.push(ToolResultContent::Text(ToolResultTextContent { text }));
                }
            }
            acp::ToolCallContent::Diff(d) => {
                let e = file_edit(d);
                out.push(ToolResultContent::FileEdit(ToolResultFileEditContent {
                    before: e.before,
                    after: e.after,
                    diff: e.diff,
                }));
            }
            acp::ToolCallContent::Terminal(t) => {
                out.push(ToolResultContent::Text(ToolResultTextContent {
                    text: format!("(terminal {})", t.terminal_id),
                }));
            }
            _ => {}
        }
    }
    out
}

/// The edits a permission question shows, from the call's diffs.
pub fn edits_of(items: &[acp::ToolCallContent]) -> Option<FileEditCollection> {
    let items: Vec<FileEdit> = items
        .iter()
        .filter_map(|c| match c {
            acp::ToolCallContent::Diff(d) => Some(file_edit(d)),
            _ => None,
        })
        .collect();
    (!items.is_empty()).then_some(FileEditCollection { items })
}

fn text_of(content: &[ToolResultContent]) -> String {
    content
        .iter()
        .filter_map(|c| match c {
            ToolResultContent::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl TurnMap {
    /// The map of a turn that has just started.
    pub fn new(turn_id: &str) -> Self {
        Self {
            turn_id: turn_id.to_owned(),
            run: None,
            parts: 0,
            held: String::new(),
            calls: HashMap::new(),
            order: Vec::new(),
            usage: None,
        }
    }

    fn chunk(&mut self, kind: Run, text: String, out: &mut Vec<StateAction>) {
        let mut text = text;
        let continues = matches!(&self.run, Some((k, _)) if *k == kind);
        if kind == Run::Markdown && !continues {
            text = format!("{}{}", std::mem::take(&mut self.held), text);
            if text.trim().is_empty() {
                // Whitespace some models write before a call opens no part.
                self.held = text;
                return;
            }
        }
        if !continues {
            let id = format!("{}.{}", self.turn_id, self.parts);
            self.parts += 1;
            let part = match kind {
                Run::Markdown => ResponsePart::Markdown(MarkdownResponsePart {
                    id: id.clone(),
                    content: String::new(),
                }),
                Run::Reasoning => ResponsePart::Reasoning(ReasoningResponsePart {
                    id: id.clone(),
                    content: String::new(),
                }),
            };
            out.push(StateAction::ChatResponsePart(ChatResponsePartAction {
                turn_id: self.turn_id.clone(),
                part,
                meta: None,
            }));
            self.run = Some((kind, id));
        }
        let Some((_, part_id)) = &self.run else {
            return;
        };
        let part_id = part_id.clone();
        out.push(match kind {
            Run::Markdown => StateAction::ChatDelta(ChatDeltaAction {
                turn_id: self.turn_id.clone(),
                part_id,
                content: text,
                meta: None,
            }),
            Run::Reasoning => StateAction::ChatReasoning(ChatReasoningAction {
                turn_id: self.turn_id.clone(),
                part_id,
                content: text,
                meta: None,
            }),
        });
    }

    /// Opens the call on its first sight; returns its key.
    fn open(
        &mut self,
        acp_id: &str,
        title: Option<&str>,
        name: Option<&str>,
        kind: Option<acp::ToolKind>,
        out: &mut Vec<StateAction>,
    ) -> String {
        if self.calls.contains_key(acp_id) {
            return acp_id.to_owned();
        }
        self.run = None;
        self.held.clear();
        let title = title
            .filter(|t| !t.trim().is_empty())
            .unwrap_or(acp_id)
            .to_owned();
        let kind = kind.unwrap_or(acp::ToolKind::Other);
        let tool_name = name
            .map(str::to_owned)
            .unwrap_or_else(|| kind_word(kind).to_owned());
        let id = format!("{}.{}", self.turn_id, acp_id);
        let mut meta = JsonObject::new();
        meta.insert(
            "acp".into(),
            json!({"kind": kind_word(kind), "toolCallId": acp_id}),
        );
        out.push(StateAction::ChatToolCallStart(ChatToolCallStartAction {
            turn_id: self.turn_id.clone(),
            tool_call_id: id.clone(),
            meta: Some(meta),
            tool_name,
            display_name: title.clone(),
            intention: None,
            contributor: None,
        }));
        self.calls.insert(
            acp_id.to_owned(),
            Call {
                id,
                title,
                input: None,
                status: acp::ToolCallStatus::Pending,
                readied: false,
                asked: false,
                ended: false,
                content: Vec::new(),
            },
        );
        self.order.push(acp_id.to_owned());
        acp_id.to_owned()
    }

    fn ready(&mut self, key: &str, out: &mut Vec<StateAction>) {
        let turn_id = self.turn_id.clone();
        let Some(call) = self.calls.get_mut(key) else {
            return;
        };
        if call.readied {
            return;
        }
        call.readied = true;
        out.push(StateAction::ChatToolCallReady(ChatToolCallReadyAction {
            turn_id,
            tool_call_id: call.id.clone(),
            meta: None,
            contributor: None,
            intention: None,
            invocation_message: StringOrMarkdown::Plain(call.title.clone()),
            tool_input: call.input.clone().map(ToolInput::Inline),
            confirmation_title: None,
            risk_assessment: None,
            edits: None,
            editable: None,
            confirmed: Some(ToolCallConfirmationReason::NotNeeded),
            options: None,
        }));
    }

    fn finish(&mut self, key: &str, success: bool, out: &mut Vec<StateAction>) {
        self.ready(key, out);
        let turn_id = self.turn_id.clone();
        let Some(call) = self.calls.get_mut(key) else {
            return;
        };
        if call.ended {
            return;
        }
        call.ended = true;
        let text = text_of(&call.content);
        let content = (!call.content.is_empty()).then(|| call.content.clone());
        out.push(StateAction::ChatToolCallComplete(
            ChatToolCallCompleteAction {
                turn_id,
                tool_call_id: call.id.clone(),
                meta: None,
                result: ToolCallResult {
                    success,
                    past_tense_message: StringOrMarkdown::Plain(call.title.clone()),
                    content,
                    structured_content: None,
                    error: (!success).then(|| {
                        Value::String(if text.is_empty() {
                            "The tool call failed.".to_owned()
                        } else {
                            text
                        })
                    }),
                },
                requires_result_confirmation: None,
            },
        ));
    }

    /// Applies a call's fields; returns the key.
    fn call_update(
        &mut self,
        acp_id: &str,
        title: Option<&str>,
        status: Option<acp::ToolCallStatus>,
        content: Option<&[acp::ToolCallContent]>,
        raw_input: Option<&Value>,
        out: &mut Vec<StateAction>,
    ) {
        let turn_id = self.turn_id.clone();
        let Some(call) = self.calls.get_mut(acp_id) else {
            return;
        };
        if call.ended {
            return;
        }
        if let Some(t) = title.filter(|t| !t.trim().is_empty()) {
            call.title = t.to_owned();
        }
        if let Some(input) = raw_input {
            call.input = Some(input.to_string());
        }
        if let Some(s) = status {
            call.status = s;
        }
        let mut changed = false;
        if let Some(items) = content {
            let mapped = content_of(items);
            if mapped != call.content {
                call.content = mapped;
                changed = !call.content.is_empty();
            }
        }
        match call.status {
            acp::ToolCallStatus::Completed => self.finish(acp_id, true, out),
            acp::ToolCallStatus::Failed => self.finish(acp_id, false, out),
            _ if changed && !call.asked => {
                // Output means it runs: nobody is being asked about it.
                let content = call.content.clone();
                let id = call.id.clone();
                self.ready(acp_id, out);
                out.push(StateAction::ChatToolCallContentChanged(
                    ChatToolCallContentChangedAction {
                        turn_id,
                        tool_call_id: id,
                        meta: None,
                        content,
                    },
                ));
            }
            _ if changed && call.readied => {
                let content = call.content.clone();
                let id = call.id.clone();
                out.push(StateAction::ChatToolCallContentChanged(
                    ChatToolCallContentChangedAction {
                        turn_id,
                        tool_call_id: id,
                        meta: None,
                        content,
                    },
                ));
            }
            _ => {}
        }
    }

    fn plan(&mut self, entries: &[acp::PlanEntry], out: &mut Vec<StateAction>) {
        let key = self.open(
            PLAN_ID,
            Some("Plan"),
            Some("plan"),
            Some(acp::ToolKind::Think),
            out,
        );
        let lines: Vec<String> = entries
            .iter()
            .map(|e| {
                let (mark, note) = match e.status {
                    acp::PlanEntryStatus::Completed => ("x", ""),
                    acp::PlanEntryStatus::InProgress => (" ", " (in progress)"),
                    _ => (" ", ""),
                };
                format!("- [{mark}] {}{note}", e.content)
            })
            .collect();
        let turn_id = self.turn_id.clone();
        self.ready(&key, out);
        if let Some(call) = self.calls.get_mut(&key) {
            call.content = vec![ToolResultContent::Text(ToolResultTextContent {
                text: lines.join("\n"),
            })];
            out.push(StateAction::ChatToolCallContentChanged(
                ChatToolCallContentChangedAction {
                    turn_id,
                    tool_call_id: call.id.clone(),
                    meta: None,
                    content: call.content.clone(),
                },
            ));
        }
    }

    /// One update's actions, in order. Updates this turn does not show (commands, modes,
    /// session info) are left to the session and return nothing.
    pub fn update(&mut self, update: &acp::SessionUpdate) -> Vec<StateAction> {
        let mut out = Vec::new();
        match update {
            acp::SessionUpdate::AgentMessageChunk(c) => {
                if let Some(text) = block_text(&c.content) {
                    self.chunk(Run::Markdown, text, &mut out);
                }
            }
            acp::SessionUpdate::AgentThoughtChunk(c) => {
                if let Some(text) = block_text(&c.content) {
                    self.chunk(Run::Reasoning, text, &mut out);
                }
            }
            acp::SessionUpdate::ToolCall(tc) => {
                let id = tc.tool_call_id.0.to_string();
                self.open(
                    &id,
                    Some(&tc.title),
                    tc.name.as_deref(),
                    Some(tc.kind),
                    &mut out,
                );
                self.call_update(
                    &id,
                    None,
                    Some(tc.status),
                    Some(&tc.content),
                    tc.raw_input.as_ref(),
                    &mut out,
                );
            }
            acp::SessionUpdate::ToolCallUpdate(u) => {
                let id = u.tool_call_id.0.to_string();
                let f = &u.fields;
                self.open(&id, f.title.as_deref(), f.name.as_deref(), f.kind, &mut out);
                self.call_update(
                    &id,
                    f.title.as_deref(),
                    f.status,
                    f.content.as_deref(),
                    f.raw_input.as_ref(),
                    &mut out,
                );
            }
            acp::SessionUpdate::Plan(p) => self.plan(&p.entries, &mut out),
            acp::SessionUpdate::UsageUpdate(u) => {
                let mut meta = JsonObject::new();
                meta.insert("contextWindow".into(), json!(u.size));
                meta.insert("contextUsed".into(), json!(u.used));
                if let Some(cost) = &u.cost {
                    meta.insert(
                        "cost".into(),
                        json!({"amount": cost.amount, "currency": cost.currency}),
                    );
                }
                let mut usage = self.usage.clone().unwrap_or(UsageInfo {
                    input_tokens: None,
                    output_tokens: None,
                    model: None,
                    cache_read_tokens: None,
                    meta: None,
                });
                usage.meta = Some(meta);
                self.usage = Some(usage.clone());
                out.push(StateAction::ChatUsage(ChatUsageAction {
                    turn_id: self.turn_id.clone(),
                    usage,
                    meta: None,
                }));
            }
            _ => {}
        }
        out
    }

    /// Opens the call a permission request names (if this is its first sight) and takes its
    /// fields; the host's question will make it ready.
    pub fn asking(&mut self, tc: &acp::ToolCallUpdate) -> (Vec<StateAction>, Call) {
        let mut out = Vec::new();
        let id = tc.tool_call_id.0.to_string();
        let f = &tc.fields;
        self.open(&id, f.title.as_deref(), f.name.as_deref(), f.kind, &mut out);
        if let Some(call) = self.calls.get_mut(&id) {
            if let Some(t) = f.title.as_deref().filter(|t| !t.trim().is_empty()) {
                call.title = t.to_owned();
            }
            if let Some(input) = &f.raw_input {
                call.input = Some(input.to_string());
            }
        }
        let call = self.calls.get(&id).cloned();
        match call {
            Some(c) if !c.readied && !c.ended => {
                if let Some(call) = self.calls.get_mut(&id) {
                    call.asked = true;
                    call.readied = true;
                }
                (out, c)
            }
            Some(c) => (out, c),
            None => (
                out,
                Call {
                    id: format!("{}.{}", self.turn_id, id),
                    title: id,
                    input: None,
                    status: acp::ToolCallStatus::Pending,
                    readied: true,
                    asked: true,
                    ended: true,
                    content: Vec::new(),
                },
            ),
        }
    }

    /// The usage the prompt's answer carried.
    pub fn final_usage(&mut self, usage: &acp::Usage, model: Option<String>) -> StateAction {
        let mut info = self.usage.clone().unwrap_or(UsageInfo {
            input_tokens: None,
            output_tokens: None,
            model: None,
            cache_read_tokens: None,
            meta: None,
        });
        info.input_tokens = i64::try_from(usage.input_tokens).ok();
        info.output_tokens = i64::try_from(usage.output_tokens).ok();
        info.cache_read_tokens = usage.cached_read_tokens.and_then(|t| i64::try_from(t).ok());
        if model.is_some() {
            info.model = model;
        }
        self.usage = Some(info.clone());
        StateAction::ChatUsage(ChatUsageAction {
            turn_id: self.turn_id.clone(),
            usage: info,
            meta: None,
        })
    }

    /// What closes the calls still open when the turn ends: the plan as done, any other call as
    /// not finished (unless a person is being asked about it: the host settles that one).
    pub fn close(&mut self, ended_well: bool) -> Vec<StateAction> {
        let mut out = Vec::new();
        for key in self.order.clone() {
            let Some(call) = self.calls.get(&key) else {
                continue;
            };
            if call.ended || (call.asked && !ended_well) {
                continue;
            }
            if key == PLAN_ID {
                self.finish(&key, true, &mut out);
            } else if !call.asked || call.status != acp::ToolCallStatus::Pending {
                if let Some(c) = self.calls.get_mut(&key) {
                    c.content
                        .push(ToolResultContent::Text(ToolResultTextContent {
                            text: "The turn ended before the agent finished this call.".into(),
                        }));
                }
                self.finish(&key, false, &mut out);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(text: &str) -> acp::SessionUpdate {
        acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(acp::ContentBlock::Text(
            acp::TextContent::new(text),
        )))
    }

    #[test]
    fn chunks_make_one_part_and_whitespace_alone_opens_none() {
        let mut m = TurnMap::new("t1");
        assert!(m.update(&chunk("\n")).is_empty());
        let first = m.update(&chunk("Hello"));
        assert!(matches!(first[0], StateAction::ChatResponsePart(_)));
        match &first[1] {
            StateAction::ChatDelta(d) => assert_eq!(d.content, "\nHello"),
            other => panic!("{other:?}"),
        }
        let second = m.update(&chunk(" world"));
        assert_eq!(second.len(), 1);
    }

    #[test]
    fn a_call_in_progress_is_not_ready_until_it_shows_output_or_ends() {
        let mut m = TurnMap::new("t1");
        let tc = acp::ToolCall::new("c1", "Run ls")
            .kind(acp::ToolKind::Execute)
            .status(acp::ToolCallStatus::InProgress);
        let a = m.update(&acp::SessionUpdate::ToolCall(tc));
        assert_eq!(a.len(), 1, "{a:?}");
        match &a[0] {
            StateAction::ChatToolCallStart(s) => {
                assert_eq!(s.tool_call_id, "t1.c1");
                assert_eq!(s.tool_name, "execute");
            }
            other => panic!("{other:?}"),
        }
        let done = acp::ToolCallUpdate::new(
            "c1",
            acp::ToolCallUpdateFields::new().status(acp::ToolCallStatus::Completed),
        );
        let b = m.update(&acp::SessionUpdate::ToolCallUpdate(done));
        assert!(matches!(b[0], StateAction::ChatToolCallReady(_)));
        assert!(matches!(b[1], StateAction::ChatToolCallComplete(_)));
    }

    #[test]
    fn line_changes_count_what_moved() {
        assert_eq!(line_changes("a\nb\nc", "a\nx\nc\nd"), (2, 1));
        assert_eq!(line_changes("", "new"), (1, 0));
    }
}
