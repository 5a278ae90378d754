//! The reply's Markdown drawn for a terminal: headings, emphasis, lists, quotes, tables and
//! framed code blocks, a line at a time as the reply streams (a code block or a table once
//! it is whole). Through a pipe, or without colour, the text passes as it came.
//!
//! The text given is already clean (see `screen`); the only escape codes in the output are the
//! ones added here.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// A reply being drawn.
pub struct Stream {
    on: bool,
    /// Whole lines of the block not yet drawn.
    block: String,
    /// The line being written.
    partial: String,
    /// The fence of the open code block, if one is open.
    fence: Option<String>,
    /// Whether something was drawn already.
    drawn: bool,
    /// Whether the source had a blank line since: the next line is set off by one.
    gap: bool,
}

fn fence_of(line: &str) -> Option<String> {
    let t = line.trim_start();
    if t.len() + 3 < line.len() {
        return None;
    }
    let c = t.chars().next()?;
    if c != '`' && c != '~' {
        return None;
    }
    let n = t.chars().take_while(|x| *x == c).count();
    (n >= 3).then(|| c.to_string().repeat(n))
}

impl Stream {
    /// A stream that draws (`on`) or passes text through.
    pub fn new(on: bool) -> Stream {
        Stream {
            on,
            block: String::new(),
            partial: String::new(),
            fence: None,
            drawn: false,
            gap: false,
        }
    }

    /// Draws Markdown: set off by a blank line when the source had one before it.
    fn draw(&mut self, md: &str, out: &mut String) {
        let r = render(md);
        let r = r.trim_end_matches('\n');
        if r.is_empty() {
            return;
        }
        if self.drawn && self.gap {
            out.push('\n');
        }
        self.gap = false;
        out.push_str(r);
        out.push('\n');
        self.drawn = true;
    }

    /// Draws the table being gathered, if one is.
    fn flush_block(&mut self, out: &mut String) {
        let block = std::mem::take(&mut self.block);
        self.draw(&block, out);
    }

    /// Takes more of the reply; returns what can be shown now. A line is drawn as soon as it
    /// ends, except inside a code fence or a table, which are drawn whole.
    pub fn push(&mut self, text: &str) -> String {
        if !self.on {
            return text.to_owned();
        }
        let mut out = String::new();
        self.partial.push_str(text);
        while let Some(at) = self.partial.find('\n') {
            let line: String = self.partial.drain(..=at).collect();
            let body = line.trim_end_matches('\n');
            match &self.fence {
                Some(f) => {
                    let closes = body.trim_start().starts_with(f.as_str())
                        && body.trim().chars().all(|c| f.starts_with(c));
                    self.block.push_str(&line);
                    if closes {
                        self.fence = None;
                        self.flush_block(&mut out);
                    }
                }
                None => {
                    if let Some(f) = fence_of(body) {
                        self.flush_block(&mut out);
                        self.fence = Some(f);
                        self.block.push_str(&line);
                    } else if body.trim().is_empty() {
                        self.flush_block(&mut out);
                        self.gap = true;
                    } else if body.trim_start().starts_with('|') {
                        self.block.push_str(&line);
                    } else {
                        self.flush_block(&mut out);
                        self.draw(&line, &mut out);
                    }
                }
            }
        }
        out
    }

    /// The rest, at the reply's end.
    pub fn finish(&mut self) -> String {
        if !self.on {
            return String::new();
        }
        let mut rest = std::mem::take(&mut self.block);
        rest.push_str(&std::mem::take(&mut self.partial));
        self.fence = None;
        let mut out = String::new();
        self.draw(&rest, &mut out);
        out
    }
}

/// What wraps the lines of the blocks open around the text being written.
#[derive(Debug, Clone)]
enum Frame {
    Quote,
    Item(usize),
    Code,
}

struct Writer {
    out: String,
    frames: Vec<Frame>,
    at_line_start: bool,
    lists: Vec<Option<u64>>,
    /// Whether the item's first line still waits for its bullet.
    bullet: Option<String>,
    link: Option<String>,
    table_cell: usize,
}

