//! Approvals: what a waiting tool call will do, shown whole (the command with every line and its
//! control characters visible, other inputs as formatted JSON, an edit as the diff the host
//! previews), folded past a screenful with `v` to see the rest, and the answer read back.

use std::path::Path;

use ahp_types::actions::StateAction;
use ahp_types::state::{
    ConfirmationOptionKind, ContentRef, FileEdit, SessionInputRequest, ToolCallConfirmationState,
    ToolCallRiskAssessment, ToolInput,
};
use serde_json::Value;

use super::Conn;
use super::conversation::Answer;
use super::render::text_of;
use super::screen::{Style, clean, clean_line};

/// Lines of a tool's input shown before the rest is folded behind `v`.
const SHOWN_LINES: usize = 40;

/// A tool call waiting for an answer.
#[derive(Debug, Clone)]
pub struct Ask {
    /// Its turn.
    pub turn: String,
    /// The call id.
    pub call: String,
    /// The tool's name.
    pub tool: String,
    /// What the call says it does (raw; cleaned when shown).
    pub subject: String,
    /// The host's title for the question.
    pub title: Option<String>,
    /// The tool input, when given inline (raw text: a command, or JSON).
    pub input: Option<String>,
    /// The tool input's URI, when the host gives it by reference.
    pub input_ref: Option<String>,
    /// Why the host asks, when it says.
    pub risk: Option<String>,
    /// What "always" would allow, as the host words its session option.
    pub scope: Option<String>,
    /// Whether the host offers "always" at all.
    pub offers_always: bool,
    /// The file edits the host previews.
    pub edits: Vec<FileEdit>,
    /// Those edits as diffs, once read (see [`load_previews`]).
    pub previews: Vec<String>,
}

/// The approval `action` asks of the chat `chat`, if it asks one.
pub fn ask_of(action: &StateAction, chat: &str) -> Option<Ask> {
    let StateAction::SessionInputNeededSet(set) = action else {
        return None;
    };
    let SessionInputRequest::ToolConfirmation(req) = &set.request else {
        return None;
    };
    if req.chat != chat {
        return None;
    }
    let ToolCallConfirmationState::PendingConfirmation(tc) = &req.tool_call else {
        return None;
    };
    let (input, input_ref) = match &tc.tool_input {
        Some(ToolInput::Inline(text)) => (Some(text.clone()), None),
        Some(ToolInput::ContentRef(r)) => (None, Some(r.uri.clone())),
        None => (None, None),
    };
    let session_option = tc
        .options
        .as_ref()
        .and_then(|o| o.iter().find(|o| o.id == "allow-session"));
    let risk = tc.risk_assessment.as_ref().and_then(|r| match r {
        ToolCallRiskAssessment::Complete(c) => Some(text_of(&c.reason).to_owned()),
        _ => None,
    });
    Some(Ask {
        turn: req.turn_id.clone(),
        call: tc.tool_call_id.clone(),
        tool: tc.tool_name.clone(),
        subject: text_of(&tc.invocation_message).to_owned(),
        title: tc
            .confirmation_title
            .as_ref()
            .map(|t| text_of(t).to_owned()),
        input,
        input_ref,
        risk,
        scope: session_option.map(|o| o.label.clone()),
        // A host that lists its options and leaves the session one out does not offer it.
        offers_always: tc.options.as_ref().is_none_or(|o| {
            o.iter()
                .any(|o| o.id == "allow-session" && o.kind == ConfirmationOptionKind::Approve)
        }),
        edits: tc
            .edits
            .as_ref()
            .map(|e| e.items.clone())
            .unwrap_or_default(),
        previews: Vec::new(),
    })
}

/// The answer's id of the approval an action ends, when it ends one.
pub fn settled(action: &StateAction) -> Option<&str> {
    match action {
        StateAction::SessionInputNeededRemoved(r) => Some(r.id.as_str()),
        _ => None,
    }
}

