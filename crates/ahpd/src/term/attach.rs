//! Files a message carries: `-i/--image FILE` and `@path` mentions in its text, sent as the
//! protocol's attachments (images and text files embedded, folders by reference), and piped
//! standard input as context after the prompt.

use std::path::{Path, PathBuf};

use ahp_types::state::{
    MessageAttachment, MessageEmbeddedResourceAttachment, MessageResourceAttachment,
};
use base64::Engine as _;

use crate::commands::CommandError;

/// The most a file may hold to be embedded in a message.
const MAX_EMBEDDED: u64 = 8 * 1024 * 1024;
/// The most piped standard input sent as context.
pub const MAX_CONTEXT: usize = 4 * 1024 * 1024;

fn image_type(path: &Path) -> Option<&'static str> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        _ => return None,
    })
}

fn read_limited(path: &Path, shown: &str) -> Result<Vec<u8>, CommandError> {
    let meta = std::fs::metadata(path).map_err(|e| CommandError::Usage(format!("{shown}: {e}")))?;
    if meta.len() > MAX_EMBEDDED {
        return Err(CommandError::Usage(format!(
            "{shown}: {} bytes, more than the {} MiB a message may carry",
            meta.len(),
            MAX_EMBEDDED / 1024 / 1024
        )));
    }
    std::fs::read(path).map_err(|e| CommandError::Usage(format!("{shown}: {e}")))
}

fn embedded(label: &str, kind: &str, content_type: &str, bytes: &[u8]) -> MessageAttachment {
    MessageAttachment::EmbeddedResource(MessageEmbeddedResourceAttachment {
        label: label.to_owned(),
        range: None,
        display_kind: Some(kind.to_owned()),
        meta: None,
        data: base64::engine::general_purpose::STANDARD.encode(bytes),
        content_type: content_type.to_owned(),
        selection: None,
    })
}

/// An image given with `-i`.
pub fn image(path: &Path, dir: &Path) -> Result<MessageAttachment, CommandError> {
    let shown = format!("--image {}", path.display());
    let Some(kind) = image_type(path) else {
        return Err(CommandError::Usage(format!(
            "{shown}: not an image this client sends (PNG, JPEG, GIF or WebP, by extension)"
        )));
    };
    let full = dir.join(path);
    let bytes = read_limited(&full, &shown)?;
    let label = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    Ok(embedded(&label, "image", kind, &bytes))
}

/// The attachment a mentioned path becomes, when it names something that exists.
fn mentioned(path: &Path, raw: &str) -> Result<Option<MessageAttachment>, CommandError> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(None);
    };
    let shown = format!("@{raw}");
    if meta.is_dir() {
        return Ok(Some(MessageAttachment::Resource(
            MessageResourceAttachment {
                label: raw.to_owned(),
                range: None,
                display_kind: Some("directory".into()),
                meta: None,
                uri: ahpd_sdk::util::file_uri(path),
                size_hint: None,
                content_type: None,
                nonce: None,
                selection: None,
            },
        )));
    }
    if let Some(kind) = image_type(path) {
        let bytes = read_limited(path, &shown)?;
        return Ok(Some(embedded(raw, "image", kind, &bytes)));
    }
    let bytes = read_limited(path, &shown)?;
    let content_type = if std::str::from_utf8(&bytes).is_ok() {
        "text/plain"
    } else {
        "application/octet-stream"
    };
    Ok(Some(embedded(raw, "document", content_type, &bytes)))
}

/// The `@path` mentions in `text` that name a file or folder (relative to `dir`, absolute, or
/// under `~/`), as attachments. A mention naming nothing (an address, a handle) stays text.
pub fn mentions(text: &str, dir: &Path) -> Result<Vec<MessageAttachment>, CommandError> {
    let mut out = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    for word in text.split_whitespace() {
        let Some(raw) = word.strip_prefix('@') else {
            continue;
        };
        // Punctuation that ends a sentence is not part of the name, unless the name has it.
        let candidates = [
            raw,
            raw.trim_end_matches(['.', ',', ';', ':', '!', '?', ')', '"', '\'']),
        ];
        for raw in candidates {
            if raw.is_empty() {
                continue;
            }
            let path = match raw.strip_prefix("~/") {
                Some(rest) => match crate::locations::home() {
                    Ok(h) => h.join(rest),
                    Err(_) => continue,
                },
                None => dir.join(raw),
            };
            if seen.contains(&path) {
                break;
            }
            if let Some(a) = mentioned(&path, raw)? {
                seen.push(path);
                out.push(a);
                break;
            }
        }
    }
    Ok(out)
}

/// The prompt with piped input after it, in a fence longer than any run of backticks inside.
pub fn with_context(prompt: &str, context: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in context.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    let fence = "`".repeat(longest.max(2) + 1);
    let body = context.strip_suffix('\n').unwrap_or(context);
    format!("{prompt}\n\nStandard input:\n{fence}\n{body}\n{fence}\n")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn mentions_attach_what_exists() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "remember\n").unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        let found = mentions(
            "see @notes.txt, @src and mail me@example.com @absent",
            dir.path(),
        )
        .unwrap();
        assert_eq!(found.len(), 2);
        let MessageAttachment::EmbeddedResource(e) = &found[0] else {
            panic!()
        };
        assert_eq!(e.label, "notes.txt");
        assert_eq!(e.content_type, "text/plain");
        assert!(matches!(&found[1], MessageAttachment::Resource(r) if r.label == "src"));
        assert!(image(Path::new("notes.txt"), dir.path()).is_err());
    }

    #[test]
    fn context_is_fenced_past_its_own_backticks() {
        let c = with_context("explain", "a ```b``` c\n");
        assert!(
            c.starts_with("explain\n\nStandard input:\n````\na ```b``` c\n````\n"),
            "{c}"
        );
    }
}
