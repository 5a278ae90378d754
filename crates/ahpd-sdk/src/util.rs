//! Small functions every engine and the host share: titles, `file:` URIs, timestamps and the
//! default chat URI.

use std::path::{Path, PathBuf};

use base64::Engine as _;

/// The current time as an RFC 3339 UTC string with milliseconds (`2026-01-02T03:04:05.678Z`).
pub fn now_iso() -> String {
    format!("{:.3}", jiff::Timestamp::now())
}

/// Milliseconds from an RFC 3339 time until now; `None` when the time does not parse.
pub fn millis_since(started_at: &str) -> Option<i64> {
    let start: jiff::Timestamp = started_at.parse().ok()?;
    let now = jiff::Timestamp::now();
    Some(now.as_millisecond() - start.as_millisecond())
}

/// Whether a string is an RFC 3339 timestamp.
pub fn is_rfc3339(s: &str) -> bool {
    s.parse::<jiff::Timestamp>().is_ok()
}

/// A title from a message: the first non-blank line, trimmed, cut at the last space before 70
/// characters (ending with `…`) when longer.
pub fn title_from(text: &str) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if line.chars().count() <= 70 {
        return line.to_owned();
    }
    let head: String = line.chars().take(70).collect();
    let cut = head.rfind(' ').filter(|&i| i > 0).unwrap_or(head.len());
    format!("{}…", head[..cut].trim_end())
}

/// A duration the way a person reads it in a message: whole seconds when it is one, else
/// milliseconds.
pub fn human_duration(d: std::time::Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// The default chat URI of a session: `ahp-chat://default/` and the unpadded base64url of the
/// session URI exactly as spelled.
pub fn default_chat_uri(session_uri: &str) -> String {
    format!(
        "ahp-chat://default/{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(session_uri.as_bytes())
    )
}

/// The session URI a default chat URI was computed from.
pub fn session_of_default_chat(chat_uri: &str) -> Option<String> {
    let encoded = chat_uri.strip_prefix("ahp-chat://default/")?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// A `file:` URI for an absolute path, escaping what a URI cannot carry verbatim.
pub fn file_uri(path: &Path) -> String {
    let mut out = String::from("file://");
    for b in path.to_string_lossy().as_bytes() {
        let c = *b as char;
        if c.is_ascii_alphanumeric() || "/-._~!$&'()*+,;=:@".contains(c) {
            out.push(c);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A `data:` URI carrying `bytes` in base64 under `content_type`: content a client reads
/// without asking the host, exactly as it was when the URI was made.
pub fn data_uri(content_type: &str, bytes: &[u8]) -> String {
    let data = base64::engine::general_purpose::STANDARD.encode(bytes);
    format!("data:{content_type};base64,{data}")
}

/// The bytes a `data:` URI carries (base64, or percent-escaped text); `None` for any other
/// URI or a broken one.
pub fn data_uri_bytes(uri: &str) -> Option<Vec<u8>> {
    let rest = uri.strip_prefix("data:")?;
    let (head, data) = rest.split_once(',')?;
    if head.ends_with(";base64") {
        return base64::engine::general_purpose::STANDARD.decode(data).ok();
    }
    let bytes = data.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = data.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

/// The path of a `file:` URI; `None` for other schemes or bad escapes.
pub fn path_of(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return None;
    }
    let bytes = rest.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = rest.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(PathBuf::from(String::from_utf8(out).ok()?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn titles_take_the_first_line_and_cut_at_a_space() {
        assert_eq!(title_from("Fix the build\nand the tests"), "Fix the build");
        assert_eq!(title_from("\n  \n  hello  "), "hello");
        let long = "word ".repeat(30);
        let t = title_from(&long);
        assert!(t.ends_with('…'));
        assert!(t.chars().count() <= 71);
    }

    #[test]
    fn file_uris_round_trip_odd_names() {
        for p in ["/tmp/a b/#x", "/home/ü/ñ", "/plain"] {
            let uri = file_uri(Path::new(p));
            assert_eq!(path_of(&uri).unwrap(), PathBuf::from(p), "{uri}");
        }
        assert!(path_of("http://x/").is_none());
    }

    #[test]
    fn default_chat_uri_round_trips() {
        let u = default_chat_uri("mock:/abc");
        assert_eq!(u, "ahp-chat://default/bW9jazovYWJj");
        assert_eq!(session_of_default_chat(&u).unwrap(), "mock:/abc");
    }

    #[test]
    fn timestamps_have_milliseconds() {
        let now = now_iso();
        assert!(is_rfc3339(&now));
        assert_eq!(now.len(), "2026-01-02T03:04:05.678Z".len(), "{now}");
    }
}