/// Reads the content a side of an edit refers to: inline `data:` URIs here, anything else
/// from the host.
async fn content(conn: &Conn, session: &str, r: &ContentRef) -> Result<String, String> {
    use base64::Engine as _;
    if let Some(rest) = r.uri.strip_prefix("data:") {
        let (head, data) = rest.split_once(',').ok_or("a data URI without a comma")?;
        let bytes = if head.ends_with(";base64") {
            base64::engine::general_purpose::STANDARD
                .decode(data)
                .map_err(|e| e.to_string())?
        } else {
            percent_encoding::percent_decode_str(data).collect()
        };
        return String::from_utf8(bytes).map_err(|_| "the content is not text".to_owned());
    }
    let read: ahp_types::commands::ResourceReadResult = conn
        .client
        .request(
            "resourceRead",
            serde_json::json!({ "channel": session, "uri": r.uri, "encoding": "utf-8" }),
        )
        .await
        .map_err(|e| e.to_string())?;
    match read.encoding {
        ahp_types::commands::ContentEncoding::Utf8 => Ok(read.data),
        ahp_types::commands::ContentEncoding::Base64 => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(read.data)
                .map_err(|e| e.to_string())?;
            String::from_utf8(bytes).map_err(|_| "the content is not text".to_owned())
        }
    }
}

/// A file's URI as the person reads it: relative to `dir` when inside it.
pub fn shown_path(uri: &str, dir: &Path) -> String {
    match ahpd_sdk::util::path_of(uri) {
        Some(p) => p
            .strip_prefix(dir)
            .map(|r| r.display().to_string())
            .unwrap_or_else(|_| p.display().to_string()),
        None => uri.to_owned(),
    }
}

/// The diff of one edit, `before` and `after` read from where the host put them.
pub async fn diff_of_edit(conn: &Conn, session: &str, edit: &FileEdit, dir: &Path) -> String {
    let side = |s: &Option<ahp_types::state::FileEditSide>| s.as_ref().map(|s| s.uri.clone());
    let name = side(&edit.after)
        .or_else(|| side(&edit.before))
        .map(|u| shown_path(&u, dir))
        .unwrap_or_else(|| "(a file)".into());
    let before = match &edit.before {
        Some(s) => match content(conn, session, &s.content).await {
            Ok(t) => Some(t),
            Err(e) => return format!("{name}: the preview cannot be read ({e})"),
        },
        None => None,
    };
    let after = match &edit.after {
        Some(s) => match content(conn, session, &s.content).await {
            Ok(t) => Some(t),
            Err(e) => return format!("{name}: the preview cannot be read ({e})"),
        },
        None => None,
    };
    let what = match (&before, &after) {
        (None, Some(a)) => format!("{name}: new file, {} bytes", a.len()),
        (Some(b), None) => format!("{name}: deleted ({} bytes)", b.len()),
        (Some(b), Some(a)) => format!("{name}: {} bytes, was {}", a.len(), b.len()),
        (None, None) => format!("{name}: no content given"),
    };
    let before = before.unwrap_or_default();
    let after = after.unwrap_or_default();
    let diff = similar::TextDiff::from_lines(&before, &after);
    let body = diff
        .unified_diff()
        .context_radius(3)
        .header(&format!("a/{name}"), &format!("b/{name}"))
        .to_string();
    format!("{what}\n{body}")
}

/// Reads the diffs of the edits `ask` previews.
pub async fn load_previews(conn: &Conn, session: &str, ask: &mut Ask, dir: &Path) {
    let mut previews = Vec::new();
    for edit in &ask.edits {
        previews.push(diff_of_edit(conn, session, edit, dir).await);
    }
    ask.previews = previews;
}

/// Whether the tool's input is a command line rather than JSON.
fn is_command(ask: &Ask) -> bool {
    ask.tool == "shell_exec"
        || ask
            .input
            .as_deref()
            .is_some_and(|i| serde_json::from_str::<Value>(i).is_err())
}

