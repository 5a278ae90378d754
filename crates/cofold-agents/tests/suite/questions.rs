//! Questions and the `ask_user` tool (runtime cases A13–A16, docs/acceptance.md).

use cofold_agents::ask::ask_user_tool;
use cofold_agents::question::{Question, QuestionOption, render_answers, validate_answers};
use cofold_agents::store::MemoryStore;
use cofold_agents::tool::{
    AbortSignal, KvScopes, Resources, Tool, ToolContext, ToolEffects, ToolError,
};
use serde_json::{Value, json};
use std::sync::Arc;

fn context() -> ToolContext {
    ToolContext {
        agent_id: "agent".into(),
        session_id: "s1".into(),
        run_id: "r1".into(),
        call_id: "c1".into(),
        invocation_id: "i1".into(),
        workspace: None,
        signal: AbortSignal::never(),
        kv: KvScopes::new(Arc::new(MemoryStore::new()), "agent", "default", None),
        resources: Resources::new(),
    }
}

fn ask_user() -> Tool {
    ask_user_tool(None, None).expect("the default tool is valid")
}

fn question(id: &str) -> Value {
    json!({ "id": id, "question": format!("What about {id}?") })
}

#[test]
fn the_tool_has_its_default_name_and_no_effects() {
    let tool = ask_user();
    assert_eq!(tool.name(), "ask_user");
    assert_eq!(tool.effects(), ToolEffects::default());
    let custom = ask_user_tool(Some("ask_human"), Some("Ask the person.")).expect("valid");
    assert_eq!(custom.name(), "ask_human");
    assert_eq!(custom.description(), "Ask the person.");
    assert!(
        ask_user_tool(Some("bad name"), None).is_err(),
        "a bad custom name is a sentence, not a panic"
    );
}

#[test]
fn the_schema_bounds_questions_and_options() {
    let tool = ask_user();
    let refused = |input: Value| tool.validate(&input).is_err();
    assert!(refused(json!({ "questions": [] })), "zero questions");
    let five: Vec<Value> = (0..5).map(|i| question(&format!("q{i}"))).collect();
    assert!(refused(json!({ "questions": five })), "five questions");
    assert!(
        refused(
            json!({ "questions": [{ "id": "q", "question": "?", "options": [{ "label": "only" }] }] })
        ),
        "one option"
    );
    assert!(
        refused(json!({ "questions": [{ "id": "bad id", "question": "?" }] })),
        "an invalid id"
    );
    assert!(
        refused(json!({ "questions": [{ "id": "q", "question": "" }] })),
        "an empty question"
    );
    assert!(
        refused(
            json!({ "questions": [{ "id": "q", "question": "?", "header": "thirteen char" }] })
        ),
        "a long header"
    );
    assert!(
        refused(json!({ "questions": [{ "id": "q", "question": "?", "extra": 1 }] })),
        "another key"
    );
    assert!(
        refused(json!({ "questions": [question("q")], "more": true })),
        "another top-level key"
    );
    assert!(
        refused(
            json!({ "questions": [{ "id": "q", "question": "?", "options": [{ "label": "" }, { "label": "b" }] }] })
        ),
        "an empty label"
    );

    let issues = tool
        .validate(&json!({ "questions": [] }))
        .expect_err("refused");
    assert_eq!(issues[0].to_string(), "$.questions fewer than 1 items");

    assert!(tool.validate(&json!({ "questions": [{ "id": "pick", "question": "Which?", "header": "twelve chars", "options": [{ "label": "a" }, { "label": "b", "description": "the second" }] }] })).is_ok());
    assert!(tool.validate(&json!({ "questions": [{ "id": "many", "question": "Which ones?", "options": [{ "label": "a" }, { "label": "b" }], "multiSelect": true }] })).is_ok());
    assert!(tool.validate(&json!({ "questions": [question("free"), question("q2"), question("q3"), question("q4")] })).is_ok());
    assert!(
        tool.validate(
            &json!({ "questions": [{ "id": "q", "question": "?", "header": "ééééééééééé" }] })
        )
        .is_ok(),
        "header counts characters"
    );
}

