//! Ids and keys as single path segments (decision D9).
//!
//! Every byte outside `[A-Za-z0-9._-]` is written `%XX` (upper-case hex of the UTF-8 bytes), so
//! a key such as `team/x` never opens a folder. A name made only of dots would mean "this folder"
//! or "the parent", so each of its dots is written `%2E`. Temporary files and folders of the store
//! start with `%tmp`, which no encoded name can (a `%` is always followed by two hex digits).

use cofold_agents::error::AgentError;

/// The longest encoded segment the store accepts, in bytes.
pub const MAX_SEGMENT_BYTES: usize = 200;

/// The prefix of the store's temporary files and folders; never the start of an encoded name.
pub(crate) const TEMP_PREFIX: &str = "%tmp";

fn kept(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-')
}

/// Encodes `name` (an id or a kv key) as one path segment; `what` names it in the error.
///
/// An empty name, or one longer than [`MAX_SEGMENT_BYTES`] once encoded, is refused with
/// `invalid_options`.
pub fn encode_segment(what: &str, name: &str) -> Result<String, AgentError> {
    if name.is_empty() {
        return Err(AgentError::invalid_options(format!(
            "a {what} cannot be empty"
        )));
    }
    let mut out = String::with_capacity(name.len());
    if name.bytes().all(|byte| byte == b'.') {
        for _ in 0..name.len() {
            out.push_str("%2E");
        }
    } else {
        for byte in name.bytes() {
            if kept(byte) {
                out.push(char::from(byte));
            } else {
                out.push('%');
                out.push_str(&format!("{byte:02X}"));
            }
        }
    }
    if out.len() > MAX_SEGMENT_BYTES {
        return Err(AgentError::invalid_options(format!(
            "a {what} of {} bytes once encoded is longer than the {MAX_SEGMENT_BYTES} bytes a file name may take",
            out.len()
        )));
    }
    Ok(out)
}

/// Decodes a segment written by [`encode_segment`]; `None` when it is not one (a temporary file, a
/// stray file someone put there, or bytes that are not UTF-8).
pub fn decode_segment(segment: &str) -> Option<String> {
    if segment.is_empty() || segment.starts_with(TEMP_PREFIX) {
        return None;
    }
    let bytes: Vec<u8> = percent_encoding::percent_decode_str(segment).collect();
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use cofold_agents::error::ErrorCode;

    #[test]
    fn encodes_the_examples_of_the_spec() {
        assert_eq!(encode_segment("key", "team/x").unwrap(), "team%2Fx");
        assert_eq!(encode_segment("key", "a b/c:d").unwrap(), "a%20b%2Fc%3Ad");
        assert_eq!(encode_segment("id", ".").unwrap(), "%2E");
        assert_eq!(encode_segment("id", "..").unwrap(), "%2E%2E");
        assert_eq!(encode_segment("id", ".a.").unwrap(), ".a.");
        assert_eq!(encode_segment("id", "é").unwrap(), "%C3%A9");
    }

    #[test]
    fn refuses_empty_and_long_names() {
        assert_eq!(
            encode_segment("session id", "").unwrap_err().code,
            ErrorCode::InvalidOptions
        );
        assert!(encode_segment("id", &"a".repeat(200)).is_ok());
        let long = encode_segment("session id", &"a".repeat(201)).unwrap_err();
        assert_eq!(long.code, ErrorCode::InvalidOptions);
        assert!(long.message.contains("201 bytes"), "{}", long.message);
        assert!(
            encode_segment("key", &"/".repeat(67)).is_err(),
            "67 × %2F is 201 bytes"
        );
    }

    #[test]
    fn decodes_back_and_skips_temporaries() {
        for name in ["team/x", "a b/c:d", ".", "..", "ключ", "x.tmp"] {
            let encoded = encode_segment("key", name).unwrap();
            assert_eq!(decode_segment(&encoded).as_deref(), Some(name));
        }
        assert_eq!(decode_segment("%tmp-1-2"), None);
        assert_eq!(decode_segment("%FF"), None);
    }
}
