//! An ACP prompt as the host's message: text blocks make the text, images and embedded files
//! travel inline as attachments, and links to files are attached by URI.

use agent_client_protocol::v1::schema::{ContentBlock, EmbeddedResourceResource};
use ahp_types::state::{
    Message, MessageAttachment, MessageEmbeddedResourceAttachment, MessageKind, MessageOrigin,
    MessageResourceAttachment,
};
use base64::Engine as _;

/// The last segment of a URI, as an attachment's label.
fn label_of(uri: &str, fallback: &str) -> String {
    let name = uri
        .split(['?', '#'])
        .next()
        .unwrap_or(uri)
        .rsplit('/')
        .find(|s| !s.is_empty())
        .unwrap_or("");
    if name.is_empty() {
        fallback.to_owned()
    } else {
        percent_decoded(name)
    }
}

fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = s.get(i + 1..i + 3)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn extension(mime: &str) -> &str {
    match mime {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        _ => "bin",
    }
}

fn embedded(label: String, data: String, content_type: String, kind: &str) -> MessageAttachment {
    MessageAttachment::EmbeddedResource(MessageEmbeddedResourceAttachment {
        label,
        range: None,
        display_kind: Some(kind.to_owned()),
        meta: None,
        data,
        content_type,
        selection: None,
    })
}

/// The message a prompt makes, or the sentence why it cannot be sent.
pub(crate) fn message_of(blocks: &[ContentBlock]) -> Result<Message, String> {
    let mut text = String::new();
    let mut attachments = Vec::new();
    let mut images = 0;
    for block in blocks {
        match block {
            ContentBlock::Text(t) => {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str(&t.text);
            }
            ContentBlock::Image(img) => {
                images += 1;
                let label = match &img.uri {
                    Some(uri) => label_of(uri, "image"),
                    None => format!("image-{images}.{}", extension(&img.mime_type)),
                };
                attachments.push(embedded(
                    label,
                    img.data.clone(),
                    img.mime_type.clone(),
                    "image",
                ));
            }
            ContentBlock::Audio(_) => {
                return Err("this agent takes no audio (its promptCapabilities say so)".into());
            }
            ContentBlock::ResourceLink(link) => {
                attachments.push(MessageAttachment::Resource(MessageResourceAttachment {
                    label: link.name.clone(),
                    range: None,
                    display_kind: Some("document".into()),
                    meta: None,
                    uri: link.uri.clone(),
                    size_hint: link.size,
                    content_type: link.mime_type.clone(),
                    nonce: None,
                    selection: None,
                }));
            }
            ContentBlock::Resource(res) => match &res.resource {
                EmbeddedResourceResource::TextResourceContents(t) => attachments.push(embedded(
                    label_of(&t.uri, "context"),
                    base64::engine::general_purpose::STANDARD.encode(t.text.as_bytes()),
                    t.mime_type.clone().unwrap_or_else(|| "text/plain".into()),
                    "document",
                )),
                EmbeddedResourceResource::BlobResourceContents(b) => attachments.push(embedded(
                    label_of(&b.uri, "attachment"),
                    b.blob.clone(),
                    b.mime_type
                        .clone()
                        .unwrap_or_else(|| "application/octet-stream".into()),
                    "document",
                )),
                _ => return Err("a resource of a kind this agent does not know".into()),
            },
            _ => return Err("a content block of a kind this agent does not know".into()),
        }
    }
    if text.trim().is_empty() && attachments.is_empty() {
        return Err("the prompt is empty".into());
    }
    Ok(Message {
        text,
        origin: MessageOrigin {
            kind: MessageKind::User,
        },
        attachments: (!attachments.is_empty()).then_some(attachments),
        model: None,
        agent: None,
        meta: None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn blocks(v: serde_json::Value) -> Vec<ContentBlock> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn text_images_and_files_become_one_message() {
        let m = message_of(&blocks(json!([
            { "type": "text", "text": "look at this" },
            { "type": "image", "data": "iVBORw0K", "mimeType": "image/png" },
            { "type": "resource", "resource": { "uri": "file:///w/My%20Notes.md", "text": "hi", "mimeType": "text/markdown" } },
            { "type": "resource_link", "uri": "file:///w/b.rs", "name": "b.rs" }
        ])))
        .unwrap();
        assert_eq!(m.text, "look at this");
        let a = serde_json::to_value(m.attachments.unwrap()).unwrap();
        assert_eq!(a[0]["contentType"], "image/png");
        assert_eq!(a[0]["label"], "image-1.png");
        assert_eq!(a[1]["label"], "My Notes.md");
        assert_eq!(a[1]["data"], "aGk=");
        assert_eq!(a[2]["uri"], "file:///w/b.rs");
    }

    #[test]
    fn an_empty_prompt_is_refused() {
        assert!(message_of(&blocks(json!([{ "type": "text", "text": "  " }]))).is_err());
        assert!(
            message_of(&blocks(
                json!([{ "type": "audio", "data": "", "mimeType": "audio/wav" }])
            ))
            .is_err()
        );
    }
}
