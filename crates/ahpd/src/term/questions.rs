//! Questions the agent puts to the person (`ask_user`, an MCP elicitation): shown one after
//! the other, options as a numbered list, free text where allowed; answered for the person,
//! with a sentence saying nobody is there, when no terminal can ask.

use std::collections::HashMap;

use ahp_types::actions::StateAction;
use ahp_types::state::{
    ChatInputAnswer, ChatInputAnswerValue, ChatInputAnswered, ChatInputBooleanAnswerValue,
    ChatInputNumberAnswerValue, ChatInputOption, ChatInputQuestion, ChatInputSelectedAnswerValue,
    ChatInputSelectedManyAnswerValue, ChatInputSkipped, ChatInputTextAnswerValue,
    SessionInputRequest,
};

use super::screen::{Style, clean, clean_line};

/// What the model reads for each question when nobody can answer.
pub const NOBODY: &str = "No one is at the terminal to answer this question (ahpd ran without one): decide on your own if you safely can, otherwise stop and say what you need.";

/// A request for answers, waiting.
#[derive(Debug, Clone)]
pub struct Quest {
    /// The request's id, which the answer names.
    pub request: String,
    /// The chat the answer goes to.
    pub chat: String,
    /// The request's own message.
    pub message: Option<String>,
    /// A URL the person is asked to open, for URL-style requests.
    pub url: Option<String>,
    /// The questions, in order.
    pub questions: Vec<ChatInputQuestion>,
}

/// The request `action` puts to the chat `chat`, if it puts one.
pub fn quest_of(action: &StateAction, chat: &str) -> Option<Quest> {
    let StateAction::SessionInputNeededSet(set) = action else {
        return None;
    };
    let SessionInputRequest::ChatInput(req) = &set.request else {
        return None;
    };
    if req.chat != chat {
        return None;
    }
    Some(Quest {
        request: req.request.id.clone(),
        chat: req.chat.clone(),
        message: req.request.message.clone(),
        url: req.request.url.clone(),
        questions: req.request.questions.clone().unwrap_or_default(),
    })
}

/// The session entry id of a request, as `session/inputNeededRemoved` names it.
pub fn entry_of(q: &Quest) -> String {
    format!("input:{}", q.request)
}

/// A question's id, whether it must be answered, its text and its options.
fn parts(q: &ChatInputQuestion) -> (&str, bool, Option<&str>, &str, Option<&[ChatInputOption]>) {
    use ChatInputQuestion as Q;
    match q {
        Q::Text(t) => (
            &t.id,
            t.required == Some(true),
            t.title.as_deref(),
            &t.message,
            None,
        ),
        Q::Number(t) | Q::Integer(t) => (
            &t.id,
            t.required == Some(true),
            t.title.as_deref(),
            &t.message,
            None,
        ),
        Q::Boolean(t) => (
            &t.id,
            t.required == Some(true),
            t.title.as_deref(),
            &t.message,
            None,
        ),
        Q::SingleSelect(t) => (
            &t.id,
            t.required == Some(true),
            t.title.as_deref(),
            &t.message,
            Some(&t.options),
        ),
        Q::MultiSelect(t) => (
            &t.id,
            t.required == Some(true),
            t.title.as_deref(),
            &t.message,
            Some(&t.options),
        ),
        Q::Unknown(_) => ("", false, None, "", None),
    }
}

/// A question's id.
pub fn id_of(q: &ChatInputQuestion) -> String {
    match q {
        ChatInputQuestion::Unknown(v) => v
            .get("id")
            .and_then(|i| i.as_str())
            .unwrap_or_default()
            .to_owned(),
        other => parts(other).0.to_owned(),
    }
}

fn freeform(q: &ChatInputQuestion) -> bool {
    match q {
        ChatInputQuestion::SingleSelect(s) => s.allow_freeform_input != Some(false),
        ChatInputQuestion::MultiSelect(s) => s.allow_freeform_input != Some(false),
        _ => true,
    }
}

/// The heading of a whole request, shown once before its first question.
pub fn heading(quest: &Quest, style: Style) -> String {
    let mut out = style.bold("question from the agent");
    if let Some(m) = &quest.message {
        out.push_str(&format!(": {}", clean_line(m)));
    }
    if let Some(u) = &quest.url {
        out.push_str(&format!("\nopen: {}", clean_line(u)));
    }
    out
}

