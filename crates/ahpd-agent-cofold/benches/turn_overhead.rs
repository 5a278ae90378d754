//! `turn_overhead`: the engine's own cost per turn, model time excluded.
//!
//! 1,000 sequential one-step turns on one session: a client dispatches `chat/turnStarted` and
//! waits until its reducer-built mirror holds the turn's `chat/turnComplete`, through the host,
//! the engine and a loopback WebSocket. Baseline, measured in the same run: the same turns run
//! directly with cofold-agents' `run` on the same kind of model and store, with the same tools,
//! no host and no engine. The per-turn overhead is turn − baseline turn (pairwise, turn i against
//! turn i, so both see the same history length); the goal is a median under 1 ms.
//!
//! Three setups: the main one (an in-process scripted model answering at once, in-memory store),
//! then the file store, then the loopback HTTP scripted endpoint instead of the in-process model.
//!
//! Run with `cargo bench -p ahpd-agent-cofold --bench turn_overhead`. `TURNS` overrides the count.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ahp::{Client, ClientConfig, SubscriptionEvent};
use ahp_types::actions::StateAction;
use ahp_types::commands::SubscribeResult;
use ahp_ws::WebSocketTransport;
use ahpd_agent_cofold::{Embedder, Environment, cofold_agent_with};
use ahpd_agent_cofold::{KeySource, Shared};
use ahpd_sdk::host::HostBuilder;
use ahpd_sdk::testing::Mirror;
use ahpd_sdk::transport::ws::WsConfig;
use cofold_agents::agent::{Agent as Runtime, PartialContext};
use cofold_agents::ask::ask_user_tool;
use cofold_agents::model::{ModelAdapter, ModelSpec};
use cofold_agents::run::{RunOptions, run};
use cofold_agents::store::{MemoryStore, Store};
use cofold_agents::testing::{FakeModel, FakeStep};
use cofold_store_file::{FileStore, FileStoreOptions};
use cofold_tools::standard::{StandardArgs, ToolsConfig, standard_capabilities};
use serde_json::{Value, json};
use testkit::{Endpoint, Reply};

#[derive(Clone, Copy, PartialEq)]
enum Model {
    InProcess,
    Http,
}

#[derive(Clone, Copy, PartialEq)]
enum StoreKind {
    Memory,
    File,
}

struct Setup {
    name: &'static str,
    model: Model,
    store: StoreKind,
    /// Serve through `Host::serve_ws` as it is, rather than the host's router on a listener
    /// with `TCP_NODELAY`.
    stock_listener: bool,
}

fn fake(turns: usize) -> FakeModel {
    FakeModel::streaming((0..turns).map(|_| FakeStep::text("ok")).collect())
}

fn http_adapter(ep: &Endpoint) -> Arc<dyn ModelAdapter> {
    let provider = Shared::default()
        .provider(
            &ep.base_url(),
            &KeySource::None,
            Vec::new(),
            &cofold_openai::ProviderSettings::default(),
        )
        .unwrap();
    Arc::new(provider.adapter(ModelSpec {
        id: "m".into(),
        features: None,
        params: None,
        pricing: None,
    }))
}

fn store_of(kind: StoreKind, root: &Path) -> Arc<dyn Store> {
    match kind {
        StoreKind::Memory => Arc::new(MemoryStore::new()),
        StoreKind::File => {
            Arc::new(FileStore::open(root.to_path_buf(), FileStoreOptions::default()).unwrap())
        }
    }
}