impl Writer {
    fn prefix(&mut self) {
        let mut p = String::new();
        for f in &self.frames {
            match f {
                Frame::Quote => p.push_str("\x1b[2m│\x1b[22m "),
                Frame::Item(w) => p.push_str(&" ".repeat(*w)),
                Frame::Code => p.push_str("\x1b[2m│\x1b[22m "),
            }
        }
        if let Some(b) = self.bullet.take() {
            // The bullet takes the place of the item's own indent.
            let w = match self.frames.last() {
                Some(Frame::Item(w)) => *w,
                _ => 0,
            };
            p.truncate(p.len().saturating_sub(w));
            p.push_str(&b);
        }
        self.out.push_str(&p);
    }

    fn text(&mut self, t: &str) {
        let pieces: Vec<&str> = t.split('\n').collect();
        let last = pieces.len() - 1;
        for (i, piece) in pieces.into_iter().enumerate() {
            if i > 0 {
                self.newline();
            }
            if piece.is_empty() {
                // An empty line inside a code block keeps the frame's bar.
                if i < last && self.at_line_start && matches!(self.frames.last(), Some(Frame::Code))
                {
                    self.prefix();
                    self.at_line_start = false;
                }
                continue;
            }
            if self.at_line_start {
                self.prefix();
                self.at_line_start = false;
            }
            self.out.push_str(piece);
        }
    }

    fn newline(&mut self) {
        if self.at_line_start && self.bullet.is_some() {
            self.prefix();
        }
        self.out.push('\n');
        self.at_line_start = true;
    }

    fn end_line(&mut self) {
        if !self.at_line_start {
            self.newline();
        }
    }

    fn blank(&mut self) {
        self.end_line();
        if !self.out.ends_with("\n\n") && !self.out.is_empty() && self.lists.is_empty() {
            self.out.push('\n');
        }
    }

    fn style(&mut self, code: &str) {
        if self.at_line_start {
            self.prefix();
            self.at_line_start = false;
        }
        self.out.push_str(&format!("\x1b[{code}m"));
    }
}

