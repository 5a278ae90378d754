//! What a person sees: the reply on standard output as it streams (Markdown drawn on a
//! terminal), one line per tool call on standard error with the diff of an edit once it ran,
//! reasoning dimmed there when asked for, MCP servers that fail as one line, and the turn's
//! tokens and cost. With `--json`, every action of the session and its chat instead, one
//! envelope per line. Everything is written through [`Out`], and every text from elsewhere is
//! cleaned before it is.

use std::collections::HashMap;

use ahp_types::actions::{ActionEnvelope, StateAction};
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{
    McpServerState, PendingMessageKind, ResponsePart, ToolCallResult, UsageInfo,
};
use serde_json::Value;

pub use super::out::Out;
pub use super::screen::Style;
use super::screen::{clean, clean_line};

/// Text of a plain or Markdown string.
pub fn text_of(s: &StringOrMarkdown) -> &str {
    match s {
        StringOrMarkdown::Plain(t) => t,
        StringOrMarkdown::Markdown { markdown, .. } => markdown,
    }
}

#[derive(Debug, Default, Clone)]
struct Call {
    name: String,
    subject: String,
    /// The diffs a person approved, shown again once the call has run.
    previews: Vec<String>,
}

/// The serialized envelope with C1 controls and reordering marks escaped too (JSON escapes
/// only C0), so a line read on a terminal is as safe as the text output.
pub fn json_line(value: &impl serde::Serialize) -> String {
    let text = serde_json::to_string(value).unwrap_or_default();
    let mut out = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        if super::screen::has_controls(c.encode_utf8(&mut [0; 4])) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out.push('\n');
    out
}

/// Prints a chat's actions.
pub struct Printer {
    json: bool,
    show_reasoning: bool,
    quiet: bool,
    /// The style of standard error.
    pub style: Style,
    /// The writer every line goes through.
    pub out: Out,
    calls: HashMap<String, Call>,
    /// Whether standard output holds a reply line not yet ended.
    reply_open: bool,
    /// Whether standard error holds reasoning not yet ended.
    reasoning_open: bool,
    usage: Option<UsageInfo>,
    /// The reply of this turn, raw, for `-o` and the result line.
    last_text: String,
    /// A CR at the end of the last delta.
    held_cr: String,
    markdown: super::markdown::Stream,
    /// MCP servers last seen failing, by id, so a failure is said once.
    failing: HashMap<String, String>,
    /// The diffs of the edits that ran this session, for `/diff`.
    pub changes: Vec<String>,
    /// The turn's error message, when it failed.
    pub error: Option<String>,
}

impl Printer {
    /// A printer for text (`json` false) or JSON lines; `quiet` leaves out the diffs of edits
    /// that ran.
    pub fn new(json: bool, show_reasoning: bool, quiet: bool) -> Printer {
        Printer {
            json,
            show_reasoning,
            quiet,
            style: Style::for_stderr(),
            out: Out::start(),
            calls: HashMap::new(),
            reply_open: false,
            reasoning_open: false,
            usage: None,
            last_text: String::new(),
            held_cr: String::new(),
            markdown: super::markdown::Stream::new(!json && Style::for_stdout().is_colored()),
            failing: HashMap::new(),
            changes: Vec::new(),
            error: None,
        }
    }

    /// Forgets the last turn's usage and text.
    pub fn reset(&mut self) {
        self.usage = None;
        self.error = None;
        self.last_text.clear();
    }

    /// Ends any open reply or reasoning line, so a line of its own can follow.
    pub fn break_line(&mut self) {
        self.flush_reply();
        if self.reply_open {
            self.out.out("\n");
            self.reply_open = false;
        }
        if self.reasoning_open {
            self.out.err("\n");
            self.reasoning_open = false;
        }
    }

    /// One line on standard error, after any open line. Nothing in JSON mode.
    pub fn note(&mut self, line: &str) {
        if self.json {
            return;
        }
        self.break_line();
        self.out.err_line(line);
    }

    /// One line on standard error in either mode: what a script's caller should read too.
    pub fn warn(&mut self, line: &str) {
        self.break_line();
        self.out.err_line(line);
    }

    /// Text on standard error as it is (a prompt), after any open line.
    pub fn prompt(&mut self, text: &str) {
        self.break_line();
        self.out.err(text.to_owned());
    }