/// The baseline: cofold's own run loop, the same tools, no host, no engine.
async fn baseline(setup: &Setup, turns: usize, ep: &Endpoint, dir: &Path) -> Vec<Duration> {
    let adapter = match setup.model {
        Model::InProcess => fake(turns).adapter(),
        Model::Http => http_adapter(ep),
    };
    let store = store_of(setup.store, &dir.join("baseline-store"));
    let memory_dir = (setup.store == StoreKind::File).then(|| dir.join("baseline-memory"));
    // The context the engine gives a turn on a model with no listed window.
    let mut builder = Runtime::builder("cofold", "You are a helpful assistant.", adapter)
        .store(store)
        .context(PartialContext {
            max_tokens: Some(32_000),
            auto_compact_tokens: Some(25_600),
            ..PartialContext::default()
        })
        .tool(ask_user_tool(None, None).unwrap());
    for capability in standard_capabilities(
        &ToolsConfig::from_value(&json!({})).unwrap(),
        StandardArgs {
            workspace: dir.to_path_buf(),
            memory_dir,
            env: None,
            web_client: None,
            private: None,
        },
    ) {
        builder = builder.capability(capability);
    }
    let agent = builder.build().unwrap();
    let mut times = Vec::with_capacity(turns);
    for i in 0..turns {
        let mut options = RunOptions::new("baseline", format!("turn {i}"));
        options.workspace = Some(dir.display().to_string());
        options.message_id = Some(format!("t{i}"));
        let started = Instant::now();
        let outcome = run(&agent, options).outcome().await;
        times.push(started.elapsed());
        assert_eq!(outcome.status(), cofold_agents::store::RunStatus::Completed);
    }
    times
}

