//! Agent records on the `x-ahpd-agents` channel: put, secrets, validity, restarts, and a full
//! run's files and logs searched for a secret's value.

use ahp::ClientError;
use ahp::client::{Client, SubscriptionEvent};
use serde_json::{Value, json};

use super::support::*;

const CHANNEL: &str = "x-ahpd-agents://";

async fn put(client: &Client, record: Value) -> Result<Value, ClientError> {
    client
        .request(
            "x-ahpd/agents/put",
            json!({"channel": CHANNEL, "record": record}),
        )
        .await
}

async fn channel_state(client: &Client) -> Value {
    let reply: Value = client
        .request("subscribe", json!({"channel": CHANNEL}))
        .await
        .unwrap();
    assert_eq!(reply["snapshot"]["resource"], CHANNEL);
    reply["snapshot"]["state"].clone()
}

fn record<'a>(state: &'a Value, id: &str) -> &'a Value {
    state["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .unwrap_or_else(|| panic!("no record {id} in {state}"))
}

fn agent_ids(init: &ahp_types::commands::InitializeResult) -> Vec<String> {
    let state = serde_json::to_value(&init.snapshots[0].state).unwrap();
    state["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["provider"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_put_moves_the_secret_to_the_vault_and_survives_a_restart() {
    let env = Env::new();
    let mut cmd = env.cmd();
    cmd.env("RUST_LOG", "trace");
    let daemon = env.daemon_with(cmd, &["--plugin", ECHO, "--port", "0"], "put.log");
    rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        let mut sub = client.attach_subscription(CHANNEL).await;
        let mut root = client
            .attach_subscription(ahp_types::ROOT_RESOURCE_URI)
            .await;
        let state = channel_state(&client).await;
        assert_eq!(state["engines"][0]["engine"], "echo");
        assert_eq!(state["engines"][0]["secretFields"], json!(["apiKey"]));
        let reply = put(
            &client,
            json!({"id": "echo-two", "engine": "echo", "owner": "host", "name": "Echo two",
                   "config": {"apiKey": "k1-very-secret"}}),
        )
        .await
        .unwrap();
        assert_eq!(
            reply["record"]["config"]["apiKey"],
            json!({"$secret": "host:agent/echo-two/apiKey"})
        );
        assert_eq!(reply["record"]["status"], "valid");
        // The channel announces the record, and the root lists the new agent.
        loop {
            match sub.recv().await.unwrap() {
                SubscriptionEvent::Action(env) => {
                    let action = serde_json::to_value(&env.action).unwrap();
                    assert_eq!(action["type"], "x-ahpd/agents/recordSet");
                    assert_eq!(action["record"]["id"], "echo-two");
                    break;
                }
                _ => continue,
            }
        }
        loop {
            if let SubscriptionEvent::Action(env) = root.recv().await.unwrap() {
                let action = serde_json::to_value(&env.action).unwrap();
                if action["type"] == "root/agentsChanged" {
                    let names: Vec<&str> = action["agents"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|a| a["displayName"].as_str().unwrap())
                        .collect();
                    assert!(names.contains(&"Echo two"), "{action}");
                    break;
                }
            }
        }
        // A team record may not set a host-only field.
        let err = put(
            &client,
            json!({"id": "team-echo", "engine": "echo", "owner": "team:core", "name": "T",
                   "config": {"delayMs": 1}}),
        )
        .await
        .unwrap_err();
        match err {
            ClientError::Rpc(e) => {
                assert_eq!(e.code, -32602);
                assert!(e.message.contains("config.delayMs"), "{}", e.message);
            }
            other => panic!("{other}"),
        }
        let err = put(
            &client,
            json!({"id": "Bad", "engine": "echo", "owner": "host", "name": "B"}),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ClientError::Rpc(ref e) if e.code == -32602));
    });
    let vault: Value =
        serde_json::from_str(&std::fs::read_to_string(env.dir().join("vault.json")).unwrap())
            .unwrap();
    assert_eq!(vault["host:agent/echo-two/apiKey"], "k1-very-secret");
    // A view sent back under a new owner moves the secret to that owner's scope.
    rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        let state = channel_state(&client).await;
        let mut view = record(&state, "echo-two").clone();
        view["owner"] = json!("user:ann");
        view["config"]["apiKey"] = json!("k2-other-secret");
        let reply = put(&client, view).await.unwrap();
        assert_eq!(
            reply["record"]["config"]["apiKey"],
            json!({"$secret": "user:ann/agent/echo-two/apiKey"})
        );
        view = reply["record"].clone();
        view["owner"] = json!("host");
        view["config"]["apiKey"] = json!("k1-very-secret");
        put(&client, view).await.unwrap();
    });
    let vault: Value =
        serde_json::from_str(&std::fs::read_to_string(env.dir().join("vault.json")).unwrap())
            .unwrap();
    assert_eq!(
        vault,
        json!({"host:agent/echo-two/apiKey": "k1-very-secret"})
    );
    let file = env.dir().join("agents").join("echo-two.json");
    assert_eq!(mode(&file), 0o600);
    assert!(
        !std::fs::read_to_string(&file)
            .unwrap()
            .contains("k1-very-secret")
    );
    assert_eq!(daemon.stop(), 0);

    // After a restart the record is still an agent.
    let mut cmd = env.cmd();
    cmd.env("RUST_LOG", "trace");
    let daemon = env.daemon_with(cmd, &["--plugin", ECHO, "--port", "0"], "put.log");
    rt().block_on(async {
        let (client, init) = client(&daemon.address).await;
        assert_eq!(agent_ids(&init), vec!["echo", "echo-two"]);
        let state = channel_state(&client).await;
        assert_eq!(record(&state, "echo-two")["status"], "valid");
    });
    assert_eq!(daemon.stop(), 0);

    // Nothing the run wrote, logged or printed holds the value except the vault.
    let holders = env.files_containing("k1-very-secret");
    let leaks: Vec<String> = std::fs::read_to_string(env.root.path().join("put.log"))
        .unwrap()
        .lines()
        .filter(|l| l.contains("k1-very-secret"))
        .map(str::to_owned)
        .collect();
    assert_eq!(holders, vec![env.dir().join("vault.json")], "{leaks:#?}");
}

