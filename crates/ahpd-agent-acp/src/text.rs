//! Text an agent wrote (its stderr) made safe to show: no control characters but newlines and
//! tabs, so nothing it printed can drive a terminal that shows the error.

/// `text` with every control character other than `\n` and `\t` shown as `\u{...}`.
pub fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_reach_nobody() {
        assert_eq!(super::plain("a\u{1b}[31mb\nc"), "a\\u{1b}[31mb\nc");
    }
}
