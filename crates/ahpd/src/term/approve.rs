//! Approvals: what a waiting tool call asks, the diff an edit would make, and the question put
//! to the person at the terminal.

use std::io::{BufRead, Write};
use std::path::Path;

use ahp_types::actions::StateAction;
use ahp_types::state::{SessionInputRequest, ToolCallConfirmationState, ToolInput};
use serde_json::Value;

use super::conversation::Answer;
use super::render::{Style, one_line, text_of};

/// A tool call waiting for an answer.
#[derive(Debug, Clone)]
pub struct Ask {
    /// Its turn.
    pub turn: String,
    /// The call id.
    pub call: String,
    /// The tool's name.
    pub tool: String,
    /// What it acts on (a path, a command).
    pub subject: String,
    /// The tool input, when given inline.
    pub input: Option<Value>,
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
    let input = match &tc.tool_input {
        Some(ToolInput::Inline(text)) => serde_json::from_str(text).ok(),
        _ => None,
    };
    Some(Ask {
        turn: req.turn_id.clone(),
        call: tc.tool_call_id.clone(),
        tool: tc.tool_name.clone(),
        subject: one_line(text_of(&tc.invocation_message)),
        input,
    })
}

/// The answer's id of the approval an action ends, when it ends one.
pub fn settled(action: &StateAction) -> Option<&str> {
    match action {
        StateAction::SessionInputNeededRemoved(r) => Some(r.id.as_str()),
        _ => None,
    }
}

/// The unified diff an edit call would make in `dir`, when the call is an edit.
pub fn diff_of(ask: &Ask, dir: &Path) -> Option<String> {
    let input = ask.input.as_ref()?;
    let path = input.get("path")?.as_str()?;
    let file = dir.join(path);
    let before = std::fs::read_to_string(&file).unwrap_or_default();
    let after = match ask.tool.as_str() {
        "write_file" => input.get("content")?.as_str()?.to_owned(),
        "edit_file" => {
            let old = input.get("old")?.as_str()?;
            let new = input.get("new")?.as_str()?;
            let all = input.get("all").and_then(Value::as_bool).unwrap_or(false);
            if before.contains(old) {
                if all {
                    before.replace(old, new)
                } else {
                    before.replacen(old, new, 1)
                }
            } else {
                // The file differs from what the model saw: show the replacement itself.
                return Some(plain_diff(path, old, new));
            }
        }
        _ => return None,
    };
    let diff = similar::TextDiff::from_lines(&before, &after);
    Some(
        diff.unified_diff()
            .context_radius(3)
            .header(&format!("a/{path}"), &format!("b/{path}"))
            .to_string(),
    )
}

fn plain_diff(path: &str, old: &str, new: &str) -> String {
    let mut out = format!("--- a/{path}\n+++ b/{path}\n");
    for l in old.lines() {
        out.push_str(&format!("-{l}\n"));
    }
    for l in new.lines() {
        out.push_str(&format!("+{l}\n"));
    }
    out
}

/// The diff with added lines green and removed ones red.
pub fn colored(diff: &str, style: Style) -> String {
    diff.lines()
        .map(|l| {
            if l.starts_with("+++") || l.starts_with("---") {
                style.bold(l)
            } else if l.starts_with('+') {
                style.green(l)
            } else if l.starts_with('-') {
                style.red(l)
            } else if l.starts_with("@@") {
                style.dim(l)
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What the person is shown before the question.
pub fn describe(ask: &Ask, dir: &Path, style: Style) -> String {
    let mut out = format!(
        "{} {} {}",
        style.bold("approve?"),
        ask.tool,
        if ask.subject.is_empty() {
            ask.call.as_str()
        } else {
            ask.subject.as_str()
        }
    );
    if let Some(diff) = diff_of(ask, dir) {
        out.push('\n');
        out.push_str(&colored(diff.trim_end(), style));
    } else if ask.tool == "shell_exec"
        && let Some(cmd) = ask
            .input
            .as_ref()
            .and_then(|i| i.get("command"))
            .and_then(Value::as_str)
        && cmd.contains('\n')
    {
        out.push('\n');
        out.push_str(cmd);
    }
    out
}

/// The question's line.
pub const QUESTION: &str = "[y] yes once  [a] always this session  [n] no > ";

/// Reads an answer from a line: `y`, `a` or `n` (anything else is asked again: `None`).
pub fn parse_answer(line: &str) -> Option<Answer> {
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Some(Answer::Once),
        "a" | "always" => Some(Answer::Session),
        "n" | "no" => Some(Answer::Deny("The person declined this action.".into())),
        _ => None,
    }
}

/// Asks on standard error and reads standard input until an answer; end of input denies.
pub fn ask_blocking() -> Answer {
    let stdin = std::io::stdin();
    loop {
        eprint!("{QUESTION}");
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        match stdin.lock().read_line(&mut line) {
            Ok(0) | Err(_) => {
                return Answer::Deny("No answer came: standard input ended.".into());
            }
            Ok(_) => {
                if let Some(a) = parse_answer(&line) {
                    return a;
                }
            }
        }
    }
}

/// The sentence a call is denied with when nobody can be asked.
pub fn no_terminal_sentence(ask: &Ask) -> String {
    format!(
        "{} {} needs an approval and standard input is not a terminal, so it was denied (run with --yes to approve every call).",
        ask.tool, ask.subject
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ask(tool: &str, input: Value) -> Ask {
        Ask {
            turn: "t".into(),
            call: "c".into(),
            tool: tool.into(),
            subject: "a.txt".into(),
            input: Some(input),
        }
    }

    #[test]
    fn answers_are_read_from_a_letter_or_a_word() {
        assert_eq!(parse_answer(" Y\n"), Some(Answer::Once));
        assert_eq!(parse_answer("always"), Some(Answer::Session));
        assert!(matches!(parse_answer("n"), Some(Answer::Deny(_))));
        assert_eq!(parse_answer("maybe"), None);
    }

    #[test]
    fn an_edit_shows_the_lines_it_changes_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\nhello\nthree\n").unwrap();
        let edit = ask(
            "edit_file",
            json!({ "path": "a.txt", "old": "hello", "new": "goodbye" }),
        );
        let diff = diff_of(&edit, dir.path()).unwrap();
        assert!(diff.contains("-hello\n+goodbye\n"), "{diff}");
        assert!(diff.contains(" one\n"), "{diff}");
        // Text the file no longer holds: the replacement itself.
        let stale = ask(
            "edit_file",
            json!({ "path": "a.txt", "old": "absent", "new": "x" }),
        );
        assert_eq!(
            diff_of(&stale, dir.path()).unwrap(),
            "--- a/a.txt\n+++ b/a.txt\n-absent\n+x\n"
        );
        let write = ask(
            "write_file",
            json!({ "path": "new.txt", "content": "fresh\n" }),
        );
        assert!(diff_of(&write, dir.path()).unwrap().contains("+fresh\n"));
        assert!(diff_of(&ask("read_file", json!({ "path": "a.txt" })), dir.path()).is_none());
    }
}