/// The engine: a client's turn through the host and the engine, to its mirror's ending.
async fn engine(setup: &Setup, turns: usize, ep: &Endpoint, dir: &Path) -> Vec<Duration> {
    let env = Environment {
        vars: HashMap::from([("HOME".to_owned(), dir.display().to_string())]),
        home: dir.to_path_buf(),
    };
    let mut options = json!({ "model": "m" });
    match setup.store {
        StoreKind::Memory => options["memory"] = json!(true),
        StoreKind::File => options["store"] = json!(dir.join("engine-store").display().to_string()),
    }
    let mut embedder = Embedder {
        env: Some(env),
        ..Embedder::default()
    };
    match setup.model {
        Model::InProcess => embedder.adapter = Some(fake(turns).adapter()),
        Model::Http => options["baseUrl"] = json!(ep.base_url()),
    }
    let agent = cofold_agent_with(&options, embedder).unwrap();
    let host = HostBuilder::new()
        .agent(Arc::new(agent))
        .delta_window(Duration::ZERO)
        .build()
        .unwrap();
    // Small frames each turn: without TCP_NODELAY, Nagle's algorithm and the peer's delayed
    // ACK hold them for tens of milliseconds, which is the socket's time, not the engine's.
    let (url, _server) = if setup.stock_listener {
        let server = host.serve_ws(WsConfig::loopback(0)).await.unwrap();
        (format!("ws://{}", server.local_addr()), Some(server))
    } else {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        let router = host.router(None);
        tokio::spawn(async move { axum::serve(listener, router).await });
        (url, None)
    };
    let client = Client::connect(
        WebSocketTransport::connect(&url).await.unwrap(),
        ClientConfig {
            default_request_timeout: Some(Duration::from_secs(120)),
            subscription_buffer: 4096,
        },
    )
    .await
    .unwrap();
    client
        .initialize("bench".into(), vec!["1.0.0".into()], vec![])
        .await
        .unwrap();
    let session = "cofold:/overhead".to_owned();
    let _: Value = client
        .request(
            "createSession",
            json!({ "channel": session, "workingDirectories": [ahpd_sdk::util::file_uri(dir)] }),
        )
        .await
        .unwrap();
    let chat = ahpd_sdk::util::default_chat_uri(&session);
    let mut events = client.events();
    let mut mirror = Mirror::default();
    // Raw subscribes: the client fans every action out to `events()` already.
    for uri in [session.as_str(), chat.as_str()] {
        let res: SubscribeResult = client
            .request("subscribe", json!({ "channel": uri }))
            .await
            .unwrap();
        mirror.apply_snapshot(&res.snapshot.unwrap());
    }
    let mut times = Vec::with_capacity(turns);
    for i in 0..turns {
        let turn_id = format!("t{i}");
        let turn: StateAction = serde_json::from_value(json!({
            "type": "chat/turnStarted", "turnId": turn_id, "startedAt": ahpd_sdk::util::now_iso(),
            "message": { "text": format!("turn {i}"), "origin": { "kind": "user" } }
        }))
        .unwrap();
        let started = Instant::now();
        client.dispatch(chat.clone(), turn).await.unwrap();
        loop {
            let ev = events.recv().await.expect("an event");
            let SubscriptionEvent::Action(envelope) = ev.event else {
                continue;
            };
            mirror.apply(&envelope);
            match &envelope.action {
                StateAction::ChatTurnComplete(c) if c.turn_id == turn_id => break,
                StateAction::ChatError(e) if e.turn_id == turn_id => {
                    panic!("turn {i} failed: {}", e.part.error.message)
                }
                _ => {}
            }
        }
        times.push(started.elapsed());
        let held = mirror.chats[&chat]
            .turns
            .last()
            .is_some_and(|t| t.id == turn_id);
        assert!(held, "the mirror holds turn {i}");
    }
    host.shutdown();
    times
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn median_of(values: &[Duration]) -> f64 {
    let mut v: Vec<f64> = values.iter().map(|d| ms(*d)).collect();
    v.sort_by(f64::total_cmp);
    percentile(&v, 0.5)
}

fn main() {
    let turns: usize = std::env::var("TURNS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(1000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let setups = [
        Setup {
            name: "in-process model, memory store",
            model: Model::InProcess,
            store: StoreKind::Memory,
            stock_listener: false,
        },
        Setup {
            name: "in-process model, memory store, Host::serve_ws's own listener",
            model: Model::InProcess,
            store: StoreKind::Memory,
            stock_listener: true,
        },
        Setup {
            name: "in-process model, file store",
            model: Model::InProcess,
            store: StoreKind::File,
            stock_listener: false,
        },
        Setup {
            name: "loopback HTTP endpoint (testkit), memory store",
            model: Model::Http,
            store: StoreKind::Memory,
            stock_listener: false,
        },
    ];
    runtime.block_on(async {
        let ep = Endpoint::builder()
            .fallback(Reply::text_stream("ok"))
            .start()
            .unwrap();
        println!("turn_overhead: {turns} sequential one-step turns on one session");
        for setup in &setups {
            let base_dir = tempfile::tempdir().unwrap();
            let engine_dir = tempfile::tempdir().unwrap();
            let dir_b = base_dir.path().canonicalize().unwrap();
            let dir_e = engine_dir.path().canonicalize().unwrap();
            let base = baseline(setup, turns, &ep, &dir_b).await;
            let mine = engine(setup, turns, &ep, &dir_e).await;
            let mut overhead: Vec<f64> = mine
                .iter()
                .zip(&base)
                .map(|(e, b)| ms(*e) - ms(*b))
                .collect();
            overhead.sort_by(f64::total_cmp);
            let (base_median, engine_median) = (median_of(&base), median_of(&mine));
            let median = percentile(&overhead, 0.5);
            println!("  {}:", setup.name);
            println!("    baseline (cofold run loop) median turn: {base_median:>8.3} ms");
            println!("    engine (client→host→engine→mirror) median turn: {engine_median:>8.3} ms");
            println!(
                "    overhead per turn: median {median:.3} ms, p99 {:.3} ms",
                percentile(&overhead, 0.99)
            );
            println!(
                "    ratio engine/baseline (medians): {:.2}",
                engine_median / base_median
            );
            if setup.model == Model::InProcess
                && setup.store == StoreKind::Memory
                && !setup.stock_listener
            {
                println!(
                    "    goal (median overhead under 1 ms): {}",
                    if median < 1.0 { "met" } else { "not met" }
                );
            }
        }
    });
}
