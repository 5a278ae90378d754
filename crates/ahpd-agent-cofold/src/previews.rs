//! What an approval shows before the person answers: the tool's own preview of the call as
//! the protocol's `edits` (each side's bytes carried in a `data:` URI, so every client reads
//! exactly what was previewed, byte for byte, and a transcript never points at a file that has
//! moved on), the question's title, and the policy's reason as its risk assessment.

use std::time::Duration;

use ahp_types::common::{JsonObject, StringOrMarkdown};
use ahp_types::state::{
    ContentRef, FileEdit, FileEditCollection, FileEditDiffStats, FileEditSide,
    ToolCallRiskAssessment, ToolCallRiskAssessmentCompleteState, ToolCallRiskAssessmentKind,
};
use ahpd_sdk::agent::ApprovalRequest;
use cofold_agents::tool::{FileChange, Preview, Tool};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The `_meta` key that says how the preview went when there is none to show.
pub(crate) const PREVIEW_META: &str = "ahpd.preview";

/// The kind a risk assessment from the policy carries (the protocol names only `judge`, a
/// model's verdict; this one is a rule's).
pub(crate) const RISK_KIND: &str = "policy";

/// The safety a policy's reason is given: the policy does not score calls, so it says neither
/// safe nor unsafe; the sentence is what matters.
const POLICY_SAFETY: f64 = 0.5;

/// How long counting a preview's added and removed lines may take before it gives up.
const DIFF_DEADLINE: Duration = Duration::from_millis(250);

/// The question's title for a call of `name` titled `title`, when no hook gave one.
pub(crate) fn confirmation_title(name: &str, title: &str) -> String {
    match name {
        "write_file" | "memory_write" => format!("Write {title}?"),
        "edit_file" => format!("Edit {title}?"),
        _ => format!("Run {name}?"),
    }
}

/// The tool's preview of a call, worked out on the blocking pool (it reads files); `None` when
/// the tool has none.
pub(crate) async fn preview_of(tool: Option<Tool>, input: Value) -> Option<Preview> {
    let tool = tool.filter(Tool::has_preview)?;
    tokio::task::spawn_blocking(move || tool.preview(&input))
        .await
        .ok()
        .flatten()
}

/// Why an approval shows no edits: the call would be refused (`wouldFail`) or its change cannot
/// be shown (`unavailable`), in the tool's sentence. Kept with the turn, since the question's
/// message and `_meta` outlast it in the call's later states.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Note {
    pub status: String,
    pub message: String,
}

/// Puts a preview into the request: the edits when there are changes to show, otherwise the
/// note saying why not, which it also gives back.
pub(crate) fn show(request: &mut ApprovalRequest, preview: &Preview, title: &str) -> Option<Note> {
    let note = match preview {
        Preview::Changes { files } => {
            request.edits = Some(FileEditCollection {
                items: files.iter().map(file_edit).collect(),
            });
            return None;
        }
        Preview::WouldFail { message } => Note {
            status: "wouldFail".to_owned(),
            message: message.clone(),
        },
        Preview::Unavailable { message } => Note {
            status: "unavailable".to_owned(),
            message: message.clone(),
        },
    };
    apply_note(request, &note, title);
    Some(note)
}

/// Says in the request why it shows no edits: beside the call's title, and in `_meta`.
pub(crate) fn apply_note(request: &mut ApprovalRequest, note: &Note, title: &str) {
    let said = if note.status == "wouldFail" {
        "this call would fail"
    } else {
        "no preview"
    };
    request.invocation_message =
        StringOrMarkdown::Plain(format!("{title} — {said}: {}", note.message));
    let mut meta = JsonObject::new();
    meta.insert(
        PREVIEW_META.to_owned(),
        json!({ "status": note.status, "message": note.message }),
    );
    request.meta = Some(meta);
}

/// The policy's reason for asking, as the protocol's risk assessment.
pub(crate) fn risk_assessment(reason: &str) -> ToolCallRiskAssessment {
    ToolCallRiskAssessment::Complete(ToolCallRiskAssessmentCompleteState {
        kind: ToolCallRiskAssessmentKind::Unknown(RISK_KIND.to_owned()),
        reason: StringOrMarkdown::Plain(reason.to_owned()),
        safety: POLICY_SAFETY,
    })
}

fn file_edit(change: &FileChange) -> FileEdit {
    let uri = ahpd_sdk::util::file_uri(&change.path);
    let side = |bytes: &Option<Vec<u8>>| {
        bytes.as_ref().map(|bytes| FileEditSide {
            uri: uri.clone(),
            content: content_ref(bytes),
        })
    };
    FileEdit {
        before: side(&change.before),
        after: side(&change.after),
        diff: Some(diff_stats(
            change.before.as_deref().unwrap_or_default(),
            change.after.as_deref().unwrap_or_default(),
        )),
    }
}

/// One side's bytes as a `data:` URI.
fn content_ref(bytes: &[u8]) -> ContentRef {
    let content_type = if std::str::from_utf8(bytes).is_ok() {
        "text/plain;charset=utf-8"
    } else {
        "application/octet-stream"
    };
    ContentRef {
        uri: ahpd_sdk::util::data_uri(content_type, bytes),
        size_hint: i64::try_from(bytes.len()).ok(),
        content_type: Some(content_type.to_owned()),
        nonce: None,
    }
}

/// Lines added and removed between the two sides.
fn diff_stats(before: &[u8], after: &[u8]) -> FileEditDiffStats {
    let before = String::from_utf8_lossy(before);
    let after = String::from_utf8_lossy(after);
    let diff = similar::TextDiff::configure()
        .timeout(DIFF_DEADLINE)
        .diff_lines(before.as_ref(), after.as_ref());
    let (mut added, mut removed) = (0i64, 0i64);
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Insert => added += 1,
            similar::ChangeTag::Delete => removed += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    FileEditDiffStats {
        added: Some(added),
        removed: Some(removed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ahpd_sdk::util::data_uri_bytes;

    #[test]
    fn sides_round_trip_byte_for_byte_and_lines_are_counted() {
        let before = b"one\r\ntwo\r\n\xff".to_vec();
        let after = b"one\r\n2\r\n\xff".to_vec();
        let edit = file_edit(&FileChange {
            path: "/w/a.txt".into(),
            before: Some(before.clone()),
            after: Some(after.clone()),
        });
        let side = |s: &Option<FileEditSide>| {
            data_uri_bytes(&s.as_ref().expect("side").content.uri).expect("data")
        };
        assert_eq!(side(&edit.before), before);
        assert_eq!(side(&edit.after), after);
        assert_eq!(
            edit.before.as_ref().map(|s| s.uri.as_str()),
            Some("file:///w/a.txt")
        );
        let stats = edit.diff.expect("stats");
        assert_eq!((stats.added, stats.removed), (Some(1), Some(1)));
        assert_eq!(data_uri_bytes("data:,a%20b"), Some(b"a b".to_vec()));
        assert_eq!(data_uri_bytes("file:///x"), None);
    }

    #[test]
    fn a_creation_has_only_an_after() {
        let edit = file_edit(&FileChange {
            path: "/w/new.txt".into(),
            before: None,
            after: Some(b"hi\n".to_vec()),
        });
        assert!(edit.before.is_none());
        assert!(edit.after.is_some());
    }
}
