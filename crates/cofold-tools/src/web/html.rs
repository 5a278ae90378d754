//! `html_to_text`: a page reduced to the text a reader sees, in fixed steps.

use std::sync::LazyLock;

use regex::{Captures, Regex};

/// Builds a regex from a pattern written in this file.
fn re(pattern: &str) -> Regex {
    // The patterns are constants of this module; a broken one is a bug caught by the tests.
    #[allow(clippy::expect_used)]
    Regex::new(pattern).expect("html_to_text patterns compile")
}

static TITLE: LazyLock<Regex> = LazyLock::new(|| re(r"(?is)<title\b[^>]*>(.*?)</title\s*>"));
static HIDDEN: LazyLock<[Regex; 5]> = LazyLock::new(|| {
    ["script", "style", "noscript", "svg", "template"]
        .map(|name| re(&format!(r"(?is)<{name}\b[^>]*>.*?</{name}\s*>")))
});
static COMMENT: LazyLock<Regex> = LazyLock::new(|| re(r"(?s)<!--.*?-->"));
static HEAD: LazyLock<Regex> = LazyLock::new(|| re(r"(?is)<head\b[^>]*>.*?</head\s*>"));
static PRE: LazyLock<Regex> = LazyLock::new(|| re(r"(?is)<pre\b[^>]*>.*?</pre\s*>"));
static PRE_BREAK: LazyLock<Regex> = LazyLock::new(|| re(r"\r?\n"));
static WHITESPACE: LazyLock<Regex> = LazyLock::new(|| re(r"\s+"));
static LINE_BREAK_TAG: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)<(?:br|hr)\b[^>]*>"));
static PARAGRAPH_END: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)</(?:p|h[1-6]|blockquote|pre|table)\s*>"));
static BLOCK_END: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)</(?:div|li|tr|section|article|header|footer|nav|ul|ol|dd|dt)\s*>"));
static LIST_ITEM: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)<li\b[^>]*>"));
static ANY_TAG: LazyLock<Regex> = LazyLock::new(|| re(r"<[^>]+>"));
static ENTITY: LazyLock<Regex> =
    LazyLock::new(|| re(r"&(#[xX][0-9a-fA-F]+|#[0-9]+|[a-zA-Z][a-zA-Z0-9]*);"));
static SPACES: LazyLock<Regex> = LazyLock::new(|| re(r" {2,}"));
static MANY_BREAKS: LazyLock<Regex> = LazyLock::new(|| re(r"\n{3,}"));

/// Reduces an HTML page to plain text: the title first, scripts, styles and the head gone,
/// block ends as line breaks, list items as `- `, entities decoded.
pub fn html_to_text(html: &str) -> String {
    let title = TITLE
        .captures(html)
        .and_then(|c| c.get(1))
        .map(|m| fold_whitespace(&decode_entities(m.as_str())))
        .unwrap_or_default();

    let mut text = html.to_owned();
    for hidden in HIDDEN.iter() {
        text = hidden.replace_all(&text, " ").into_owned();
    }
    text = COMMENT.replace_all(&text, " ").into_owned();
    text = HEAD.replacen(&text, 1, " ").into_owned();
    text = PRE
        .replace_all(&text, |c: &Captures<'_>| {
            PRE_BREAK.replace_all(&c[0], "<br>").into_owned()
        })
        .into_owned();
    text = WHITESPACE.replace_all(&text, " ").into_owned();
    text = LINE_BREAK_TAG.replace_all(&text, "\n").into_owned();
    text = PARAGRAPH_END.replace_all(&text, "\n\n").into_owned();
    text = BLOCK_END.replace_all(&text, "\n").into_owned();
    text = LIST_ITEM.replace_all(&text, "- ").into_owned();
    text = ANY_TAG.replace_all(&text, " ").into_owned();
    text = decode_entities(&text);

    let lines: Vec<String> = text
        .split('\n')
        .map(|line| SPACES.replace_all(line, " ").trim().to_owned())
        .collect();
    let body = MANY_BREAKS
        .replace_all(&lines.join("\n"), "\n\n")
        .trim()
        .to_owned();

    if title.is_empty() {
        body
    } else {
        format!("{title}\n\n{body}")
    }
}

fn fold_whitespace(text: &str) -> String {
    WHITESPACE.replace_all(text, " ").trim().to_owned()
}

/// Decodes numeric entities and the named ones pages use most; anything else stays as written.
fn decode_entities(text: &str) -> String {
    ENTITY
        .replace_all(text, |c: &Captures<'_>| {
            let name = &c[1];
            let decoded = if let Some(hex) = name.strip_prefix("#x").or(name.strip_prefix("#X")) {
                u32::from_str_radix(hex, 16)
                    .ok()
                    .and_then(char::from_u32)
                    .map(String::from)
            } else if let Some(decimal) = name.strip_prefix('#') {
                decimal
                    .parse::<u32>()
                    .ok()
                    .and_then(char::from_u32)
                    .map(String::from)
            } else {
                named_entity(&name.to_ascii_lowercase()).map(str::to_owned)
            };
            decoded.unwrap_or_else(|| c[0].to_owned())
        })
        .into_owned()
}

fn named_entity(name: &str) -> Option<&'static str> {
    Some(match name {
        "amp" => "&",
        "lt" => "<",
        "gt" => ">",
        "quot" => "\"",
        "apos" | "rsquo" | "lsquo" => "'",
        "nbsp" => " ",
        "copy" => "©",
        "mdash" | "ndash" => "-",
        "hellip" => "...",
        "rdquo" | "ldquo" => "\"",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_code_points_stay_as_written() {
        assert_eq!(
            html_to_text("a&#xD800;b&#99999999999;"),
            "a&#xD800;b&#99999999999;"
        );
    }

    #[test]
    fn header_is_not_mistaken_for_head() {
        assert_eq!(html_to_text("<header>top</header>body"), "top\nbody");
    }

    #[test]
    fn an_empty_title_is_left_out() {
        assert_eq!(html_to_text("<title> </title><p>x</p>"), "x");
    }
}
