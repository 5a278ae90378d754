//! The common stream chunk, read straight into the few fields the decoder needs.
//!
//! Almost every chunk of a streamed answer carries one text or reasoning fragment and nothing
//! else. Parsing such a chunk into a `serde_json::Value` builds a map per object and a string
//! per key, a dozen allocations for a fragment of a few bytes; reading it into borrowed fields
//! skips every key the decoder does not look at and copies only the fragment when it holds an
//! escape. A chunk that carries anything more (an error, usage, tool calls, a finish reason of
//! `error`) or whose fields have unexpected types is left to the general reading, so both give
//! the same result for any input.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::dialect::ReasoningField;

/// A string field, borrowed from the chunk when it holds no escape (serde borrows a `Cow` only
/// when it is a field of its own, not inside an `Option`).
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow, default)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    finish_reason: Option<Text<'a>>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
    #[serde(borrow, default)]
    delta: Option<Delta<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow, default)]
    content: Option<Text<'a>>,
    #[serde(borrow, default)]
    reasoning: Option<Text<'a>>,
    #[serde(borrow, default)]
    reasoning_content: Option<Text<'a>>,
    #[serde(borrow, default)]
    tool_calls: Option<&'a RawValue>,
}

/// What a plain chunk carries; empty fragments are left out, as the general reading does.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct PlainChunk<'a> {
    pub finish: Option<Cow<'a, str>>,
    pub reasoning: Option<(ReasoningField, Cow<'a, str>)>,
    pub content: Option<Cow<'a, str>>,
}

fn non_empty(text: Option<Text<'_>>) -> Option<Cow<'_, str>> {
    text.map(|t| t.0).filter(|t| !t.is_empty())
}

/// The chunk's fields when it is plain; `None` sends it to the general reading.
pub(crate) fn read(data: &str) -> Option<PlainChunk<'_>> {
    let chunk: Chunk<'_> = serde_json::from_str(data).ok()?;
    if chunk.error.is_some() || chunk.usage.is_some() {
        return None;
    }
    let Some(choice) = chunk.choices.and_then(|c| c.into_iter().next()) else {
        return Some(PlainChunk::default());
    };
    let finish = choice.finish_reason.map(|f| f.0);
    if choice.usage.is_some() || finish.as_deref() == Some("error") {
        return None;
    }
    let Some(delta) = choice.delta else {
        return Some(PlainChunk {
            finish,
            ..PlainChunk::default()
        });
    };
    if delta.tool_calls.is_some() {
        return None;
    }
    // The same order as the general reading: `reasoning` before `reasoning_content`.
    let reasoning = non_empty(delta.reasoning)
        .map(|r| (ReasoningField::Reasoning, r))
        .or_else(|| {
            non_empty(delta.reasoning_content).map(|r| (ReasoningField::ReasoningContent, r))
        });
    Some(PlainChunk {
        finish,
        reasoning,
        content: non_empty(delta.content),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_fragment_is_borrowed_unless_it_holds_an_escape() {
        let plain = read(
            r#"{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"hi "},"finish_reason":null}]}"#,
        )
        .expect("plain");
        assert!(matches!(plain.content, Some(Cow::Borrowed("hi "))));
        let plain = read(r#"{"choices":[{"delta":{"content":"a\nb"}}]}"#).expect("plain");
        assert_eq!(plain.content.as_deref(), Some("a\nb"));
    }

    #[test]
    fn reasoning_finish_and_empty_fields_read_as_the_general_reading_does() {
        let plain = read(
            r#"{"choices":[{"delta":{"reasoning":"","reasoning_content":"think","content":""},"finish_reason":"stop"}]}"#,
        )
        .expect("plain");
        assert_eq!(
            plain,
            PlainChunk {
                finish: Some("stop".into()),
                reasoning: Some((ReasoningField::ReasoningContent, "think".into())),
                content: None,
            }
        );
        assert_eq!(read(r#"{"choices":[]}"#), Some(PlainChunk::default()));
        assert_eq!(
            read(r#"{"choices":null,"usage":null,"error":null}"#),
            Some(PlainChunk::default())
        );
    }

    #[test]
    fn anything_more_goes_to_the_general_reading() {
        for data in [
            r#"{"error":{"message":"no"}}"#,
            r#"{"usage":{"prompt_tokens":1}}"#,
            r#"{"choices":[{"delta":{},"usage":{"prompt_tokens":1}}]}"#,
            r#"{"choices":[{"delta":{},"finish_reason":"error"}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0}]}}]}"#,
            r#"{"choices":[{"delta":{"content":7}}]}"#,
            r#"{"choices":{"delta":{"content":"x"}}}"#,
            r#"{"choices":[{"delta":{"content":"x","content":"y"}}]}"#,
            "not json",
        ] {
            assert_eq!(read(data), None, "{data}");
        }
    }
}
