//! Engine cases of records, tools, client tools, usage, attachments and documentation (see
//! `docs/acceptance.md`) not covered by the files named after those areas.

use std::sync::Arc;

use ahp_types::actions::StateAction;
use ahp_types::common::JsonObject;
use ahpd_sdk::Agent;
use ahpd_sdk::agent::Secret;
use ahpd_sdk::plugin::{AgentRecord, Engine, Plugin, Registrar, SecretReader};
use serde_json::{Value, json};

use super::support::*;

struct Engines(Vec<Arc<dyn Engine>>);

impl Registrar for Engines {
    fn engine(&mut self, engine: Arc<dyn Engine>) {
        self.0.push(engine);
    }
    fn agent(&mut self, _agent: Arc<dyn Agent>) {}
}

struct Vault;

impl SecretReader for Vault {
    fn read(&self, name: &str) -> Result<Secret, ahpd_sdk::plugin::SecretError> {
        match name {
            "host:agent/rec/apiKey" => Ok(Secret::new("sk-1")),
            other => Err(ahpd_sdk::plugin::SecretError {
                name: other.to_owned(),
                reason: format!("the vault holds no {other}"),
            }),
        }
    }
}

async fn engine(place: &Place, options: Value) -> Arc<dyn Engine> {
    let mut r = Engines(Vec::new());
    ahpd_agent_cofold::CofoldPlugin::with_embedder(place.embedder())
        .apply(options, &mut r)
        .await
        .expect("applies");
    r.0.remove(0)
}

fn record(config: Value) -> AgentRecord {
    AgentRecord {
        id: "rec".into(),
        engine: "cofold".into(),
        owner: "host".into(),
        name: "A record".into(),
        description: None,
        icon: None,
        model: Some("m".into()),
        config: serde_json::from_value(config).unwrap(),
    }
}

