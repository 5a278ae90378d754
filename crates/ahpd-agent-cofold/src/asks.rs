//! Questions put to the host and answers brought back.

use std::collections::HashMap;

use ahp_types::state::{
    ChatInputAnswer, ChatInputAnswerValue, ChatInputQuestion, ChatInputRequest,
};
use cofold_agents::question::Question;
use serde_json::{Map, Value, json};

/// What the model reads when a person declines a call.
pub const DECLINED: &str = "The person declined this action";
/// What the model reads when an approval or question could not be put to anyone.
pub const UNANSWERED: &str = "No one could answer this request; it was not carried out";
/// How an approved call whose edited input does not parse is refused (the parser's sentence
/// follows).
pub const NOT_JSON: &str = "The edited input is not JSON, so nothing ran";

/// How a call whose edited input its tool refuses is answered (the tool's sentence follows).
pub const EDIT_REFUSED: &str = "The edited input was refused, so nothing ran";

/// Whether a denial's reason says the person approved but the run could not take the edited
/// input they approved with.
pub(crate) fn approved_but_refused(reason: &str) -> bool {
    reason.starts_with(EDIT_REFUSED) || reason.starts_with(NOT_JSON)
}

/// The most of a person's typed reason the model reads.
const REASON_MAX_CHARS: usize = 2000;

/// A person's typed reason as the model and the transcript keep it: trimmed, control
/// characters (escape sequences among them) dropped but line breaks kept, and cut at
/// [`REASON_MAX_CHARS`].
pub(crate) fn bounded_reason(text: &str) -> String {
    let clean: String = text
        .trim()
        .chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .take(REASON_MAX_CHARS)
        .collect();
    clean
}

/// What the model reads when a person declines a call, with what they wrote when they did.
pub(crate) fn declined(message: Option<&str>) -> String {
    match message.map(bounded_reason).filter(|m| !m.is_empty()) {
        Some(reason) => format!("Denied by the person: {reason}"),
        None => DECLINED.to_owned(),
    }
}

/// The input a person's edit stands for. A shell call shows, and so takes back, its command
/// alone: the edited text replaces the command and the rest of the input stays. Every other
/// call's edited text is its whole input as JSON.
pub(crate) fn edited_input(
    edited: &str,
    shell: bool,
    original: &Value,
) -> Result<Value, serde_json::Error> {
    if shell {
        let mut input = original.clone();
        if let Some(object) = input.as_object_mut() {
            object.insert("command".to_owned(), Value::String(edited.to_owned()));
            return Ok(input);
        }
        return Ok(json!({ "command": edited }));
    }
    serde_json::from_str(edited)
}

/// The message every question carries.
pub const QUESTION_MESSAGE: &str = "The agent has a question";

fn question(q: &Question) -> Option<ChatInputQuestion> {
    let value = match &q.options {
        None => json!({
            "kind": "text", "id": q.id, "message": q.question, "required": true, "title": q.header,
        }),
        Some(options) => {
            let kind = if q.multi_select == Some(true) {
                "multi-select"
            } else {
                "single-select"
            };
            let options: Vec<Value> = options
                .iter()
                .map(|o| json!({ "id": o.label, "label": o.label, "description": o.description }))
                .collect();
            let mut v = json!({ "kind": kind, "id": q.id, "message": q.question, "options": options, "title": q.header });
            if q.allow_other == Some(false) {
                v["allowFreeformInput"] = json!(false);
            }
            v
        }
    };
    serde_json::from_value(strip_nulls(value)).ok()
}

fn strip_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(strip_nulls).collect()),
        other => other,
    }
}

/// The host's form of cofold's questions.
pub(crate) fn input_request(request_id: &str, questions: &[Question]) -> ChatInputRequest {
    ChatInputRequest {
        id: request_id.to_owned(),
        message: Some(QUESTION_MESSAGE.to_owned()),
        url: None,
        questions: Some(questions.iter().filter_map(question).collect()),
        answers: None,
    }
}

/// cofold's answers object from the host's: a text or selection as its string, several
/// selections as a list, skipped answers left out.
pub(crate) fn answers_value(answers: Option<&HashMap<String, ChatInputAnswer>>) -> Value {
    let mut out = Map::new();
    for (id, answer) in answers.into_iter().flatten() {
        let value = match answer {
            ChatInputAnswer::Submitted(a) | ChatInputAnswer::Draft(a) => match &a.value {
                ChatInputAnswerValue::Text(t) => json!(t.value),
                ChatInputAnswerValue::Selected(s) => json!(s.value),
                ChatInputAnswerValue::SelectedMany(s) => json!(s.value),
                other => match serde_json::to_value(other) {
                    Ok(v) => v.get("value").cloned().unwrap_or(Value::Null),
                    Err(_) => continue,
                },
            },
            ChatInputAnswer::Skipped(_) => continue,
        };
        if !value.is_null() {
            out.insert(id.clone(), value);
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cofold_agents::question::QuestionOption;

    #[test]
    fn a_typed_reason_reaches_the_model_clean_and_bounded() {
        assert_eq!(declined(None), DECLINED);
        assert_eq!(declined(Some("   ")), DECLINED);
        assert_eq!(
            declined(Some(" use git mv instead\u{1b}[2J ")),
            "Denied by the person: use git mv instead[2J"
        );
        let long = "x".repeat(5000);
        assert_eq!(
            declined(Some(&long)).len(),
            "Denied by the person: ".len() + REASON_MAX_CHARS
        );
    }

    #[test]
    fn a_shell_edit_replaces_the_command_and_others_parse_json() {
        let original = json!({ "command": "rm -rf x", "timeout": 5 });
        assert_eq!(
            edited_input("ls x", true, &original).expect("shell"),
            json!({ "command": "ls x", "timeout": 5 })
        );
        assert_eq!(
            edited_input(r#"{"path":"a"}"#, false, &json!({})).expect("json"),
            json!({ "path": "a" })
        );
        assert!(edited_input("not json", false, &json!({})).is_err());
    }

    #[test]
    fn questions_become_typed_host_questions() {
        let q = Question {
            id: "which".into(),
            question: "Which note?".into(),
            header: None,
            options: Some(vec![
                QuestionOption {
                    label: "monday".into(),
                    description: None,
                },
                QuestionOption {
                    label: "tuesday".into(),
                    description: None,
                },
            ]),
            multi_select: None,
            allow_other: None,
        };
        let request = input_request("r1", &[q]);
        let questions = request.questions.unwrap_or_default();
        assert!(
            matches!(questions.first(), Some(ChatInputQuestion::SingleSelect(s)) if s.options.len() == 2 && s.id == "which")
        );
        let text = Question {
            options: None,
            ..Question::new("name", "Your name?")
        };
        let request = input_request("r2", &[text]);
        assert!(matches!(
            request.questions.as_deref(),
            Some([ChatInputQuestion::Text(_)])
        ));
    }
}