#[test]
fn bad_records_are_kept_and_shown_with_a_reason() {
    let env = Env::new();
    let agents = env.dir().join("agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("broken.json"),
        "{\"id\": \"broken\",\n  \"engine\" \"echo\"}",
    )
    .unwrap();
    std::fs::write(
        agents.join("keyed.json"),
        r#"{"id": "keyed", "engine": "echo", "owner": "host", "name": "Keyed", "config": {"apiKey": {"$secret": "host:missing"}}}"#,
    )
    .unwrap();
    std::fs::write(
        agents.join("other.json"),
        r#"{"id": "other", "engine": "cofold", "owner": "host", "name": "Other", "config": {}}"#,
    )
    .unwrap();
    std::fs::write(
        agents.join("fine.json"),
        r#"{"id": "fine", "engine": "echo", "owner": "host", "name": "Fine", "config": {}}"#,
    )
    .unwrap();
    let broken_before = std::fs::read(agents.join("broken.json")).unwrap();
    let daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "bad.log");
    rt().block_on(async {
        let (client, init) = client(&daemon.address).await;
        // The echo engine has records, so no default record is written for it; the bad records
        // take nothing from the good one.
        assert_eq!(agent_ids(&init), vec!["fine"]);
        let state = channel_state(&client).await;
        let broken = record(&state, "broken");
        assert_eq!(broken["status"], "invalid");
        assert!(
            broken["reason"]
                .as_str()
                .unwrap()
                .starts_with("not valid JSON at line 2")
        );
        let keyed = record(&state, "keyed");
        assert_eq!(keyed["status"], "invalid");
        assert_eq!(keyed["reason"], "the vault holds no host:missing");
        let other = record(&state, "other");
        assert_eq!(other["status"], "unavailable");
        assert_eq!(
            other["reason"],
            "no enabled plugin registers the engine cofold"
        );
    });
    assert_eq!(daemon.stop(), 0);
    assert_eq!(
        std::fs::read(agents.join("broken.json")).unwrap(),
        broken_before
    );
    assert!(daemon_log_warns(&env, "bad.log", "keyed"));

    // Setting the secret makes the record valid at the next start.
    let out = env.run_with_input(&["vault", "set", "host:missing"], "v");
    assert_eq!(out.status.code(), Some(0));
    let daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "bad2.log");
    rt().block_on(async {
        let (_client, init) = client(&daemon.address).await;
        assert_eq!(agent_ids(&init), vec!["fine", "keyed"]);
    });
    assert_eq!(daemon.stop(), 0);
}

fn daemon_log_warns(env: &Env, log: &str, id: &str) -> bool {
    let text = std::fs::read_to_string(env.root.path().join(log)).unwrap();
    text.lines().any(|l| l.contains("WARN") && l.contains(id))
}

#[test]
fn a_deleted_default_record_stays_deleted() {
    let env = Env::new();
    let daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "seed.log");
    let seeded = std::fs::read_to_string(env.dir().join("agents").join(".seeded")).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&seeded).unwrap(),
        json!(["echo"])
    );
    rt().block_on(async {
        let (client, _) = client(&daemon.address).await;
        let reply: Value = client
            .request(
                "x-ahpd/agents/delete",
                json!({"channel": CHANNEL, "id": "echo"}),
            )
            .await
            .unwrap();
        assert_eq!(reply, json!({}));
    });
    assert_eq!(daemon.stop(), 0);
    let daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "seed.log");
    assert!(!env.dir().join("agents").join("echo.json").exists());
    rt().block_on(async {
        let (_client, init) = client(&daemon.address).await;
        assert!(agent_ids(&init).is_empty());
    });
    assert_eq!(daemon.stop(), 0);
}

#[test]
fn a_record_whose_engine_no_plugin_runs_is_unavailable_and_kept() {
    let env = Env::new();
    // The first start with echo writes the default record `echo`.
    let daemon = env.daemon(&["--plugin", ECHO, "--port", "0"], "seed.log");
    assert_eq!(daemon.stop(), 0);
    let file = env.dir().join("agents").join("echo.json");
    let before = std::fs::read(&file).unwrap();
    let daemon = env.daemon(&["--no-plugins", "--port", "0"], "none.log");
    rt().block_on(async {
        let (client, init) = client(&daemon.address).await;
        assert!(agent_ids(&init).is_empty());
        let state = channel_state(&client).await;
        let echo = record(&state, "echo");
        assert_eq!(echo["status"], "unavailable");
        assert_eq!(
            echo["reason"],
            "no enabled plugin registers the engine echo"
        );
    });
    assert_eq!(daemon.stop(), 0);
    assert_eq!(std::fs::read(&file).unwrap(), before);
}