    fn reply(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        // A CR that ends one delta may start a CRLF the next one ends: hold it until then.
        let mut text = std::mem::take(&mut self.held_cr) + text;
        if text.ends_with('\r') {
            text.pop();
            self.held_cr.push('\r');
        }
        let text = self.markdown.push(&clean(&text));
        self.write_reply(text);
    }

    fn write_reply(&mut self, text: String) {
        if text.is_empty() {
            return;
        }
        if self.reasoning_open {
            self.out.err("\n");
            self.reasoning_open = false;
        }
        self.reply_open = !text.ends_with('\n');
        self.out.out(text);
    }

    /// Writes what the reply still holds back (a held CR, an unfinished Markdown block).
    pub fn flush_reply(&mut self) {
        let mut rest = clean(&std::mem::take(&mut self.held_cr));
        rest.push_str(&self.markdown.finish());
        self.write_reply(rest);
    }

    /// The reply's text so far this turn, as the model wrote it.
    pub fn last_text(&self) -> &str {
        &self.last_text
    }

    /// The last turn's usage, when the host reported it.
    pub fn usage(&self) -> Option<&UsageInfo> {
        self.usage.as_ref()
    }

    fn reasoning(&mut self, text: &str) {
        if !self.show_reasoning || text.is_empty() {
            return;
        }
        if self.reply_open {
            self.out.out("\n");
            self.reply_open = false;
        }
        let text = clean(text);
        self.reasoning_open = !text.ends_with('\n');
        self.out.err(self.style.dim(&text));
    }

    /// Keeps the diffs a person is shown for a call, to show them again once it ran.
    pub fn previewed(&mut self, call: &str, previews: &[String]) {
        if let Some(c) = self.calls.get_mut(call) {
            c.previews = previews.to_vec();
        }
    }

    /// Keeps what the end of the turn reports, in either mode: the final message (the text
    /// after the last tool call), the usage, the error.
    fn track(&mut self, action: &StateAction) {
        match action {
            StateAction::ChatResponsePart(a) => {
                if let ResponsePart::Markdown(p) = &a.part {
                    self.last_text.push_str(&p.content);
                }
            }
            StateAction::ChatDelta(a) => self.last_text.push_str(&a.content),
            StateAction::ChatToolCallStart(_) => self.last_text.clear(),
            StateAction::ChatUsage(a) => self.usage = Some(a.usage.clone()),
            StateAction::ChatError(a) => self.error = Some(a.part.error.message.clone()),
            _ => {}
        }
    }

    /// Prints one envelope.
    pub fn show(&mut self, env: &ActionEnvelope) {
        if env.rejection_reason.is_none() {
            self.track(&env.action);
        }
        if self.json {
            self.out.out(json_line(env));
            return;
        }
        if let Some(why) = &env.rejection_reason {
            self.note(&format!(
                "ahpd: the host refused an action: {}",
                clean_line(why)
            ));
            return;
        }
        match &env.action {
            StateAction::ChatResponsePart(a) => match &a.part {
                ResponsePart::Markdown(p) => self.reply(&p.content),
                ResponsePart::Reasoning(p) => self.reasoning(&p.content),
                _ => {}
            },
            StateAction::ChatDelta(a) => self.reply(&a.content),
            StateAction::ChatReasoning(a) => self.reasoning(&a.content),
            StateAction::ChatToolCallStart(a) => {
                self.calls.insert(
                    a.tool_call_id.clone(),
                    Call {
                        name: clean_line(&a.tool_name),
                        ..Call::default()
                    },
                );
            }
            StateAction::ChatToolCallReady(a) => {
                let call = self.calls.entry(a.tool_call_id.clone()).or_default();
                call.subject = one_line(text_of(&a.invocation_message));
            }
            StateAction::ChatToolCallConfirmed(a) if !a.approved => {
                let call = self.call(&a.tool_call_id);
                let why = a
                    .reason_message
                    .as_ref()
                    .map(|m| format!(" ({})", one_line(text_of(m))))
                    .unwrap_or_default();
                let line = format!(
                    "• {} {}: {}{why}",
                    call.name,
                    call.subject,
                    self.style.red("denied")
                );
                self.note(&line);
            }
            StateAction::ChatToolCallComplete(a) => {
                let call = self.call(&a.tool_call_id);
                let outcome = self.outcome(&a.result);
                self.note(&format!("• {} {}: {outcome}", call.name, call.subject));
                if a.result.success && !call.previews.is_empty() {
                    for p in &call.previews {
                        self.changes.push(p.clone());
                        if !self.quiet {
                            let shown = super::screen::colored(p.trim_end(), self.style);
                            self.note(&shown);
                        }
                    }
                }
            }
            StateAction::ChatPendingMessageSet(a) if a.kind == PendingMessageKind::Steering => {
                let line = format!("(steering: {})", one_line(&a.message.text));
                self.note(&self.style.dim(&line));
            }
            StateAction::ChatError(a) => {
                // Whole: the end of the message is often what says how to fix it.
                let line = format!(
                    "ahpd: the turn failed: {}",
                    clean(a.part.error.message.trim_end())
                );
                self.note(&self.style.red(&line));
            }
            StateAction::SessionMcpServerStateChanged(a) => self.mcp_state(&a.id, &a.state),
            _ => {}
        }
    }