/// One question as shown: its number when there are several, the text, the options.
pub fn describe(quest: &Quest, index: usize, style: Style) -> String {
    let q = &quest.questions[index];
    let (_, _, title, message, options) = parts(q);
    let mut out = String::new();
    if quest.questions.len() > 1 {
        out.push_str(&style.dim(&format!("({}/{}) ", index + 1, quest.questions.len())));
    }
    if let Some(t) = title.filter(|t| !t.is_empty()) {
        out.push_str(&style.bold(&format!("[{}] ", clean_line(t))));
    }
    out.push_str(&clean(message));
    if let Some(options) = options {
        for (i, o) in options.iter().enumerate() {
            out.push_str(&format!("\n  {}. {}", i + 1, clean_line(&o.label)));
            if let Some(d) = o.description.as_deref().filter(|d| !d.is_empty()) {
                out.push_str(&style.dim(&format!(" — {}", clean_line(d))));
            }
            if o.recommended == Some(true) {
                out.push_str(&style.dim(" (recommended)"));
            }
        }
    }
    out
}

/// The prompt under a question, saying what may be typed.
pub fn prompt(q: &ChatInputQuestion) -> String {
    use ChatInputQuestion as Q;
    let required = parts(q).1;
    let skip = if required { "" } else { ", Enter skips" };
    match q {
        Q::SingleSelect(_) if freeform(q) => format!("number or your own answer{skip} > "),
        Q::SingleSelect(_) => format!("number{skip} > "),
        Q::MultiSelect(_) if freeform(q) => {
            format!("numbers (1,3) or your own answer{skip} > ")
        }
        Q::MultiSelect(_) => format!("numbers (1,3){skip} > "),
        Q::Boolean(_) => format!("y or n{skip} > "),
        Q::Number(_) | Q::Integer(_) => format!("a number{skip} > "),
        _ => format!("answer{skip} > "),
    }
}

fn submitted(value: ChatInputAnswerValue) -> ChatInputAnswer {
    ChatInputAnswer::Submitted(ChatInputAnswered { value })
}

fn numbers(line: &str, count: usize) -> Option<Vec<usize>> {
    let picked: Option<Vec<usize>> = line
        .split([',', ' '])
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().ok().filter(|n| (1..=count).contains(n)))
        .collect();
    picked.filter(|p| !p.is_empty())
}

/// The answer a typed line gives `q`: `Ok(None)` skips it, `Err` says why it is asked again.
pub fn answer_of(q: &ChatInputQuestion, line: &str) -> Result<Option<ChatInputAnswer>, String> {
    use ChatInputQuestion as Q;
    let line = line.trim();
    let required = parts(q).1;
    if line.is_empty() {
        return if required {
            Err("this question needs an answer".into())
        } else {
            Ok(Some(ChatInputAnswer::Skipped(ChatInputSkipped::default())))
        };
    }
    let text = || {
        submitted(ChatInputAnswerValue::Text(ChatInputTextAnswerValue {
            value: line.to_owned(),
        }))
    };
    Ok(Some(match q {
        Q::SingleSelect(s) => match line.parse::<usize>() {
            Ok(n) if (1..=s.options.len()).contains(&n) => submitted(
                ChatInputAnswerValue::Selected(ChatInputSelectedAnswerValue {
                    value: s.options[n - 1].id.clone(),
                    freeform_values: None,
                }),
            ),
            // A bare number is meant as an option, never as the answer's words.
            Err(_) if freeform(q) => submitted(ChatInputAnswerValue::Selected(
                ChatInputSelectedAnswerValue {
                    value: line.to_owned(),
                    freeform_values: Some(vec![line.to_owned()]),
                },
            )),
            _ => return Err(format!("type a number from 1 to {}", s.options.len())),
        },
        Q::MultiSelect(s) => match numbers(line, s.options.len()) {
            Some(picked) => submitted(ChatInputAnswerValue::SelectedMany(
                ChatInputSelectedManyAnswerValue {
                    value: picked.iter().map(|n| s.options[n - 1].id.clone()).collect(),
                    freeform_values: None,
                },
            )),
            None if freeform(q) => submitted(ChatInputAnswerValue::SelectedMany(
                ChatInputSelectedManyAnswerValue {
                    value: vec![line.to_owned()],
                    freeform_values: Some(vec![line.to_owned()]),
                },
            )),
            None => return Err(format!("type numbers from 1 to {}", s.options.len())),
        },
        Q::Boolean(_) => match line.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => {
                submitted(ChatInputAnswerValue::Boolean(ChatInputBooleanAnswerValue {
                    value: true,
                }))
            }
            "n" | "no" | "false" => {
                submitted(ChatInputAnswerValue::Boolean(ChatInputBooleanAnswerValue {
                    value: false,
                }))
            }
            _ => return Err("type y or n".into()),
        },
        Q::Number(_) | Q::Integer(_) => match line.parse::<f64>() {
            Ok(value) => submitted(ChatInputAnswerValue::Number(ChatInputNumberAnswerValue {
                value,
            })),
            Err(_) => return Err("type a number".into()),
        },
        _ => text(),
    }))
}

