//! Questions a tool asks a person, the `ask_user` tool, and checking and rendering answers.

use crate::id::is_valid_name;
use crate::tool::{Tool, ToolDef, ToolError, ToolOutput, handler_fn};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::HashSet;

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

/// The input schema of `ask_user`.
fn ask_user_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "questions": {
                "type": "array",
                "description": "One to four questions for the user.",
                "minItems": 1,
                "maxItems": 4,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": { "type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$", "description": "A short id the answer is keyed by." },
                        "question": { "type": "string", "minLength": 1, "description": "The question, as one clear sentence." },
                        "header": { "type": "string", "maxLength": 12, "description": "A label of at most 12 characters." },
                        "options": {
                            "type": "array",
                            "minItems": 2,
                            "maxItems": 8,
                            "items": {
                                "type": "object",
                                "properties": {
                                    "label": { "type": "string", "minLength": 1 },
                                    "description": { "type": "string" }
                                },
                                "required": ["label"],
                                "additionalProperties": false
                            }
                        },
                        "multiSelect": { "type": "boolean", "description": "Whether several options may be chosen." },
                        "allowOther": { "type": "boolean", "description": "Whether a free-text answer is allowed (default true)." }
                    },
                    "required": ["id", "question"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["questions"],
        "additionalProperties": false
    })
}

const ASK_USER_DESCRIPTION: &str = "Ask the user one to four questions and wait for the answers. \
Use it when a decision is the user's to make or when something you need is missing. \
Offer options when the likely answers are known.";

/// The `ask_user` tool: no effects, not added to any agent by default. `name` and
/// `description` override the defaults (`ask_user` and a short description).
///
/// A valid call pauses the run for answers; duplicate question ids or a multi-select question
/// without options give a plain error result instead.
pub fn ask_user_tool(
    name: Option<&str>,
    description: Option<&str>,
) -> Result<Tool, crate::error::AgentError> {
    let handler = handler_fn(|input: Value, _ctx| async move {
        let questions: Vec<Question> =
            serde_json::from_value(input.get("questions").cloned().unwrap_or(Value::Null))
                .map_err(|error| {
                    ToolError::failed(format!("questions are not readable: {error}"))
                })?;
        let mut seen = HashSet::new();
        for question in &questions {
            if !seen.insert(question.id.as_str()) {
                return Err(ToolError::failed(format!(
                    "duplicate question id \"{}\"",
                    question.id
                )));
            }
            if question.is_multi_select() && question.options.as_ref().is_none_or(Vec::is_empty) {
                return Err(ToolError::failed(format!(
                    "question \"{}\" is multiSelect but has no options",
                    question.id
                )));
            }
        }
        Err::<ToolOutput, _>(ToolError::NeedsInput { questions })
    });
    Tool::new(ToolDef::new(
        name.unwrap_or("ask_user"),
        description.unwrap_or(ASK_USER_DESCRIPTION),
        ask_user_schema(),
        handler,
    ))
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