/// The lines of the body shown under the heading: the command, the input as JSON, the diffs.
fn body_lines(ask: &Ask, style: Style) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(input) = &ask.input {
        if is_command(ask) {
            let n = input.lines().count().max(1);
            lines.push(style.dim(&format!(
                "command ({n} line{}, {} characters):",
                if n == 1 { "" } else { "s" },
                input.chars().count()
            )));
            // Each line behind a bar, so leading spaces and an empty line show where they are.
            for l in clean(input).split('\n') {
                lines.push(format!("{} {l}", style.dim("│")));
            }
        } else if ask.previews.is_empty() {
            let shown = match serde_json::from_str::<Value>(input) {
                Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_else(|_| input.clone()),
                Err(_) => input.clone(),
            };
            lines.push(style.dim("input:"));
            for l in clean(&shown).split('\n') {
                lines.push(format!("{} {l}", style.dim("│")));
            }
        }
    } else if let Some(uri) = &ask.input_ref {
        lines.push(style.dim(&format!("input: at {}", clean_line(uri))));
    }
    for p in &ask.previews {
        lines.extend(
            super::screen::colored(p.trim_end(), style)
                .lines()
                .map(str::to_owned),
        );
    }
    lines
}

/// What the person is shown before the question: the heading and the body, folded after
/// [`SHOWN_LINES`] lines. The second value is the whole body, when some of it was folded.
pub fn describe(ask: &Ask, style: Style) -> (String, Option<String>) {
    let title = ask
        .title
        .clone()
        .unwrap_or_else(|| format!("Run {}?", ask.tool));
    let mut out = format!(
        "{} {} {}",
        style.bold("approve?"),
        style.bold(&clean_line(&ask.tool)),
        clean_line(&title)
    );
    let subject = clean_line(&ask.subject);
    if !subject.is_empty() && ask.input.as_deref() != Some(ask.subject.as_str()) {
        out.push_str(&format!("\n{} {subject}", style.dim("what:")));
    }
    if let Some(risk) = &ask.risk {
        out.push_str(&format!("\n{} {}", style.yellow("risk:"), clean_line(risk)));
    }
    let body = body_lines(ask, style);
    let folded = body.len() > SHOWN_LINES + 2;
    let shown = if folded {
        &body[..SHOWN_LINES]
    } else {
        &body[..]
    };
    for l in shown {
        out.push('\n');
        out.push_str(l);
    }
    if folded {
        let hidden = body.len() - SHOWN_LINES;
        out.push_str(&format!(
            "\n{}",
            style.yellow(&format!(
                "… {hidden} more lines not shown: v shows everything before you answer"
            ))
        ));
        return (out, Some(body.join("\n")));
    }
    (out, None)
}

/// The question's line, naming the scope "always" would store.
pub fn question(ask: &Ask, folded: bool) -> String {
    let mut q = String::from("[y] yes once  ");
    if ask.offers_always {
        // The host words its option "Allow … for this session"; it reads as the key's meaning.
        let scope = match ask.scope.as_deref().map(clean_line) {
            Some(label) => {
                let mut chars = label.chars();
                chars
                    .next()
                    .map(|c| c.to_lowercase().chain(chars).collect())
                    .unwrap_or_default()
            }
            None => format!("allow {} for this session", clean_line(&ask.tool)),
        };
        q.push_str(&format!("[a] {scope}  "));
    }
    q.push_str("[n] no");
    if folded {
        q.push_str("  [v] view all");
    }
    q.push_str(" > ");
    q
}

/// What a typed line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The answer.
    Answer(Answer),
    /// No: a reason follows on the next line.
    No,
    /// Show the folded part.
    View,
}

