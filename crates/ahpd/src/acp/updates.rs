//! A turn as ACP `session/update`s: the parts the host's reducers built, compared with what the
//! editor was already sent, become message and thought chunks, tool calls and their updates,
//! and plans. Working from the state rather than from each action means merged deltas, a
//! snapshot taken mid-turn and a stored turn replayed by `session/load` all go through one path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Diff, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus,
    SessionUpdate, TextContent, ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus,
    ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{Message, ResponsePart, ToolCallState, ToolInput, ToolResultContent};
use serde_json::Value;

/// The name under which an engine shows a turn's plan as a tool call whose content lists the
/// entries, one `- [ ] step` line each (the ACP backend's form of an agent's `plan` update).
const PLAN_TOOL: &str = "plan";

/// Most characters of one tool result shown beside its call; the model saw all of it.
const RESULT_LIMIT: usize = 16 * 1024;

/// What the editor has been shown of one turn.
#[derive(Debug, Default)]
pub(crate) struct Shown {
    /// Bytes of each text or reasoning part already sent.
    text: HashMap<String, usize>,
    /// The calls already announced.
    calls: HashMap<String, CallShown>,
    /// System notices already shown.
    notices: usize,
}

#[derive(Debug)]
struct CallShown {
    status: ToolCallStatus,
    title: String,
    /// What was last sent as the call's content.
    content: Vec<ToolCallContent>,
    /// The change an edit would make, worked out from the file before the call ran.
    diff: Option<Diff>,
    plan: Option<Vec<PlanEntry>>,
}

/// One tool call as the editor sees it.
#[derive(Debug, Clone)]
pub(crate) struct CallView {
    pub id: String,
    pub name: String,
    pub title: String,
    pub status: ToolCallStatus,
    pub input: Option<Value>,
    /// The result's blocks, or the reason it did not run.
    pub output: Vec<String>,
}

/// The text of a host string.
pub(crate) fn text_of(s: &StringOrMarkdown) -> &str {
    match s {
        StringOrMarkdown::Plain(t) => t,
        StringOrMarkdown::Markdown { markdown } => markdown,
    }
}

fn inline(input: &Option<ToolInput>) -> Option<Value> {
    match input {
        Some(ToolInput::Inline(text)) => serde_json::from_str(text).ok(),
        _ => None,
    }
}

fn result_text(content: &Option<Vec<ToolResultContent>>) -> Vec<String> {
    let mut out = Vec::new();
    for block in content.iter().flatten() {
        match block {
            ToolResultContent::Text(t) if !t.text.is_empty() => out.push(t.text.clone()),
            ToolResultContent::Terminal(t) => {
                if let Some(preview) = t.result.as_ref().and_then(|r| r.preview.clone()) {
                    out.push(preview);
                }
            }
            _ => {}
        }
    }
    out
}

fn error_text(error: &Option<Value>) -> Option<String> {
    let e = error.as_ref()?;
    e.get("message")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| e.as_str().map(str::to_owned))
}

