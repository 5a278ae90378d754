//! `${VAR}` and `${VAR:-default}` in an entry's strings, as Claude Code's `.mcp.json` writes
//! them. The text is checked when the configuration is read and expanded from the daemon's
//! environment each time the server starts, so the configuration (and what `ahpd config` and
//! `ahpd mcp list` show) keeps the reference, never the value.

/// Whether `name` may name a variable: a letter or `_`, then letters, digits or `_`.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// One piece of a string: text as written, or a reference.
enum Piece<'a> {
    Text(&'a str),
    Var {
        name: &'a str,
        default: Option<&'a str>,
    },
}

fn pieces(text: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        if at > 0 {
            out.push(Piece::Text(&rest[..at]));
        }
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else {
            return Err("has a ${ without its closing }".into());
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        if !valid_name(name) {
            return Err(format!(
                "${{{name}}} does not name a variable (letters, digits and _, not starting with a digit)"
            ));
        }
        out.push(Piece::Var { name, default });
        rest = &after[end + 1..];
    }
    if !rest.is_empty() {
        out.push(Piece::Text(rest));
    }
    Ok(out)
}

/// Checks the references of `text` without reading any variable.
pub(crate) fn check(text: &str) -> Result<(), String> {
    pieces(text).map(|_| ())
}

/// Whether `text` refers to any variable.
pub(crate) fn refers(text: &str) -> bool {
    text.contains("${")
}

/// `text` with each reference replaced by the variable's value from `lookup`, else its
/// default. Each value put in is added to `used` (they may be secrets: the caller blanks them
/// out of what it reports). An unset variable without a default is an error naming it.
pub(crate) fn expand(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    used: &mut Vec<String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    for piece in pieces(text)? {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Var { name, default } => {
                // As in the shell, `:-` stands in for an empty value too.
                let value = match (lookup(name), default) {
                    (Some(v), None) => v,
                    (Some(v), Some(_)) if !v.is_empty() => v,
                    (_, Some(d)) => d.to_owned(),
                    (None, None) => {
                        return Err(format!(
                            "the variable {name} is not set in the daemon's environment and ${{{name}}} gives no default (write ${{{name}:-default}})"
                        ));
                    }
                };
                if !value.is_empty() {
                    used.push(value.clone());
                }
                out.push_str(&value);
            }
        }
    }
    Ok(out)
}

/// The daemon's environment, as [`expand`] reads it.
pub(crate) fn from_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn lookup(name: &str) -> Option<String> {
        match name {
            "TOKEN" => Some("tok-123".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn references_expand_with_defaults() {
        let mut used = Vec::new();
        assert_eq!(
            expand("Bearer ${TOKEN}", &lookup, &mut used).unwrap(),
            "Bearer tok-123"
        );
        assert_eq!(
            expand("${HOST:-localhost}:${PORT:-8080}/x", &lookup, &mut used).unwrap(),
            "localhost:8080/x"
        );
        assert_eq!(expand("a${EMPTY:-d}b", &lookup, &mut used).unwrap(), "adb");
        assert_eq!(expand("a${EMPTY}b", &lookup, &mut used).unwrap(), "ab");
        assert_eq!(
            expand("$TOKEN {x}", &lookup, &mut used).unwrap(),
            "$TOKEN {x}"
        );
        assert_eq!(used, ["tok-123", "localhost", "8080", "d"]);
    }

    #[test]
    fn wrong_references_say_what_is_wrong() {
        let mut used = Vec::new();
        let unset = expand("${NOPE}", &lookup, &mut used).unwrap_err();
        assert!(unset.contains("NOPE is not set"), "{unset}");
        assert!(check("${OPEN").unwrap_err().contains("closing"));
        assert!(check("${1X}").unwrap_err().contains("does not name"));
        assert!(check("${}").is_err());
        assert!(check("plain").is_ok());
    }
}
