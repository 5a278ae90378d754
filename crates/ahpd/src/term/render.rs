//! What a person sees: the reply on standard output as it streams, one line per tool call on
//! standard error, reasoning dimmed there when asked for, and the turn's tokens and cost. With
//! `--json`, every action of the session and its chat instead, one envelope per line.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};

use ahp_types::actions::{ActionEnvelope, StateAction};
use ahp_types::common::StringOrMarkdown;
use ahp_types::state::{PendingMessageKind, ResponsePart, ToolCallResult, UsageInfo};
use serde_json::Value;

/// Text of a plain or Markdown string.
pub fn text_of(s: &StringOrMarkdown) -> &str {
    match s {
        StringOrMarkdown::Plain(t) => t,
        StringOrMarkdown::Markdown { markdown, .. } => markdown,
    }
}

/// Terminal styling, on only for a terminal and without `NO_COLOR`.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    color: bool,
}

impl Style {
    /// Styling for standard error.
    pub fn for_stderr() -> Style {
        Style {
            color: std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    fn wrap(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// Styling for standard output.
    pub fn for_stdout() -> Style {
        Style {
            color: std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
        }
    }

    /// Dimmed text.
    pub fn dim(&self, text: &str) -> String {
        self.wrap("2", text)
    }

    /// Red text.
    pub fn red(&self, text: &str) -> String {
        self.wrap("31", text)
    }

    /// Green text.
    pub fn green(&self, text: &str) -> String {
        self.wrap("32", text)
    }

    /// Bold text.
    pub fn bold(&self, text: &str) -> String {
        self.wrap("1", text)
    }
}

#[derive(Debug, Default, Clone)]
struct Call {
    name: String,
    subject: String,
}

/// Prints a chat's actions.
pub struct Printer {
    json: bool,
    show_reasoning: bool,
    /// The style of standard error.
    pub style: Style,
    calls: HashMap<String, Call>,
    /// Whether standard output holds a reply line not yet ended.
    reply_open: bool,
    /// Whether standard error holds reasoning not yet ended.
    reasoning_open: bool,
    usage: Option<UsageInfo>,
}

impl Printer {
    /// A printer for text (`json` false) or JSON lines.
    pub fn new(json: bool, show_reasoning: bool) -> Printer {
        Printer {
            json,
            show_reasoning,
            style: Style::for_stderr(),
            calls: HashMap::new(),
            reply_open: false,
            reasoning_open: false,
            usage: None,
        }
    }

    /// Forgets the last turn's usage.
    pub fn reset(&mut self) {
        self.usage = None;
    }

    /// Ends any open reply or reasoning line, so a line of its own can follow.
    pub fn break_line(&mut self) {
        if self.reply_open {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out);
            let _ = out.flush();
            self.reply_open = false;
        }
        if self.reasoning_open {
            eprintln!();
            self.reasoning_open = false;
        }
    }

    /// One line on standard error, after any open line. Nothing in JSON mode.
    pub fn note(&mut self, line: &str) {
        if self.json {
            return;
        }
        self.break_line();
        eprintln!("{line}");
    }

    /// One line on standard error in either mode: what a script's caller should read too.
    pub fn warn(&mut self, line: &str) {
        self.break_line();
        eprintln!("{line}");
    }

    fn reply(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.reasoning_open {
            eprintln!();
            self.reasoning_open = false;
        }
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
        self.reply_open = !text.ends_with('\n');
    }

    fn reasoning(&mut self, text: &str) {
        if !self.show_reasoning || text.is_empty() {
            return;
        }
        if self.reply_open {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out);
            let _ = out.flush();
            self.reply_open = false;
        }
        eprint!("{}", self.style.dim(text));
        self.reasoning_open = !text.ends_with('\n');
    }

    /// Prints one envelope.
    pub fn show(&mut self, env: &ActionEnvelope) {
        if self.json {
            let mut out = std::io::stdout().lock();
            let _ = serde_json::to_writer(&mut out, env);
            let _ = writeln!(out);
            let _ = out.flush();
            return;
        }
        if let Some(why) = &env.rejection_reason {
            self.note(&format!("ahpd: the host refused an action: {why}"));
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
                        name: a.tool_name.clone(),
                        subject: String::new(),
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
            }
            StateAction::ChatUsage(a) => self.usage = Some(a.usage.clone()),
            StateAction::ChatPendingMessageSet(a) if a.kind == PendingMessageKind::Steering => {
                let line = format!("(steering: {})", one_line(&a.message.text));
                self.note(&self.style.dim(&line));
            }
            StateAction::ChatError(a) => {
                let line = format!("ahpd: the turn failed: {}", one_line(&a.part.error.message));
                self.note(&self.style.red(&line));
            }
            _ => {}
        }
    }

    fn call(&self, id: &str) -> Call {
        self.calls.get(id).cloned().unwrap_or_else(|| Call {
            name: "tool".into(),
            subject: id.to_owned(),
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
        let u = self.usage.as_ref()?;
        let mut parts = vec![format!(
            "{} tokens in, {} out",
            u.input_tokens.unwrap_or(0),
            u.output_tokens.unwrap_or(0)
        )];
        if let Some(cached) = u.cache_read_tokens.filter(|c| *c > 0) {
            parts.push(format!("{cached} cached"));
        }
        let cost = u
            .meta
            .as_ref()
            .and_then(|m| m.get("ahpd.cost"))
            .and_then(|c| c.get("amount"))
            .and_then(Value::as_f64);
        parts.push(match cost {
            Some(c) => format!("${c:.4}"),
            None => "cost unknown".into(),
        });
        if let Some(model) = &u.model {
            parts.push(model.clone());
        }
        Some(parts.join(" · "))
    }
}

/// The first line of `s`, shortened to 100 characters.
pub fn one_line(s: &str) -> String {
    let first = s.lines().next().unwrap_or("").trim();
    let mut out: String = first.chars().take(100).collect();
    if first.chars().count() > 100 || s.trim().lines().nth(1).is_some() {
        out.push('…');
    }
    out
}