/// The call a tool-call state describes.
pub(crate) fn view(tc: &ToolCallState) -> Option<CallView> {
    let (id, name, display) = match tc {
        ToolCallState::Streaming(s) => (&s.tool_call_id, &s.tool_name, &s.display_name),
        ToolCallState::PendingConfirmation(s) => (&s.tool_call_id, &s.tool_name, &s.display_name),
        ToolCallState::Running(s) => (&s.tool_call_id, &s.tool_name, &s.display_name),
        ToolCallState::AuthRequired(s) => (&s.tool_call_id, &s.tool_name, &s.display_name),
        ToolCallState::PendingResultConfirmation(s) => {
            (&s.tool_call_id, &s.tool_name, &s.display_name)
        }
        ToolCallState::Completed(s) => (&s.tool_call_id, &s.tool_name, &s.display_name),
        ToolCallState::Cancelled(s) => (&s.tool_call_id, &s.tool_name, &s.display_name),
        ToolCallState::Unknown(_) => return None,
    };
    // The host's invocation message names what the call acts on; the tool's name before it
    // says what it does, as a terminal client shows it.
    let titled = |m: &StringOrMarkdown| {
        let t = text_of(m).trim();
        if t.is_empty() || t == display {
            display.clone()
        } else if t.contains(display.as_str()) {
            t.to_owned()
        } else {
            format!("{display} {t}")
        }
    };
    let (title, status, input, output) = match tc {
        ToolCallState::Streaming(s) => (
            s.invocation_message
                .as_ref()
                .map_or_else(|| display.clone(), titled),
            ToolCallStatus::Pending,
            None,
            Vec::new(),
        ),
        ToolCallState::PendingConfirmation(s) => (
            titled(&s.invocation_message),
            ToolCallStatus::Pending,
            inline(&s.tool_input),
            Vec::new(),
        ),
        ToolCallState::Running(s) => (
            titled(&s.invocation_message),
            ToolCallStatus::InProgress,
            inline(&s.tool_input),
            result_text(&s.content),
        ),
        ToolCallState::AuthRequired(s) => (
            titled(&s.invocation_message),
            ToolCallStatus::Pending,
            inline(&s.tool_input),
            result_text(&s.content),
        ),
        ToolCallState::PendingResultConfirmation(s) => (
            titled(&s.invocation_message),
            ToolCallStatus::InProgress,
            inline(&s.tool_input),
            result_text(&s.content),
        ),
        ToolCallState::Completed(s) => {
            let mut output = result_text(&s.content);
            if !s.success
                && output.is_empty()
                && let Some(e) = error_text(&s.error)
            {
                output.push(e);
            }
            (
                titled(&s.invocation_message),
                if s.success {
                    ToolCallStatus::Completed
                } else {
                    ToolCallStatus::Failed
                },
                inline(&s.tool_input),
                output,
            )
        }
        ToolCallState::Cancelled(s) => (
            titled(&s.invocation_message),
            ToolCallStatus::Failed,
            inline(&s.tool_input),
            s.reason_message
                .as_ref()
                .map(|m| vec![text_of(m).to_owned()])
                .unwrap_or_default(),
        ),
        ToolCallState::Unknown(_) => return None,
    };
    Some(CallView {
        id: id.clone(),
        name: name.clone(),
        title,
        status,
        input,
        output,
    })
}

/// The ACP kind of a tool, from its name: the editor picks the call's icon by it.
pub(crate) fn kind_of(tool: &str) -> ToolKind {
    let name = tool
        .rsplit("__")
        .next()
        .unwrap_or(tool)
        .to_ascii_lowercase();
    match name.as_str() {
        "read_file" | "list_files" | "memory_read" | "read" | "view" | "ls" => ToolKind::Read,
        "write_file" | "edit_file" | "memory_write" | "write" | "edit" | "multiedit" => {
            ToolKind::Edit
        }
        "search_files" | "web_search" | "grep" | "glob" | "find" => ToolKind::Search,
        "shell_exec" | "bash" | "shell" | "exec" => ToolKind::Execute,
        "web_fetch" | "fetch" => ToolKind::Fetch,
        PLAN_TOOL | "ask_user" | "think" => ToolKind::Think,
        _ => {
            let has = |w: &str| name.contains(w);
            if has("delete") || has("remove") {
                ToolKind::Delete
            } else if has("move") || has("rename") {
                ToolKind::Move
            } else if has("search") || has("grep") || has("find") {
                ToolKind::Search
            } else if has("read") || has("list") || has("get") {
                ToolKind::Read
            } else if has("write") || has("edit") || has("patch") || has("create") {
                ToolKind::Edit
            } else if has("exec") || has("shell") || has("command") || has("run") {
                ToolKind::Execute
            } else if has("fetch") || has("http") || has("url") {
                ToolKind::Fetch
            } else {
                ToolKind::Other
            }
        }
    }
}

/// A path in a tool's input, made absolute against the session's folder.
fn input_path(input: &Value, dir: &Path) -> Option<PathBuf> {
    let p = ["path", "file_path", "file", "filename"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_str))?;
    let p = Path::new(p);
    Some(if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    })
}

