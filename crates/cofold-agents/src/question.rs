//! Questions a tool asks a person, and checking and rendering answers. The `ask_user` tool that
//! asks them is in [`crate::ask`].

use crate::id::is_valid_name;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One question for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Question {
    /// The question id (answers are keyed by it); matches the name pattern.
    pub id: String,
    /// The question text.
    pub question: String,
    /// A short label (at most 12 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// Choices to pick from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<QuestionOption>>,
    /// Whether several options may be picked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multi_select: Option<bool>,
    /// Whether an answer outside the options is fine (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_other: Option<bool>,
}

impl Question {
    /// A free-text question.
    pub fn new(id: impl Into<String>, question: impl Into<String>) -> Question {
        Question {
            id: id.into(),
            question: question.into(),
            header: None,
            options: None,
            multi_select: None,
            allow_other: None,
        }
    }

    /// Whether several options may be picked.
    pub fn is_multi_select(&self) -> bool {
        self.multi_select.unwrap_or(false)
    }

    /// Whether an answer outside the options is fine.
    pub fn allows_other(&self) -> bool {
        self.allow_other.unwrap_or(true)
    }
}

/// One choice of a question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QuestionOption {
    /// What is shown and answered.
    pub label: String,
    /// More about the choice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Checks answers (an object of question id to a string or a list of strings) against the
/// questions; each problem is its own sentence, and an empty list means the answers are fine.
pub fn validate_answers(questions: &[Question], answers: &Value) -> Vec<String> {
    let Some(answers) = answers.as_object() else {
        return vec!["answers must be an object mapping question ids to answers".to_owned()];
    };
    let mut problems = Vec::new();
    for id in answers.keys() {
        if !questions.iter().any(|q| &q.id == id) {
            problems.push(format!("unknown question \"{id}\""));
        }
    }
    for question in questions {
        let id = &question.id;
        let Some(answer) = answers.get(id) else {
            problems.push(format!("question \"{id}\" has no answer"));
            continue;
        };
        let values: Vec<&Value> = match answer {
            Value::Array(list) => {
                if !question.is_multi_select() {
                    problems.push(format!("question \"{id}\" takes one answer"));
                    continue;
                }
                if list.is_empty() {
                    problems.push(format!("question \"{id}\" has an empty answer"));
                    continue;
                }
                list.iter().collect()
            }
            single => vec![single],
        };
        if values.iter().any(|v| !v.is_string()) {
            problems.push(format!("question \"{id}\" takes text answers"));
            continue;
        }
        let texts: Vec<&str> = values.iter().filter_map(|v| v.as_str()).collect();
        if texts.iter().any(|t| t.trim().is_empty()) {
            problems.push(format!("question \"{id}\" has an empty answer"));
            continue;
        }
        if !question.allows_other()
            && let Some(options) = &question.options
        {
            for text in texts {
                if !options.iter().any(|o| o.label == text) {
                    problems.push(format!(
                        "question \"{id}\": \"{text}\" is not one of its options"
                    ));
                }
            }
        }
    }
    problems
}

/// Renders answers for the model: per question, in question order, `Q (<id>): <question>` then
/// `A: <answer>` (a list joined with `, `), blocks separated by a blank line.
pub fn render_answers(questions: &[Question], answers: &Value) -> String {
    questions
        .iter()
        .map(|question| {
            let answer = match answers.get(&question.id) {
                Some(Value::String(text)) => text.clone(),
                Some(Value::Array(list)) => list
                    .iter()
                    .map(|v| {
                        v.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| v.to_string())
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            format!("Q ({}): {}\nA: {}", question.id, question.question, answer)
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Whether a question id is acceptable (the name pattern).
pub fn is_valid_question_id(id: &str) -> bool {
    is_valid_name(id)
}
