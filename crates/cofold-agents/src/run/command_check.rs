//! The checks a client's command passes before it reaches the run: it must answer the open
//! request in the request's own way, with an edited input the tool accepts or answers the
//! questions take.

use serde_json::Value;

use crate::error::AgentError;
use crate::event::{Command, RequestKind};
use crate::message::Part;
use crate::question::{Question, validate_answers};
use crate::tool::Tool;

/// The request a paused run waits on, as commands are checked against it.
#[derive(Clone)]
pub(crate) struct OpenRequest {
    pub(crate) request_id: String,
    pub(crate) kind: RequestKind,
    /// The paused call's tool, for checking an edited input; `None` when it no longer exists.
    pub(crate) tool: Option<Tool>,
    pub(crate) questions: Vec<Question>,
}

/// The parts of a steer message: the text first, then the given parts (text and images only).
/// The text is left out only when it is empty and parts are given.
pub(super) fn steer_parts(text: String, parts: Option<Vec<Part>>) -> Result<Vec<Part>, AgentError> {
    let extra = parts.unwrap_or_default();
    for part in &extra {
        if !matches!(part, Part::Text { .. } | Part::Image { .. }) {
            return Err(AgentError::invalid_options(format!(
                "a steer takes only text and image parts, not a {} part",
                part.kind()
            )));
        }
    }
    let mut all = Vec::with_capacity(extra.len() + 1);
    if !text.is_empty() || extra.is_empty() {
        all.push(Part::Text { text });
    }
    all.extend(extra);
    Ok(all)
}

/// Checks a command against the open request before anything is written.
pub(super) fn check_command(open: &OpenRequest, command: &Command) -> Result<(), AgentError> {
    let request_id = match command {
        Command::Approve { request_id, .. }
        | Command::Deny { request_id, .. }
        | Command::Answer { request_id, .. } => request_id,
        Command::Cancel { .. } | Command::Steer { .. } => return Ok(()),
    };
    if *request_id != open.request_id {
        return Err(AgentError::not_found(format!(
            "request {request_id} is not the open request"
        )));
    }
    match (open.kind, command) {
        (_, Command::Deny { .. }) => Ok(()),
        (RequestKind::Approval, Command::Answer { .. }) => Err(AgentError::invalid_options(
            format!("request {request_id} asks for an approval; answer it with approve or deny"),
        )),
        (
            RequestKind::Approval,
            Command::Approve {
                input: Some(edited),
                ..
            },
        ) => check_edited_input(open.tool.as_ref(), edited).map(|_| ()),
        (RequestKind::Input, Command::Answer { answers, .. }) => {
            check_answers(&open.questions, answers)
        }
        (RequestKind::Input, _) => Err(AgentError::invalid_options(format!(
            "request {request_id} asks questions; answer it with answer or deny"
        ))),
        _ => Ok(()),
    }
}

/// Validates an edited input against the paused call's tool, filling defaults.
pub(crate) fn check_edited_input(tool: Option<&Tool>, edited: &Value) -> Result<Value, AgentError> {
    let Some(tool) = tool else {
        return Err(AgentError::not_found(
            "the paused call's tool no longer exists",
        ));
    };
    tool.validate(edited).map_err(|issues| {
        let texts: Vec<String> = issues.iter().map(|i| i.to_string()).collect();
        AgentError::invalid_options(format!("Invalid arguments: {}", texts.join("; ")))
            .with_detail(Value::from(texts))
    })
}

fn check_answers(questions: &[Question], answers: &Value) -> Result<(), AgentError> {
    if !answers.is_object() {
        return Err(AgentError::invalid_options(
            "answers must be a JSON object of question id to answer",
        ));
    }
    let problems = validate_answers(questions, answers);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(AgentError::invalid_options(problems.join("; ")).with_detail(Value::from(problems)))
    }
}