/// Where a call acts, so the editor can follow it.
pub(crate) fn locations(view: &CallView, dir: &Path) -> Vec<ToolCallLocation> {
    let Some(input) = &view.input else {
        return Vec::new();
    };
    let Some(path) = input_path(input, dir) else {
        return Vec::new();
    };
    let line = ["line", "offset", "start_line", "startLine"]
        .iter()
        .find_map(|k| input.get(*k).and_then(Value::as_u64))
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n > 0);
    vec![ToolCallLocation::new(path).line(line)]
}

/// The change an edit call would make, read from the file as it is now: called before the
/// call runs, so `oldText` is what the file held.
pub(crate) fn diff_of(view: &CallView, dir: &Path) -> Option<Diff> {
    let input = view.input.as_ref()?;
    let path = input_path(input, dir)?;
    let before = std::fs::read_to_string(&path).ok();
    let tool = view.name.rsplit("__").next().unwrap_or(&view.name);
    let after = match tool {
        "write_file" => input.get("content")?.as_str()?.to_owned(),
        "edit_file" => {
            let old = input.get("old")?.as_str()?;
            let new = input.get("new")?.as_str()?;
            let all = input.get("all").and_then(Value::as_bool).unwrap_or(false);
            let text = before.as_deref()?;
            if !text.contains(old) {
                // The file differs from what the model saw: the replacement alone.
                return Some(Diff::new(path, new).old_text(old.to_owned()));
            }
            if all {
                text.replace(old, new)
            } else {
                text.replacen(old, new, 1)
            }
        }
        _ => return None,
    };
    Some(Diff::new(path, after).old_text(before))
}

fn text_block(text: &str) -> ToolCallContent {
    let shown = if text.len() > RESULT_LIMIT {
        let mut end = RESULT_LIMIT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}\n… ({} more bytes)", &text[..end], text.len() - end)
    } else {
        text.to_owned()
    };
    ToolCallContent::from(ContentBlock::Text(TextContent::new(shown)))
}

fn content_of(view: &CallView, diff: Option<&Diff>) -> Vec<ToolCallContent> {
    let mut out: Vec<ToolCallContent> = diff
        .cloned()
        .map(ToolCallContent::from)
        .into_iter()
        .collect();
    // An edit's result is a sentence about the diff already shown; a failure's is the reason.
    if diff.is_none() || view.status == ToolCallStatus::Failed {
        out.extend(view.output.iter().map(|t| text_block(t)));
    }
    out
}

/// The fields an editor needs to show a call it is asked to approve.
pub(crate) fn permission_fields(view: &CallView, dir: &Path) -> ToolCallUpdateFields {
    let diff = diff_of(view, dir);
    ToolCallUpdateFields::new()
        .title(view.title.clone())
        .kind(kind_of(&view.name))
        .status(ToolCallStatus::Pending)
        .raw_input(view.input.clone())
        .locations(locations(view, dir))
        .content(content_of(view, diff.as_ref()))
}

/// Plan entries from the lines of a plan call's content.
fn plan_entries(view: &CallView) -> Vec<PlanEntry> {
    let mut entries = Vec::new();
    for line in view.output.iter().flat_map(|t| t.lines()) {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("- [") else {
            continue;
        };
        let (done, rest) = match rest.split_once("] ") {
            Some((mark, rest)) => (mark.eq_ignore_ascii_case("x"), rest),
            None => continue,
        };
        let (text, status) = if done {
            (rest, PlanEntryStatus::Completed)
        } else if let Some(t) = rest
            .strip_suffix(" (in progress)")
            .or_else(|| rest.strip_suffix(" (in_progress)"))
        {
            (t, PlanEntryStatus::InProgress)
        } else {
            (rest, PlanEntryStatus::Pending)
        };
        entries.push(PlanEntry::new(text, PlanEntryPriority::Medium, status));
    }
    entries
}

fn chunk(text: &str) -> ContentChunk {
    ContentChunk::new(ContentBlock::Text(TextContent::new(text)))
}