async fn one_turn(agent: Arc<dyn Agent>, place: &Place, config: Value) -> (TestHost, Watch) {
    let provider = agent.descriptor().provider;
    let th = host(vec![agent]).await;
    let mut w = Watch::create(&th, &provider, &fresh_id("more"), Some(&place.work), config).await;
    w.send("t1", "go").await;
    w.end("t1").await;
    (th, w)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_018_a_records_tools_replace_the_plugins_whole() {
    let place = Place::new();
    let ep = endpoint(vec![text("ok")]);
    let options = json!({ "memory": true,
        "tools": { "web": { "search": { "brave": { "apiKey": "k" } } } } });
    let e = engine(&place, options.clone()).await;
    let agent = e
        .agent(
            &record(json!({ "baseUrl": ep.base_url(), "tools": { "shell": false } })),
            &options,
            Arc::new(Vault),
        )
        .expect("an agent");
    one_turn(agent, &place, json!({})).await;
    let tools = offered(&ep.chat_bodies()[0]);
    assert!(!tools.contains(&"shell_exec".to_owned()), "{tools:?}");
    assert!(!tools.contains(&"web_search".to_owned()), "{tools:?}");
    assert!(tools.contains(&"web_fetch".to_owned()), "{tools:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_020_a_records_key_is_a_vault_reference_and_bad_records_are_refused() {
    // The daemon moves a plain key to the vault (its own tests); the engine reads the
    // reference, sends the value, and words what does not fit in one line.
    let place = Place::new();
    let ep = endpoint(vec![text("ok")]);
    let e = engine(&place, json!({ "memory": true })).await;
    let schema = e.record_schema();
    assert_eq!(schema["properties"]["apiKey"]["writeOnly"], true);
    let agent = e
        .agent(
            &record(json!({ "baseUrl": ep.base_url(), "apiKey": { "$secret": "host:agent/rec/apiKey" } })),
            &json!({}),
            Arc::new(Vault),
        )
        .expect("an agent");
    let (th, mut w) = one_turn(agent, &place, json!({})).await;
    assert_eq!(
        ep.chat_requests()[0].header("authorization"),
        Some("Bearer sk-1")
    );
    w.assert_mirror(&th).await;
    let shown = serde_json::to_string(&w.mirror.sessions).unwrap()
        + &serde_json::to_string(&w.mirror.chats).unwrap();
    assert!(!shown.contains("sk-1"), "the key is never shown");
    let bad: JsonObject = serde_json::from_value(json!({ "colour": "x" })).unwrap();
    let err = e
        .check_record("host", &bad)
        .expect_err("refused")
        .to_string();
    assert_eq!(err.lines().count(), 1);
    assert!(err.starts_with("config.colour"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_013_016_a_missing_secret_and_records_setting_host_fields() {
    let place = Place::new();
    let e = engine(&place, json!({ "memory": true })).await;
    let err = e
        .agent(
            &record(json!({ "apiKey": { "$secret": "host:missing" } })),
            &json!({}),
            Arc::new(Vault),
        )
        .err()
        .expect("refused")
        .to_string();
    assert_eq!(err, "the vault holds no host:missing");
    for key in ["store", "memory", "computerConfigDir"] {
        let mut config = JsonObject::new();
        config.insert(key.into(), json!("/x"));
        let err = e
            .check_record("team:a", &config)
            .expect_err("refused")
            .to_string();
        assert!(err.starts_with(&format!("config.{key}")), "{err}");
    }
    let model: JsonObject = serde_json::from_value(json!({ "model": "m" })).unwrap();
    assert!(
        e.check_record("host", &model)
            .expect_err("refused")
            .to_string()
            .starts_with("config.model")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_090_a_stop_kills_a_backgrounded_child() {
    let place = Place::new();
    let pid_file = place.work.join("bg.pid");
    let ep = endpoint(vec![call(
        "c1",
        "shell_exec",
        json!({ "command": "sleep 30 & echo $! > bg.pid; wait" }),
    )]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("bg"),
        Some(&place.work),
        json!({ "permissionMode": "bypassPermissions" }),
    )
    .await;
    w.send("t1", "run").await;
    // No event says the shell wrote its file; it is polled, with a deadline.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let pid = loop {
        if let Ok(text) = std::fs::read_to_string(&pid_file)
            && let Ok(pid) = text.trim().parse::<u32>()
        {
            break pid;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command never started"
        );
        tokio::task::yield_now().await;
    };
    let cancel: StateAction = serde_json::from_value(
        json!({ "type": "chat/turnCancelled", "turnId": "t1", "duration": 0 }),
    )
    .unwrap();
    w.client.dispatch(w.chat.clone(), cancel).await.unwrap();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnCancelled(_)
    ));
    let alive = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.split(' ').nth(2).is_none_or(|state| state != "Z"))
            .unwrap_or(false)
    };
    while alive(pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the backgrounded child lives on"
        );
        tokio::task::yield_now().await;
    }
    w.sync().await;
    let cancels = w
        .chat_actions()
        .iter()
        .filter(|a| matches!(a, StateAction::ChatTurnCancelled(_)))
        .count();
    assert_eq!(cancels, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_091_a_fetch_of_a_loopback_address_is_refused_without_connecting() {
    let place = Place::new();
    let target = endpoint(vec![]);
    let ep = endpoint(vec![
        call(
            "c1",
            "web_fetch",
            json!({ "url": format!("{}/secret", target.base_url()) }),
        ),
        text("refused"),
    ]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    one_turn(
        agent,
        &place,
        json!({ "permissionMode": "bypassPermissions" }),
    )
    .await;
    assert!(
        target.requests().is_empty(),
        "no connection to the loopback address"
    );
    let result = request_text(&ep.chat_bodies()[1]);
    assert!(!result.is_empty());
    match serde_json::from_str::<Value>(&result)
        .ok()
        .and_then(|m| m.as_array().cloned())
    {
        Some(messages) => assert!(messages.iter().any(|m| m["role"] == "tool")),
        None => panic!("no messages"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_093_a_file_changed_after_it_was_read_is_not_edited() {
    let place = Place::new();
    let store = place.home.join("store");
    let file = place.work.join("a.txt");
    std::fs::write(&file, "one\n").unwrap();
    let gate = testkit::Gate::new();
    let ep = endpoint(vec![
        call("c1", "read_file", json!({ "path": "a.txt" })),
        call(
            "c2",
            "edit_file",
            json!({ "path": "a.txt", "old": "one", "new": "two" }),
        )
        .held(&gate),
        text("refused"),
    ]);
    let options =
        json!({ "store": store.display().to_string(), "baseUrl": ep.base_url(), "model": "m" });
    let id = fresh_id("changed");
    {
        let th = host(vec![Arc::new(agent(options.clone(), place.embedder()))]).await;
        let mut w = Watch::create(
            &th,
            "cofold",
            &id,
            Some(&place.work),
            json!({ "permissionMode": "bypassPermissions" }),
        )
        .await;
        w.send("t1", "edit").await;
        gate.reached().await;
        std::fs::write(&file, "someone else\n").unwrap();
        gate.open();
        w.end("t1").await;
        th.host.shutdown();
    }
    assert!(request_text(&ep.chat_bodies()[2]).contains("changed since it was read"));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "someone else\n");
    // A new host keeps no record of the earlier read: the edit asks for a read first.
    ep.push_reply(call(
        "c3",
        "edit_file",
        json!({ "path": "a.txt", "old": "someone", "new": "x" }),
    ));
    ep.push_reply(text("refused again"));
    let th = host(vec![Arc::new(agent(options, place.embedder()))]).await;
    let c = client(&th.url, "again").await;
    let mut w = Watch::subscribe(c, &format!("cofold:/{id}")).await;
    w.send("t2", "edit again").await;
    // This host does not know the session's mode, so the edit may be asked about first.
    let next = w
        .until(|a| {
            matches!(
                a,
                StateAction::SessionInputNeededSet(_) | StateAction::ChatTurnComplete(_)
            )
        })
        .await;
    if matches!(next.action, StateAction::SessionInputNeededSet(_)) {
        let yes: StateAction = serde_json::from_value(json!({ "type": "chat/toolCallConfirmed",
            "turnId": "t2", "toolCallId": "c3", "approved": true, "selectedOptionId": "allow-once" }))
        .unwrap();
        w.client.dispatch(w.chat.clone(), yes).await.unwrap();
        w.end("t2").await;
    }
    // The engine keeps a conversation's reads in its store, so the new host's read record
    // knows the file changed since: the edit is refused, asking for a read first.
    let last = ep.chat_bodies().last().cloned().unwrap();
    assert!(
        request_text(&last).contains("with read_file first"),
        "{last}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "someone else\n");
}

#[test]
fn case_105_embedders_remove_the_settings_they_decide() {
    use cofold_agents::testing::{FakeModel, FakeStep};
    let place = Place::new();
    let plain = agent(json!({ "memory": true }), place.embedder());
    let schema = plain.config_schema(None);
    assert_eq!(
        schema.properties["permissionMode"].default,
        Some(json!("auto"))
    );
    let mut embedder = place.embedder();
    embedder.policy = Some(cofold_agents::policy::default_policy());
    let with_policy = agent(json!({ "memory": true }), embedder);
    assert!(
        !with_policy
            .config_schema(None)
            .properties
            .contains_key("permissionMode")
    );
    let mut embedder = place.embedder();
    embedder.adapter = Some(FakeModel::new(vec![FakeStep::text("hi")]).adapter());
    let with_adapter = agent(json!({ "memory": true, "model": "m" }), embedder);
    let props = with_adapter.config_schema(None).properties;
    assert!(props.contains_key("permissionMode"));
    assert!(!props.contains_key("effortLevel"));
}

fn set_client(id: &str) -> StateAction {
    serde_json::from_value(json!({
        "type": "session/activeClientSet",
        "activeClient": { "clientId": id, "tools": [{ "name": "openFile", "description": "Opens a file" }] }
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_112_113_client_results_with_images_and_two_clients_of_one_tool() {
    let place = Place::new();
    let ep = endpoint(vec![
        call("c1", "probe__openFile", json!({ "path": "/a.png" })),
        text("seen"),
    ]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("img"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.client
        .dispatch(w.session.clone(), set_client("probe"))
        .await
        .unwrap();
    w.until(|a| matches!(a, StateAction::SessionActiveClientSet(_)))
        .await;
    let other = client(&th.url, "other").await;
    other
        .dispatch(w.session.clone(), set_client("other"))
        .await
        .unwrap();
    w.until(|a| matches!(a, StateAction::SessionActiveClientSet(s) if s.active_client.client_id == "other")).await;
    w.send("t1", "open it").await;
    w.until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    let tools = offered(&ep.chat_bodies()[0]);
    assert!(
        tools.contains(&"probe__openFile".to_owned())
            && tools.contains(&"other__openFile".to_owned()),
        "{tools:?}"
    );
    let done: StateAction = serde_json::from_value(json!({
        "type": "chat/toolCallComplete", "turnId": "t1", "toolCallId": "c1",
        "result": { "success": true, "pastTenseMessage": "opened", "content": [
            { "type": "text", "text": "opened /a.png" },
            { "type": "embeddedResource", "data": "AAAA", "contentType": "image/png" }
        ] }
    }))
    .unwrap();
    w.client.dispatch(w.chat.clone(), done).await.unwrap();
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let body = request_text(&ep.chat_bodies()[1]);
    assert!(
        body.contains("opened /a.png") && body.contains("[image/png, 3 bytes]"),
        "{body}"
    );
    w.assert_mirror(&th).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_112_a_client_that_leaves_fails_its_call() {
    let place = Place::new();
    let ep = endpoint(vec![
        call("c1", "gone__openFile", json!({ "path": "/a.txt" })),
        text("noted"),
    ]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    // A client that drops is gone at once rather than after the host's grace.
    let th = host_with(vec![agent], |b| {
        b.active_client_grace(std::time::Duration::ZERO)
    })
    .await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("gone"),
        Some(&place.work),
        json!({}),
    )
    .await;
    let leaving = client(&th.url, "gone").await;
    leaving
        .dispatch(w.session.clone(), set_client("gone"))
        .await
        .unwrap();
    w.until(|a| matches!(a, StateAction::SessionActiveClientSet(_)))
        .await;
    w.send("t1", "open").await;
    w.until(|a| matches!(a, StateAction::SessionInputNeededSet(_)))
        .await;
    leaving.shutdown().await;
    assert!(matches!(
        w.end("t1").await,
        StateAction::ChatTurnComplete(_)
    ));
    let body = request_text(&ep.chat_bodies()[1]);
    assert!(body.contains("no longer here"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_129_no_price_no_cost_and_each_turn_counts_afresh() {
    let place = Place::new();
    let ep = endpoint(vec![text("a"), text("b")]);
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    let th = host(vec![agent]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("price"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "one").await;
    w.end("t1").await;
    w.send("t2", "two").await;
    w.end("t2").await;
    let usages: Vec<(String, ahp_types::state::UsageInfo)> = w
        .chat_actions()
        .iter()
        .filter_map(|a| match a {
            StateAction::ChatUsage(u) => Some((u.turn_id.clone(), u.usage.clone())),
            _ => None,
        })
        .collect();
    assert!(!usages.is_empty());
    for (_, u) in &usages {
        assert!(
            u.meta.as_ref().is_none_or(|m| !m.contains_key("ahpd.cost")),
            "{u:?}"
        );
    }
    let last_of = |turn: &str| {
        usages
            .iter()
            .rev()
            .find(|(t, _)| t == turn)
            .map(|(_, u)| u.input_tokens)
            .unwrap()
    };
    // The scripted stream reports the same tally each turn; a running total would double it.
    assert_eq!(last_of("t1"), last_of("t2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_135_an_image_in_a_queued_message_goes_with_that_message() {
    let place = Place::new();
    let gate = testkit::Gate::new();
    let ep = testkit::Endpoint::builder()
        .models_body(json!({ "object": "list", "data": [{ "id": "m", "name": "M",
            "supported_parameters": ["tools"],
            "architecture": { "input_modalities": ["text", "image"] } }] }))
        .replies(vec![text("first").held(&gate), text("second seen")])
        .start()
        .unwrap();
    let agent = Arc::new(agent(
        json!({ "memory": true, "baseUrl": ep.base_url(), "model": "m" }),
        place.embedder(),
    ));
    agent.probe().await;
    let th = host(vec![agent]).await;
    let mut w = Watch::create(
        &th,
        "cofold",
        &fresh_id("qimg"),
        Some(&place.work),
        json!({}),
    )
    .await;
    w.send("t1", "first").await;
    gate.reached().await;
    let queued: StateAction = serde_json::from_value(json!({
        "type": "chat/pendingMessageSet", "kind": "queued", "id": "q1",
        "message": { "text": "second", "origin": { "kind": "user" }, "attachments": [
            { "type": "embeddedResource", "label": "pic.png", "data": "iVBORw0KGgo=", "contentType": "image/png" }
        ] }
    }))
    .unwrap();
    w.client.dispatch(w.chat.clone(), queued).await.unwrap();
    w.until(|a| matches!(a, StateAction::ChatPendingMessageSet(_)))
        .await;
    assert_eq!(
        ep.chat_requests().len(),
        1,
        "a single request until the turn ends"
    );
    gate.open();
    w.end("t1").await;
    let started = w
        .until(|a| matches!(a, StateAction::ChatTurnStarted(_)))
        .await;
    let StateAction::ChatTurnStarted(s) = started.action else {
        unreachable!()
    };
    w.end(&s.turn_id).await;
    let body = ep.chat_bodies()[1].clone();
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    let text = last["content"].to_string();
    assert!(text.contains("second"), "{last}");
    assert!(
        text.contains("data:image/png;base64,iVBORw0KGgo="),
        "the image goes with its message: {last}"
    );
}

#[test]
fn case_136_the_documents_name_the_options_and_the_licence() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let plugins = std::fs::read_to_string(root.join("PLUGINS.md")).unwrap();
    let schema = ahpd_agent_cofold::options_schema();
    for (key, prop) in schema["properties"].as_object().unwrap() {
        let row = plugins
            .lines()
            .find(|l| l.starts_with(&format!("| `{key}`")))
            .unwrap_or_else(|| panic!("PLUGINS.md has no row for {key}"));
        // A derived schema writes `null` for an option that has no default.
        if let Some(default) = prop.get("default").filter(|d| !d.is_null()) {
            let shown = match default {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            assert!(
                row.contains(&shown),
                "the row of {key} gives its default {shown}: {row}"
            );
        }
    }
    for key in [
        "model",
        "baseUrl",
        "instructions",
        "permissionMode",
        "effortLevel",
    ] {
        assert!(
            plugins.contains(&format!("`{key}`")),
            "session setting {key}"
        );
    }
    assert!(plugins.contains("$secret") && plugins.contains("ahpd vault set"));
    let agent_md = std::fs::read_to_string(root.join("AGENT.md")).unwrap();
    for method in [
        "create",
        "list",
        "find",
        "transcript",
        "delete",
        "probe",
        "begin",
        "cancel",
        "steer",
        "resume_turn",
        "rewind",
        "fork_point",
        "configure",
        "close",
    ] {
        assert!(agent_md.contains(method), "AGENT.md covers {method}");
    }
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("license = \"MIT\""));
}