/// One or more whole blocks of Markdown as terminal text.
pub fn render(md: &str) -> String {
    if md.trim().is_empty() {
        return String::new();
    }
    let mut w = Writer {
        out: String::new(),
        frames: Vec::new(),
        at_line_start: true,
        lists: Vec::new(),
        bullet: None,
        link: None,
        table_cell: 0,
    };
    let options =
        Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES | Options::ENABLE_TASKLISTS;
    for ev in Parser::new_ext(md, options) {
        match ev {
            Event::Start(tag) => match tag {
                Tag::Heading { level, .. } => {
                    w.end_line();
                    w.style(if level == HeadingLevel::H1 {
                        "1;4"
                    } else {
                        "1"
                    });
                }
                Tag::Paragraph => {}
                Tag::BlockQuote(_) => {
                    w.end_line();
                    w.frames.push(Frame::Quote);
                }
                Tag::CodeBlock(kind) => {
                    w.end_line();
                    let lang = match kind {
                        CodeBlockKind::Fenced(l) => l.to_string(),
                        CodeBlockKind::Indented => String::new(),
                    };
                    w.style("2");
                    w.text(format!("╭─ {lang}").trim_end());
                    w.out.push_str("\x1b[22m");
                    w.newline();
                    w.frames.push(Frame::Code);
                    w.style("36");
                }
                Tag::List(start) => {
                    w.end_line();
                    w.lists.push(start);
                }
                Tag::Item => {
                    w.end_line();
                    let bullet = match w.lists.last_mut() {
                        Some(Some(n)) => {
                            let b = format!("{n}. ");
                            *n += 1;
                            b
                        }
                        _ => "• ".to_owned(),
                    };
                    w.frames.push(Frame::Item(bullet.chars().count()));
                    w.bullet = Some(bullet);
                }
                Tag::Emphasis => w.style("3"),
                Tag::Strong => w.style("1"),
                Tag::Strikethrough => w.style("9"),
                Tag::Link { dest_url, .. } => {
                    w.style("4");
                    w.link = Some(dest_url.to_string());
                }
                Tag::Image { dest_url, .. } => {
                    w.text("[image: ");
                    w.link = Some(dest_url.to_string());
                }
                Tag::Table(_) => w.end_line(),
                Tag::TableHead => w.style("1"),
                Tag::TableRow => w.table_cell = 0,
                Tag::TableCell => {
                    if w.table_cell > 0 {
                        w.text(" │ ");
                    }
                    w.table_cell += 1;
                }
                _ => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Heading(_) => {
                    w.out.push_str("\x1b[0m");
                    w.blank();
                }
                TagEnd::Paragraph => w.blank(),
                TagEnd::BlockQuote(_) => {
                    w.frames.pop();
                    w.blank();
                }
                TagEnd::CodeBlock => {
                    w.out.push_str("\x1b[39m");
                    w.frames.pop();
                    w.end_line();
                    w.style("2");
                    w.text("╰─");
                    w.out.push_str("\x1b[22m");
                    w.blank();
                }
                TagEnd::List(_) => {
                    w.lists.pop();
                    w.blank();
                }
                TagEnd::Item => {
                    w.end_line();
                    w.frames.pop();
                    w.bullet = None;
                }
                TagEnd::Emphasis => w.out.push_str("\x1b[23m"),
                TagEnd::Strong => w.out.push_str("\x1b[22m"),
                TagEnd::Strikethrough => w.out.push_str("\x1b[29m"),
                TagEnd::Link => {
                    w.out.push_str("\x1b[24m");
                    if let Some(url) = w.link.take() {
                        w.out.push_str(&format!("\x1b[2m ({url})\x1b[22m"));
                    }
                }
                TagEnd::Image => {
                    if let Some(url) = w.link.take() {
                        w.text(&format!(" {url}]"));
                    }
                }
                TagEnd::TableHead => {
                    w.out.push_str("\x1b[22m");
                    w.end_line();
                }
                TagEnd::TableRow => w.end_line(),
                TagEnd::Table => w.blank(),
                _ => {}
            },
            Event::Text(t) => w.text(&t),
            Event::Code(t) => {
                w.style("36");
                w.out.push_str(&t);
                w.out.push_str("\x1b[39m");
            }
            Event::Html(t) | Event::InlineHtml(t) => w.text(&t),
            Event::SoftBreak | Event::HardBreak => w.newline(),
            Event::Rule => {
                w.end_line();
                w.style("2");
                w.text("────────────────────");
                w.out.push_str("\x1b[22m");
                w.blank();
            }
            Event::TaskListMarker(done) => w.text(if done { "[x] " } else { "[ ] " }),
            Event::FootnoteReference(t) => w.text(&format!("[{t}]")),
            _ => {}
        }
    }
    w.end_line();
    w.out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strip(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                for d in chars.by_ref() {
                    if d == 'm' {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn blocks_are_drawn_as_they_complete() {
        let mut s = Stream::new(true);
        let title = s.push("# Title\n\nsome **bold");
        assert_eq!(title, "\x1b[1;4mTitle\x1b[0m\n");
        let first = s.push(" text**\n\n");
        assert_eq!(strip(&first), "\nsome bold text\n");
        let code = s.push("```rust\nfn main() {}\n\n}\n");
        assert_eq!(
            code, "",
            "a blank line inside a fence does not end the block"
        );
        let code = s.push("```\n");
        assert_eq!(strip(&code), "\n╭─ rust\n│ fn main() {}\n│ \n│ }\n╰─\n");
        assert_eq!(s.finish(), "");
    }

    #[test]
    fn lists_and_emphasis() {
        let mut s = Stream::new(true);
        let mut out = s.push("- one *a*\n- two `x`\n\n1. first\n2. second\n");
        out.push_str(&s.finish());
        assert_eq!(strip(&out), "• one a\n• two x\n\n1. first\n2. second\n");
        assert!(out.contains("\x1b[3ma\x1b[23m"));
        let plain = Stream::new(false).push("# raw\n");
        assert_eq!(plain, "# raw\n");
    }
}
