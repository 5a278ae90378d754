//! Moving a leading `<think>…</think>` block out of a reply's text, for servers that put the
//! reasoning inside `content` (llama.cpp, Ollama and others with some models).
//!
//! [`ThinkSplitter`] works on streamed fragments (tags may be split anywhere); [`split_think`]
//! is the same rule on a whole text, and the two agree for a closed block.

const OPEN: &str = "<think>";
const CLOSE: &str = "</think>";

/// A piece of content after splitting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Reply text.
    Text(String),
    /// Reasoning.
    Reasoning(String),
}

#[derive(Debug)]
enum State {
    /// Only whitespace, or whitespace and a beginning of `<think>`, has arrived (held).
    Undecided,
    /// Inside the block; `held` may end with the start of a closing tag.
    Inside,
    /// The block closed; whitespace is still being dropped.
    AfterBlock,
    /// Everything is text from here on.
    Text,
}

/// The streaming splitter. Never emits an empty piece.
#[derive(Debug)]
pub struct ThinkSplitter {
    state: State,
    held: String,
}

impl Default for ThinkSplitter {
    fn default() -> Self {
        Self::new()
    }
}

impl ThinkSplitter {
    /// A splitter at the start of a reply.
    pub fn new() -> Self {
        ThinkSplitter {
            state: State::Undecided,
            held: String::new(),
        }
    }

    /// Turns the splitter off (the server sends reasoning in a field of its own): anything held
    /// is released as text and every later fragment is text.
    pub fn turn_off(&mut self, out: &mut impl FnMut(Piece)) {
        if matches!(self.state, State::Undecided) {
            emit_text(std::mem::take(&mut self.held), out);
        } else if matches!(self.state, State::Inside) {
            // Already inside a block: what it holds is reasoning that has not been released yet.
            emit_reasoning(std::mem::take(&mut self.held), out);
        }
        self.state = State::Text;
    }

    /// Feeds one fragment of `content`.
    pub fn push(&mut self, fragment: &str, out: &mut impl FnMut(Piece)) {
        let mut rest: &str = fragment;
        // Each state either consumes `rest` or moves on with what is left of it.
        loop {
            match self.state {
                State::Text => {
                    emit_text(rest.to_owned(), out);
                    return;
                }
                State::AfterBlock => {
                    let trimmed = rest.trim_start();
                    if trimmed.is_empty() {
                        return;
                    }
                    self.state = State::Text;
                    rest = trimmed;
                }
                State::Undecided => {
                    self.held.push_str(rest);
                    let start = self.held.trim_start();
                    if start.is_empty() || OPEN.starts_with(start) {
                        return;
                    }
                    if let Some(after) = start.strip_prefix(OPEN) {
                        let after = after.to_owned();
                        self.held.clear();
                        self.state = State::Inside;
                        return self.push_owned(after, out);
                    }
                    self.state = State::Text;
                    emit_text(std::mem::take(&mut self.held), out);
                    return;
                }
                State::Inside => {
                    self.held.push_str(rest);
                    if let Some(at) = self.held.find(CLOSE) {
                        let after = self.held[at + CLOSE.len()..].to_owned();
                        self.held.truncate(at);
                        emit_reasoning(std::mem::take(&mut self.held), out);
                        self.state = State::AfterBlock;
                        return self.push_owned(after, out);
                    }
                    // Hold back the longest tail that could begin the closing tag.
                    let keep = partial_suffix(&self.held, CLOSE);
                    let release = self.held.len() - keep;
                    if release > 0 {
                        let tail = self.held.split_off(release);
                        emit_reasoning(std::mem::replace(&mut self.held, tail), out);
                    }
                    return;
                }
            }
        }
    }

    fn push_owned(&mut self, rest: String, out: &mut impl FnMut(Piece)) {
        if !rest.is_empty() {
            self.push(&rest, out);
        }
    }

    /// Ends the reply: held content goes out as reasoning inside an unclosed block, else as text.
    pub fn finish(mut self, out: &mut impl FnMut(Piece)) {
        let held = std::mem::take(&mut self.held);
        match self.state {
            State::Inside => emit_reasoning(held, out),
            _ => emit_text(held, out),
        }
    }
}