#[tokio::test]
async fn valid_questions_pause_for_input() {
    let tool = ask_user();
    let input = tool.validate(&json!({ "questions": [question("name"), { "id": "color", "question": "Color?", "options": [{ "label": "red" }, { "label": "blue" }], "allowOther": false }] })).expect("valid");
    match tool.execute(input, context()).await {
        Err(ToolError::NeedsInput { questions }) => {
            assert_eq!(questions.len(), 2);
            assert_eq!(questions[0], Question::new("name", "What about name?"));
            assert_eq!(questions[1].allow_other, Some(false));
            assert_eq!(
                questions[1].options,
                Some(vec![
                    QuestionOption {
                        label: "red".into(),
                        description: None
                    },
                    QuestionOption {
                        label: "blue".into(),
                        description: None
                    }
                ])
            );
        }
        other => panic!("expected a pause, got {other:?}"),
    }
}

#[tokio::test]
async fn duplicate_ids_and_optionless_multi_select_are_plain_errors() {
    let tool = ask_user();
    let input = tool
        .validate(&json!({ "questions": [question("a"), question("a")] }))
        .expect("schema-valid");
    assert_eq!(
        tool.execute(input, context()).await,
        Err(ToolError::failed("duplicate question id \"a\""))
    );
    let input = tool
        .validate(&json!({ "questions": [{ "id": "m", "question": "?", "multiSelect": true }] }))
        .expect("schema-valid");
    assert_eq!(
        tool.execute(input, context()).await,
        Err(ToolError::failed(
            "question \"m\" is multiSelect but has no options"
        ))
    );
}

fn questions() -> Vec<Question> {
    serde_json::from_value(json!([
        { "id": "name", "question": "Your name?" },
        { "id": "tags", "question": "Tags?", "options": [{ "label": "a" }, { "label": "b" }], "multiSelect": true },
        { "id": "size", "question": "Size?", "options": [{ "label": "S" }, { "label": "L" }], "allowOther": false }
    ]))
    .expect("questions")
}

#[test]
fn a_complete_answer_set_passes() {
    let answers = json!({ "name": "Ada", "tags": ["a", "something else"], "size": "L" });
    assert_eq!(
        validate_answers(&questions(), &answers),
        Vec::<String>::new()
    );
}

#[test]
fn each_problem_is_its_own_sentence() {
    let qs = questions();
    let check = |answers: Value| validate_answers(&qs, &answers);
    assert_eq!(
        check(json!({ "name": "A", "tags": ["a"], "size": "S", "zzz": "x" })),
        ["unknown question \"zzz\""]
    );
    assert_eq!(
        check(json!({ "tags": ["a"], "size": "S" })),
        ["question \"name\" has no answer"]
    );
    assert_eq!(
        check(json!({ "name": "A", "tags": ["a"], "size": "M" })),
        ["question \"size\": \"M\" is not one of its options"]
    );
    assert_eq!(
        check(json!({ "name": ["A", "B"], "tags": ["a"], "size": "S" })),
        ["question \"name\" takes one answer"]
    );
    assert_eq!(
        check(json!({ "name": "A", "tags": [], "size": "S" })),
        ["question \"tags\" has an empty answer"]
    );
    assert_eq!(
        check(json!({ "name": "  ", "tags": ["a"], "size": "S" })),
        ["question \"name\" has an empty answer"]
    );
    assert_eq!(
        check(json!({ "name": 3, "tags": ["a"], "size": "S" })),
        ["question \"name\" takes text answers"]
    );
    assert_eq!(
        check(json!({ "name": "A", "tags": ["a", 1], "size": "S" })),
        ["question \"tags\" takes text answers"]
    );
    assert_eq!(
        check(json!([1])),
        ["answers must be an object mapping question ids to answers"]
    );
    assert_eq!(check(json!({})).len(), 3);
}

#[test]
fn answers_render_in_question_order() {
    let qs: Vec<Question> = vec![
        Question::new("first", "One?"),
        Question::new("second", "Two?"),
    ];
    let answers = json!({ "second": ["x", "y"], "first": "yes" });
    assert_eq!(
        render_answers(&qs, &answers),
        "Q (first): One?\nA: yes\n\nQ (second): Two?\nA: x, y"
    );
}