    /// A failing MCP server as one line, once per failure; its recovery as another.
    fn mcp_state(&mut self, id: &str, state: &McpServerState) {
        match state {
            McpServerState::Error(e) => {
                let why = clean_line(&e.error.message);
                if self.failing.get(id) == Some(&why) {
                    return;
                }
                self.failing.insert(id.to_owned(), why.clone());
                let line = format!("MCP server {} failed: {why}", clean_line(id));
                self.note(&self.style.yellow(&line));
            }
            McpServerState::Ready(_) if self.failing.remove(id).is_some() => {
                let line = format!("MCP server {} is ready again", clean_line(id));
                self.note(&self.style.dim(&line));
            }
            _ => {}
        }
    }

    fn call(&self, id: &str) -> Call {
        self.calls.get(id).cloned().unwrap_or_else(|| Call {
            name: "tool".into(),
            subject: clean_line(id),
            ..Call::default()
        })
    }

    fn outcome(&self, r: &ToolCallResult) -> String {
        if r.success {
            return self.style.green("ok");
        }
        let said = one_line(text_of(&r.past_tense_message));
        let error = match &r.error {
            Some(Value::String(s)) => one_line(s),
            Some(Value::Object(o)) => o
                .get("message")
                .and_then(Value::as_str)
                .map(one_line)
                .unwrap_or_default(),
            _ => String::new(),
        };
        let detail = [said, error]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(": ");
        if detail.is_empty() {
            self.style.red("failed")
        } else {
            format!("{} ({detail})", self.style.red("failed"))
        }
    }

    /// The last turn's tokens and cost, as one line.
    pub fn usage_line(&self) -> Option<String> {
        usage_line(self.usage.as_ref()?)
    }
}

/// The cost the host put on a usage report.
pub fn cost_of(u: &UsageInfo) -> Option<f64> {
    u.meta
        .as_ref()
        .and_then(|m| m.get("ahpd.cost"))
        .and_then(|c| c.get("amount"))
        .and_then(Value::as_f64)
}

/// A usage report's tokens and cost, as one line.
pub fn usage_line(u: &UsageInfo) -> Option<String> {
    let mut parts = vec![format!(
        "{} tokens in, {} out",
        u.input_tokens.unwrap_or(0),
        u.output_tokens.unwrap_or(0)
    )];
    if let Some(cached) = u.cache_read_tokens.filter(|c| *c > 0) {
        parts.push(format!("{cached} cached"));
    }
    parts.push(match cost_of(u) {
        Some(c) => format!("${c:.4}"),
        None => "cost unknown".into(),
    });
    if let Some(model) = &u.model {
        parts.push(clean_line(model));
    }
    Some(parts.join(" · "))
}

/// The first line of `s`, shortened to 100 characters and cleaned: for a summary line,
/// never for what a person approves.
pub fn one_line(s: &str) -> String {
    let first = s.lines().next().unwrap_or("").trim();
    let mut out: String = clean_line(&first.chars().take(100).collect::<String>());
    if first.chars().count() > 100 || s.trim().lines().nth(1).is_some() {
        out.push('…');
    }
    out
}