/// What a person's message was, as the editor shows one.
pub(crate) fn user_message(message: &Message) -> Vec<SessionUpdate> {
    let mut out = Vec::new();
    if !message.text.is_empty() {
        out.push(SessionUpdate::UserMessageChunk(chunk(&message.text)));
    }
    for a in message.attachments.iter().flatten() {
        let label = match a {
            ahp_types::state::MessageAttachment::Simple(s) => Some(&s.label),
            ahp_types::state::MessageAttachment::EmbeddedResource(s) => Some(&s.label),
            ahp_types::state::MessageAttachment::Resource(s) => Some(&s.label),
            _ => None,
        };
        if let Some(label) = label {
            out.push(SessionUpdate::UserMessageChunk(chunk(&format!(
                "\n[attached: {label}]"
            ))));
        }
    }
    out
}

impl Shown {
    /// The updates that bring the editor from what it was shown to `parts`.
    pub(crate) fn advance(&mut self, parts: &[ResponsePart], dir: &Path) -> Vec<SessionUpdate> {
        let mut out = Vec::new();
        let mut notices = 0;
        for part in parts {
            match part {
                ResponsePart::Markdown(m) => {
                    if let Some(t) = self.fresh(&m.id, &m.content) {
                        out.push(SessionUpdate::AgentMessageChunk(chunk(&t)));
                    }
                }
                ResponsePart::Reasoning(r) => {
                    if let Some(t) = self.fresh(&r.id, &r.content) {
                        out.push(SessionUpdate::AgentThoughtChunk(chunk(&t)));
                    }
                }
                ResponsePart::ToolCall(tc) => {
                    if let Some(v) = view(&tc.tool_call) {
                        self.call(&v, dir, &mut out);
                    }
                }
                ResponsePart::SystemNotification(n) => {
                    // Notices have no id: each is shown once, by its place among them.
                    notices += 1;
                    if notices > self.notices {
                        self.notices = notices;
                        out.push(SessionUpdate::AgentMessageChunk(chunk(&format!(
                            "\n\n_{}_\n\n",
                            text_of(&n.content).trim()
                        ))));
                    }
                }
                ResponsePart::Error(e) => {
                    notices += 1;
                    if notices > self.notices {
                        self.notices = notices;
                        out.push(SessionUpdate::AgentMessageChunk(chunk(&format!(
                            "\n\n_The turn failed: {}_\n\n",
                            e.error.message.trim()
                        ))));
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// The part's text not yet sent.
    fn fresh(&mut self, id: &str, content: &str) -> Option<String> {
        let sent = self.text.entry(id.to_owned()).or_insert(0);
        let new = match content.get(*sent..) {
            Some(rest) => rest.to_owned(),
            // The part was rewritten rather than appended to: send what it holds now.
            None => content.to_owned(),
        };
        *sent = content.len();
        (!new.is_empty()).then_some(new)
    }

    fn call(&mut self, v: &CallView, dir: &Path, out: &mut Vec<SessionUpdate>) {
        if v.name == PLAN_TOOL {
            let entries = plan_entries(v);
            let shown = self.calls.entry(v.id.clone()).or_insert_with(|| CallShown {
                status: v.status,
                title: v.title.clone(),
                content: Vec::new(),
                diff: None,
                plan: None,
            });
            if shown.plan.as_ref() != Some(&entries) && !entries.is_empty() {
                shown.plan = Some(entries.clone());
                out.push(SessionUpdate::Plan(Plan::new(entries)));
            }
            return;
        }
        match self.calls.get_mut(&v.id) {
            None => {
                // Worked out once, before the call runs: afterwards the file holds the result.
                let diff = match v.status {
                    ToolCallStatus::Pending | ToolCallStatus::InProgress => diff_of(v, dir),
                    _ => None,
                };
                let content = content_of(v, diff.as_ref());
                let call = ToolCall::new(v.id.clone(), v.title.clone())
                    .kind(kind_of(&v.name))
                    .status(v.status)
                    .content(content.clone())
                    .locations(locations(v, dir))
                    .raw_input(v.input.clone());
                out.push(SessionUpdate::ToolCall(call));
                self.calls.insert(
                    v.id.clone(),
                    CallShown {
                        status: v.status,
                        title: v.title.clone(),
                        content,
                        diff,
                        plan: None,
                    },
                );
            }
            Some(shown) => {
                let mut fields = ToolCallUpdateFields::new();
                let mut changed = false;
                if shown.diff.is_none()
                    && v.input.is_some()
                    && matches!(
                        v.status,
                        ToolCallStatus::Pending | ToolCallStatus::InProgress
                    )
                {
                    shown.diff = diff_of(v, dir);
                    if v.status == ToolCallStatus::Pending {
                        fields = fields
                            .raw_input(v.input.clone())
                            .kind(kind_of(&v.name))
                            .locations(locations(v, dir));
                        changed = true;
                    }
                }
                if shown.status != v.status {
                    shown.status = v.status;
                    fields = fields.status(v.status);
                    changed = true;
                }
                if shown.title != v.title {
                    shown.title = v.title.clone();
                    fields = fields.title(v.title.clone());
                    changed = true;
                }
                let content = content_of(v, shown.diff.as_ref());
                if content != shown.content {
                    shown.content = content.clone();
                    fields = fields.content(content);
                    changed = true;
                }
                if changed {
                    out.push(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                        v.id.clone(),
                        fields,
                    )));
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ahp_types::state::{MarkdownResponsePart, ReasoningResponsePart};

    #[test]
    fn text_goes_out_once_as_it_grows() {
        let mut shown = Shown::default();
        let dir = Path::new("/");
        let part = |t: &str| {
            vec![
                ResponsePart::Reasoning(ReasoningResponsePart {
                    id: "r".into(),
                    content: "why".into(),
                }),
                ResponsePart::Markdown(MarkdownResponsePart {
                    id: "m".into(),
                    content: t.into(),
                }),
            ]
        };
        let first = shown.advance(&part("hel"), dir);
        assert_eq!(first.len(), 2);
        let second = shown.advance(&part("hello"), dir);
        let json = serde_json::to_value(&second).unwrap();
        assert_eq!(json[0]["sessionUpdate"], "agent_message_chunk");
        assert_eq!(json[0]["content"]["text"], "lo");
        assert!(shown.advance(&part("hello"), dir).is_empty());
    }

    #[test]
    fn tools_get_the_kind_their_name_says() {
        assert_eq!(kind_of("read_file"), ToolKind::Read);
        assert_eq!(kind_of("edit_file"), ToolKind::Edit);
        assert_eq!(kind_of("shell_exec"), ToolKind::Execute);
        assert_eq!(kind_of("mcp__github__search_issues"), ToolKind::Search);
        assert_eq!(kind_of("mcp__fs__delete_file"), ToolKind::Delete);
        assert_eq!(kind_of("frobnicate"), ToolKind::Other);
    }

    #[test]
    fn an_edit_shows_the_whole_file_before_and_after() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\nhello\n").unwrap();
        let v = CallView {
            id: "c".into(),
            name: "edit_file".into(),
            title: "edit a.txt".into(),
            status: ToolCallStatus::Pending,
            input: Some(serde_json::json!({ "path": "a.txt", "old": "hello", "new": "bye" })),
            output: Vec::new(),
        };
        let d = serde_json::to_value(diff_of(&v, dir.path()).unwrap()).unwrap();
        assert_eq!(d["oldText"], "one\nhello\n");
        assert_eq!(d["newText"], "one\nbye\n");
        assert!(d["path"].as_str().unwrap().ends_with("/a.txt"));
        let loc = serde_json::to_value(locations(&v, dir.path())).unwrap();
        assert!(loc[0]["path"].as_str().unwrap().ends_with("/a.txt"));
    }

    #[test]
    fn a_plan_call_becomes_a_plan() {
        let v = CallView {
            id: "t:plan".into(),
            name: PLAN_TOOL.into(),
            title: "Plan".into(),
            status: ToolCallStatus::InProgress,
            input: None,
            output: vec!["- [x] read\n- [ ] edit (in progress)\n- [ ] test".into()],
        };
        let mut out = Vec::new();
        Shown::default().call(&v, Path::new("/"), &mut out);
        let json = serde_json::to_value(&out).unwrap();
        assert_eq!(json[0]["sessionUpdate"], "plan");
        let entries = &json[0]["entries"];
        assert_eq!(entries[0]["status"], "completed");
        assert_eq!(entries[1]["status"], "in_progress");
        assert_eq!(entries[1]["content"], "edit");
        assert_eq!(entries[2]["status"], "pending");
    }
}
