//! The `ask_user` tool: the model asks a person questions and the run pauses for the answers.

use crate::question::Question;
use crate::tool::{Tool, ToolDef, ToolError, ToolOutput, handler_fn};
use serde_json::{Value, json};
use std::collections::HashSet;

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
