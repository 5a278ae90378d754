//! A byte-oriented server-sent events parser following the WHATWG event-stream rules.
//!
//! Lines are found on raw bytes (`\r`, `\n` never occur inside a UTF-8 sequence), so a character
//! split across network reads is joined simply by keeping the unfinished line's bytes; each line
//! is decoded once, invalid bytes becoming U+FFFD. Complete lines inside one read are parsed in
//! place without copying.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field, when one was given.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
}

/// The incremental parser: feed it reads with [`SseParser::push`], then call
/// [`SseParser::finish`] at the end of the body.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of a line whose terminator has not arrived yet.
    partial: Vec<u8>,
    /// The previous read ended with `\r`: a `\n` opening this one belongs to it.
    after_cr: bool,
    /// Still at the very start of the stream, where one byte-order mark is dropped.
    at_start: bool,
    data: String,
    has_data: bool,
    event: Option<String>,
}

const BOM: &[u8] = "\u{feff}".as_bytes();

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        SseParser {
            at_start: true,
            ..SseParser::default()
        }
    }

    /// Parses one read, calling `out` for every event it completes.
    pub fn push(&mut self, mut bytes: &[u8], out: &mut impl FnMut(SseEvent)) {
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = bytes.strip_prefix(b"\n") {
                bytes = rest;
            }
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', bytes) {
            let line = &bytes[..end];
            if self.partial.is_empty() {
                self.line(line, out);
            } else {
                let mut joined = std::mem::take(&mut self.partial);
                joined.extend_from_slice(line);
                self.line(&joined, out);
                // Keep the buffer's capacity for the next split line.
                joined.clear();
                self.partial = joined;
            }
            let cr = bytes[end] == b'\r';
            bytes = &bytes[end + 1..];
            if cr {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.partial.extend_from_slice(bytes);
    }

    /// Ends the stream: an unterminated last line is processed and a pending event dispatched.
    pub fn finish(mut self, out: &mut impl FnMut(SseEvent)) {
        if !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            self.line(&line, out);
        }
        self.dispatch(out);
    }

    fn line(&mut self, mut line: &[u8], out: &mut impl FnMut(SseEvent)) {
        if self.at_start {
            self.at_start = false;
            if let Some(rest) = line.strip_prefix(BOM) {
                line = rest;
            }
        }
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.has_data = true;
                push_lossy(&mut self.data, value);
            }
            b"event" => {
                let mut name = String::new();
                push_lossy(&mut name, value);
                self.event = Some(name);
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut impl FnMut(SseEvent)) {
        let event = self.event.take();
        if !self.has_data {
            return;
        }
        self.has_data = false;
        out(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
        });
    }
}

/// Appends `bytes` as text. Valid UTF-8, the usual case, is checked by `from_utf8`'s fast path;
/// only a line holding invalid bytes takes the slower lossy walk.
fn push_lossy(out: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => out.push_str(text),
        Err(_) => out.push_str(&String::from_utf8_lossy(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(reads: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut got = Vec::new();
        for r in reads {
            p.push(r, &mut |e| got.push(e));
        }
        p.finish(&mut |e| got.push(e));
        got
    }

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn one_event_per_blank_line() {
        let got = parse(&[b"data: a\n\ndata: b\n\n"]);
        assert_eq!(data(&got), ["a", "b"]);
    }

    #[test]
    fn strips_exactly_one_leading_space() {
        let got = parse(&[b"data:no-space\n\ndata:  two\n\n"]);
        assert_eq!(data(&got), ["no-space", " two"]);
    }

    #[test]
    fn joins_data_lines_and_keeps_the_event_name() {
        let got = parse(&[b"event: delta\ndata: one\ndata: two\n\n"]);
        assert_eq!(
            got,
            [SseEvent {
                event: Some("delta".into()),
                data: "one\ntwo".into()
            }]
        );
    }

    #[test]
    fn skips_comments_unknown_fields_and_dataless_events() {
        let got = parse(&[b": hi\nid: 7\nretry: 10\nfoo: bar\n\nevent: x\n\ndata\n\n"]);
        // `data` without a colon is a data line with an empty value.
        assert_eq!(
            got,
            [SseEvent {
                event: None,
                data: String::new()
            }]
        );
    }

    #[test]
    fn event_name_does_not_leak_into_the_next_event() {
        let got = parse(&[b"event: x\n\ndata: a\n\n"]);
        assert_eq!(
            got,
            [SseEvent {
                event: None,
                data: "a".into()
            }]
        );
    }

    #[test]
    fn crlf_and_cr_line_endings() {
        assert_eq!(
            data(&parse(&[b"data: a\r\n\r\ndata: b\r\rdata: c\n\n"])),
            ["a", "b", "c"]
        );
    }

    #[test]
    fn crlf_split_across_reads() {
        let got = parse(&[b"data: a\r", b"\n\r", b"\ndata: b\r", b"\r"]);
        assert_eq!(data(&got), ["a", "b"]);
    }

    #[test]
    fn events_and_characters_split_across_reads() {
        let euro = "€".as_bytes();
        let got = parse(&[b"da", b"ta: x", &euro[..1], &euro[1..], b"y\n", b"\n"]);
        assert_eq!(data(&got), ["x€y"]);
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let got = parse(&[b"data: a\xffb\n\n"]);
        assert_eq!(data(&got), ["a\u{fffd}b"]);
    }

    #[test]
    fn trailing_event_without_blank_line_is_dispatched() {
        assert_eq!(data(&parse(&[b"data: a\n\ndata: last"])), ["a", "last"]);
        assert_eq!(data(&parse(&[b"data: last\n"])), ["last"]);
    }

    #[test]
    fn one_leading_bom_is_dropped_even_when_split() {
        let got = parse(&[b"\xef\xbb", b"\xbfdata: a\n\n\xef\xbb\xbfdata: b\n\n"]);
        // Only the first one: the second is part of a field name and so an unknown field.
        assert_eq!(data(&got), ["a"]);
    }

    #[test]
    fn byte_at_a_time_equals_whole() {
        let text =
            b"event: e\r\ndata: {\"a\":\"\xc3\xa9\"}\r\n\r\n: c\ndata: 2\rdata: 3\n\ndata: end";
        let whole = parse(&[text]);
        let reads: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(parse(&reads), whole);
        assert_eq!(data(&whole), ["{\"a\":\"é\"}", "2\n3", "end"]);
    }
}