/// The answers given for nobody: the same sentence for every question.
pub fn nobody_answers(quest: &Quest) -> HashMap<String, ChatInputAnswer> {
    quest
        .questions
        .iter()
        .map(|q| {
            (
                id_of(q),
                submitted(ChatInputAnswerValue::Text(ChatInputTextAnswerValue {
                    value: NOBODY.to_owned(),
                })),
            )
        })
        .collect()
}

/// A request being answered at the terminal: which question is on screen and the answers
/// given so far.
#[derive(Debug, Clone)]
pub struct Answering {
    /// The request.
    pub quest: Quest,
    /// The question on screen.
    pub at: usize,
    /// The answers so far, by question id.
    pub answers: HashMap<String, ChatInputAnswer>,
}

/// What one typed line did to the request.
pub enum Step {
    /// Show this question next (its index).
    Next(usize),
    /// Ask the same question again, saying why.
    Again(String),
    /// Every question is answered.
    Done(HashMap<String, ChatInputAnswer>),
}

impl Answering {
    /// A request on its first question.
    pub fn new(quest: Quest) -> Answering {
        Answering {
            quest,
            at: 0,
            answers: HashMap::new(),
        }
    }

    /// Takes one typed line as the answer to the question on screen.
    pub fn take(&mut self, line: &str) -> Step {
        let Some(q) = self.quest.questions.get(self.at) else {
            return Step::Done(std::mem::take(&mut self.answers));
        };
        match answer_of(q, line) {
            Err(why) => Step::Again(why),
            Ok(answer) => {
                if let Some(a) = answer {
                    self.answers.insert(id_of(q), a);
                }
                self.at += 1;
                if self.at < self.quest.questions.len() {
                    Step::Next(self.at)
                } else {
                    Step::Done(std::mem::take(&mut self.answers))
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn question(v: serde_json::Value) -> ChatInputQuestion {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn options_are_picked_by_number_or_answered_in_words() {
        let q = question(json!({
            "kind": "single-select", "id": "db", "message": "Which database?",
            "options": [{ "id": "pg", "label": "Postgres" }, { "id": "lite", "label": "SQLite" }]
        }));
        let quest = Quest {
            request: "r".into(),
            chat: "c".into(),
            message: None,
            url: None,
            questions: vec![q.clone()],
        };
        let shown = describe(&quest, 0, Style::plain());
        assert!(
            shown.contains("Which database?\n  1. Postgres\n  2. SQLite"),
            "{shown}"
        );
        let Ok(Some(ChatInputAnswer::Submitted(a))) = answer_of(&q, "2") else {
            panic!()
        };
        assert_eq!(
            serde_json::to_value(&a.value).unwrap()["value"],
            json!("lite")
        );
        let Ok(Some(ChatInputAnswer::Submitted(a))) = answer_of(&q, "MySQL please") else {
            panic!()
        };
        assert_eq!(
            serde_json::to_value(&a.value).unwrap()["value"],
            json!("MySQL please")
        );
        let text =
            question(json!({ "kind": "text", "id": "n", "message": "Name?", "required": true }));
        assert!(answer_of(&text, " ").is_err());
    }

    #[test]
    fn several_questions_are_answered_in_turn() {
        let quest = Quest {
            request: "r".into(),
            chat: "c".into(),
            message: None,
            url: None,
            questions: vec![
                question(json!({ "kind": "text", "id": "a", "message": "A?" })),
                question(json!({ "kind": "boolean", "id": "b", "message": "B?" })),
            ],
        };
        let mut answering = Answering::new(quest);
        assert!(matches!(answering.take("first"), Step::Next(1)));
        assert!(matches!(answering.take("maybe"), Step::Again(_)));
        let Step::Done(all) = answering.take("y") else {
            panic!()
        };
        assert_eq!(all.len(), 2);
    }
}