/// Reads a reply from a line (`None`: not one, ask again).
pub fn parse_reply(line: &str, offers_always: bool) -> Option<Reply> {
    let line = line.trim();
    let (word, rest) = match line.split_once(char::is_whitespace) {
        Some((w, r)) => (w, r.trim()),
        None => (line, ""),
    };
    match word.to_ascii_lowercase().as_str() {
        "y" | "yes" if rest.is_empty() => Some(Reply::Answer(Answer::Once)),
        "a" | "always" if rest.is_empty() && offers_always => Some(Reply::Answer(Answer::Session)),
        "n" | "no" if rest.is_empty() => Some(Reply::No),
        // `n` and a reason on one line.
        "n" | "no" => Some(Reply::Answer(Answer::Deny(Some(rest.to_owned())))),
        "v" | "view" if rest.is_empty() => Some(Reply::View),
        _ => None,
    }
}

/// The line asking why, after a bare `n`.
pub const REASON: &str = "why? (the model reads it; Enter for no reason) > ";

/// A reason typed after `n`: empty says none.
pub fn reason_of(line: &str) -> Answer {
    let line = line.trim();
    Answer::Deny((!line.is_empty()).then(|| line.to_owned()))
}

/// The sentence a call is denied with when nobody can be asked.
pub fn no_terminal_sentence(ask: &Ask) -> String {
    format!(
        "{} needs an approval and standard input is not a terminal, so it was denied (run with --yes to approve every call).",
        clean_line(&ask.tool)
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ask(tool: &str, input: &str) -> Ask {
        Ask {
            turn: "t".into(),
            call: "c".into(),
            tool: tool.into(),
            subject: input.into(),
            title: None,
            input: Some(input.into()),
            input_ref: None,
            risk: None,
            scope: Some(
                "Allow shell_exec commands starting with \"git status\" for this session".into(),
            ),
            offers_always: true,
            edits: Vec::new(),
            previews: Vec::new(),
        }
    }

    #[test]
    fn replies_are_read_from_a_letter_or_a_word() {
        assert_eq!(parse_reply(" Y\n", true), Some(Reply::Answer(Answer::Once)));
        assert_eq!(
            parse_reply("always", true),
            Some(Reply::Answer(Answer::Session))
        );
        assert_eq!(parse_reply("a", false), None);
        assert_eq!(parse_reply("n", true), Some(Reply::No));
        assert_eq!(
            parse_reply("n not that file", true),
            Some(Reply::Answer(Answer::Deny(Some("not that file".into()))))
        );
        assert_eq!(parse_reply("maybe", true), None);
        assert_eq!(reason_of("  "), Answer::Deny(None));
    }

    #[test]
    fn a_command_is_shown_whole_with_its_controls_visible() {
        let long = format!("ls{}; touch PWNED", " ".repeat(150));
        let (text, folded) = describe(&ask("shell_exec", &long), Style::plain());
        assert!(text.contains("; touch PWNED"), "{text}");
        assert!(folded.is_none());
        let (text, _) = describe(
            &ask("shell_exec", "ls\rrm -rf ~/x\x1b[K\x1b]0;t\x07\nsecond"),
            Style::plain(),
        );
        assert!(
            text.contains("│ ls^Mrm -rf ~/x^[[K^[]0;t^G\n│ second"),
            "{text}"
        );
        assert!(!text.contains('\x1b'));
        let mcp = ask("mcp__x__create", r#"{"title":"t","body":"SECRET\nEXFIL"}"#);
        let (text, _) = describe(&mcp, Style::plain());
        assert!(text.contains("\"body\": \"SECRET\\nEXFIL\""), "{text}");
    }

    #[test]
    fn a_long_input_is_folded_and_says_so() {
        let many: String = (0..100).map(|i| format!("echo {i}\n")).collect();
        let a = ask("shell_exec", &many);
        let (text, all) = describe(&a, Style::plain());
        assert!(
            text.contains("more lines not shown: v shows everything"),
            "{text}"
        );
        assert!(!text.contains("echo 99"));
        assert!(all.unwrap().contains("echo 99"));
        assert!(question(&a, true).contains("[v] view all"));
        assert!(question(&a, false).contains(
            "[a] allow shell_exec commands starting with \"git status\" for this session"
        ));
    }
}