fn emit_text(text: String, out: &mut impl FnMut(Piece)) {
    if !text.is_empty() {
        out(Piece::Text(text));
    }
}

fn emit_reasoning(text: String, out: &mut impl FnMut(Piece)) {
    if !text.is_empty() {
        out(Piece::Reasoning(text));
    }
}

/// The length of the longest proper suffix of `text` that is a prefix of `tag`.
fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| {
            text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

/// The whole-text rule: a leading `<think>…</think>` block (whitespace before it allowed) becomes
/// the reasoning and the whitespace after it is dropped. Returns `(reasoning, text)`; an unclosed
/// block, or none, leaves the text as it is.
pub fn split_think(content: &str) -> (Option<String>, String) {
    let start = content.trim_start();
    if let Some(inner) = start.strip_prefix(OPEN)
        && let Some(end) = inner.find(CLOSE)
    {
        let reasoning = &inner[..end];
        let text = inner[end + CLOSE.len()..].trim_start();
        let reasoning = (!reasoning.is_empty()).then(|| reasoning.to_owned());
        return (reasoning, text.to_owned());
    }
    (None, content.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(fragments: &[&str]) -> Vec<Piece> {
        let mut s = ThinkSplitter::new();
        let mut out = Vec::new();
        for f in fragments {
            s.push(f, &mut |p| out.push(p));
        }
        s.finish(&mut |p| out.push(p));
        out
    }

    fn joined(pieces: &[Piece]) -> (String, String) {
        let mut r = String::new();
        let mut t = String::new();
        for p in pieces {
            match p {
                Piece::Reasoning(x) => r.push_str(x),
                Piece::Text(x) => t.push_str(x),
            }
        }
        (r, t)
    }

    #[test]
    fn tags_split_across_fragments() {
        let out = run(&["<thi", "nk>plan", " more</thi", "nk>", "\n\n", "answer"]);
        assert_eq!(
            out,
            [
                Piece::Reasoning("plan".into()),
                Piece::Reasoning(" more".into()),
                Piece::Text("answer".into())
            ]
        );
        let whole = "<think>plan more</think>\n\nanswer";
        let (r, t) = split_think(whole);
        assert_eq!((r.unwrap_or_default(), t), joined(&out));
    }

    #[test]
    fn open_and_close_in_one_fragment() {
        assert_eq!(
            run(&["  <think>x</think>  y"]),
            [Piece::Reasoning("x".into()), Piece::Text("y".into())]
        );
    }

    #[test]
    fn a_tag_that_stops_matching_is_text_with_its_whitespace() {
        assert_eq!(
            run(&[" <th", "ead>row"]),
            [Piece::Text(" <thead>row".into())]
        );
        assert_eq!(split_think(" <thead>row"), (None, " <thead>row".into()));
    }

    #[test]
    fn undecided_content_is_flushed_as_text_at_the_end() {
        assert_eq!(run(&["\n", "<thin"]), [Piece::Text("\n<thin".into())]);
        assert!(run(&["", ""]).is_empty());
    }

    #[test]
    fn unclosed_block_is_flushed_as_reasoning() {
        assert_eq!(
            run(&["<think>abc</th"]),
            [
                Piece::Reasoning("abc".into()),
                Piece::Reasoning("</th".into())
            ]
        );
        assert_eq!(split_think("<think>abc"), (None, "<think>abc".into()));
    }

    #[test]
    fn later_think_tags_are_plain_text() {
        assert_eq!(
            run(&["hi <think>x</think>"]),
            [Piece::Text("hi <think>x</think>".into())]
        );
    }

    #[test]
    fn turning_off_releases_what_is_held() {
        let mut s = ThinkSplitter::new();
        let mut out = Vec::new();
        s.push(" <thi", &mut |p| out.push(p));
        s.turn_off(&mut |p| out.push(p));
        s.push("<think>", &mut |p| out.push(p));
        assert_eq!(
            out,
            [Piece::Text(" <thi".into()), Piece::Text("<think>".into())]
        );
    }

    #[test]
    fn multibyte_text_near_a_partial_tag() {
        let out = run(&["<think>é<", "/think>ü"]);
        assert_eq!(out, [Piece::Reasoning("é".into()), Piece::Text("ü".into())]);
    }
}
