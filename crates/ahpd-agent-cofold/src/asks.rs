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
