//! Where a session keeps its scratch files: one folder per session under the home's
//! `.copilot/chats`, named by the session's id with unsafe characters escaped.

/// The session's id from its URI (`<scheme>:/<id>`), the chat's own id when the URI names
/// none.
pub(crate) fn session_id_of(session_uri: &str, backend_id: &str) -> String {
    session_uri
        .split_once(':')
        .map(|(_, rest)| rest.trim_start_matches('/'))
        .filter(|id| !id.is_empty())
        .unwrap_or(backend_id)
        .to_owned()
}

pub(crate) fn encode_scratch_segment(id: &str) -> String {
    let mut out = String::new();
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
