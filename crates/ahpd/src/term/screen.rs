//! What may reach the terminal. Every piece of text that came from the model, a tool, a file
//! name or a subject goes through [`clean`] first, which shows each control character as
//! visible text: with no raw ESC, CSI, OSC or DCS byte left, no sequence of theirs can retitle
//! the window, write the clipboard, move the cursor or repaint a question. The client's own
//! styling is added afterwards, by [`Style`], and only when colour is wanted.

use std::io::IsTerminal;
use std::sync::OnceLock;

/// `--color`: when the client styles its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ColorChoice {
    /// On a terminal, unless `NO_COLOR` is set.
    #[default]
    Auto,
    /// Always, even through a pipe.
    Always,
    /// Never.
    Never,
}

static CHOICE: OnceLock<ColorChoice> = OnceLock::new();

/// Sets the colour choice for the rest of the command (the first call wins).
pub fn set_color(choice: ColorChoice) {
    let _ = CHOICE.set(choice);
}

fn wanted(is_terminal: bool) -> bool {
    match CHOICE.get().copied().unwrap_or_default() {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => {
            is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
    }
}

/// The visible form of one character that must not reach the terminal as it is, or `None`
/// for a character that may.
fn visible(c: char, keep_lines: bool) -> Option<String> {
    match c {
        '\n' | '\t' if keep_lines => None,
        '\n' => Some("⏎".into()),
        '\t' => Some("⇥".into()),
        // C0: caret notation, as `cat -v` shows it (ESC is `^[`, CR `^M`).
        '\u{0}'..='\u{1f}' => Some(format!("^{}", char::from(c as u8 + 0x40))),
        '\u{7f}' => Some("^?".into()),
        // C1 (CSI alone is U+009B) and the marks that reorder text on screen.
        '\u{80}'..='\u{9f}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}' => Some(format!("<U+{:04X}>", c as u32)),
        _ => None,
    }
}

fn clean_with(s: &str, keep_lines: bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        // A line ending written CRLF is a line ending.
        if c == '\r' && keep_lines && chars.peek() == Some(&'\n') {
            continue;
        }
        match visible(c, keep_lines) {
            Some(v) => out.push_str(&v),
            None => out.push(c),
        }
    }
    out
}

/// `s` with every control character but newline and tab shown as visible text.
pub fn clean(s: &str) -> String {
    clean_with(s, true)
}

/// `s` on one line: newlines and tabs are shown as visible marks too.
pub fn clean_line(s: &str) -> String {
    clean_with(s, false)
}

/// Whether `s` holds anything [`clean`] would change (a newline and tab aside).
pub fn has_controls(s: &str) -> bool {
    s.chars().any(|c| visible(c, true).is_some())
}

/// Terminal styling, on only where the colour choice wants it.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    color: bool,
}

impl Style {
    /// Styling for standard error.
    pub fn for_stderr() -> Style {
        Style {
            color: wanted(std::io::stderr().is_terminal()),
        }
    }

    /// Styling for standard output.
    pub fn for_stdout() -> Style {
        Style {
            color: wanted(std::io::stdout().is_terminal()),
        }
    }

    /// Styling that is never on.
    #[cfg(test)]
    pub fn plain() -> Style {
        Style { color: false }
    }

    /// Whether this style adds colour.
    pub fn is_colored(&self) -> bool {
        self.color
    }

    /// `text` (already clean) between the SGR codes `code` and a reset.
    pub fn wrap(&self, code: &str, text: &str) -> String {
        if self.color && !text.is_empty() {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
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

    /// Yellow text.
    pub fn yellow(&self, text: &str) -> String {
        self.wrap("33", text)
    }

    /// Cyan text.
    pub fn cyan(&self, text: &str) -> String {
        self.wrap("36", text)
    }

    /// Bold text.
    pub fn bold(&self, text: &str) -> String {
        self.wrap("1", text)
    }
}

/// The diff with added lines green and removed ones red; the text is cleaned first.
pub fn colored(diff: &str, style: Style) -> String {
    clean(diff)
        .lines()
        .map(|l| {
            if l.starts_with("+++") || l.starts_with("---") {
                style.bold(l)
            } else if l.starts_with('+') {
                style.green(l)
            } else if l.starts_with('-') {
                style.red(l)
            } else if l.starts_with("@@") {
                style.cyan(l)
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_escape_sequence_passes() {
        let hostile = "a\x1b]0;TITLE\x07b\x1b]52;c;SGVsbG8=\x07c\x1b[2J\x1bP1$q\x1b\\d\u{9b}31m";
        let out = clean(hostile);
        assert!(!out.contains('\x1b') && !out.contains('\x07') && !out.contains('\u{9b}'));
        assert_eq!(
            out,
            "a^[]0;TITLE^Gb^[]52;c;SGVsbG8=^Gc^[[2J^[P1$q^[\\d<U+009B>31m"
        );
    }

    #[test]
    fn a_carriage_return_is_shown_unless_it_ends_a_line() {
        assert_eq!(clean("one\r\ntwo\rthree\tx"), "one\ntwo^Mthree\tx");
        assert_eq!(clean_line("ls\nrm -rf ~\t"), "ls⏎rm -rf ~⇥");
        assert_eq!(clean("\u{202e}gnp.exe"), "<U+202E>gnp.exe");
        assert!(has_controls("a\rb") && !has_controls("a\nb\tc"));
    }
}
