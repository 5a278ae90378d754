//! The plugin: options read at load, the build copied, the port and the `computer:` provider
//! registered. Applying never contacts the engine.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ahpd_sdk::plugin::{Plugin, PluginError, Readiness, Registrar};
use serde_json::{Value, json};

use crate::binary;
use crate::engine::{self, Engine};
use crate::machines::Machines;
use crate::options::{self, Options};
use crate::port::Computers;
use crate::resources::ComputerResources;

/// The plugin's name.
pub const PLUGIN_NAME: &str = "@ahpd/computer";

/// The plugin the daemon compiles in.
pub fn plugin() -> ComputerPlugin {
    ComputerPlugin::default()
}

/// `@ahpd/computer`.
#[derive(Default)]
pub struct ComputerPlugin {
    /// The port of the last apply, so the daemon can hand it sessions to adopt.
    applied: Mutex<Option<Arc<Computers>>>,
}

impl ComputerPlugin {
    /// How long an inner host has to answer `initialize`, from options.
    pub fn start_timeout(options: &Value) -> Duration {
        Duration::from_millis(options["startTimeoutMs"].as_u64().unwrap_or(30_000))
    }
}

fn manifest(opts: &Options) -> Value {
    let profiles: Vec<&String> = opts
        .profiles
        .iter()
        .filter(|(_, p)| !p.disposable)
        .map(|(n, _)| n)
        .collect();
    let choices: Vec<Value> = opts
        .profiles
        .iter()
        .filter(|(_, p)| !p.disposable)
        .map(|(n, p)| json!({ "value": n, "title": p.title.clone().unwrap_or_else(|| n.clone()), "description": p.description }))
        .collect();
    let mut props = json!({
        "runtime": { "enum": ["docker"] },
        "image": { "type": "string" },
        "profile": { "enum": profiles, "x-choices": choices },
        "cpus": { "type": "string" },
        "memory": { "type": "string" },
        "workdir": { "type": "string" },
        "agents": { "type": "array", "items": { "type": "string" } }
    });
    if opts.body_mounts {
        props["folder"] = json!({ "type": "string" });
        props["mounts"] = json!({ "type": "array", "items": { "type": "string" } });
    }
    json!({
        "title": "Computer",
        "description": "A machine a session can run in.",
        "root": "computer://",
        "operations": ["get", "list", "resolve", "put", "delete"],
        "manifest": { "type": "object", "additionalProperties": false, "properties": props }
    })
}

#[async_trait::async_trait]
impl Plugin for ComputerPlugin {
    fn name(&self) -> &str {
        PLUGIN_NAME
    }

    fn title(&self) -> &str {
        "Computer"
    }

    // Shown by `ahpd plugin config`; `engine` has none, as it is found when unset.
    fn defaults(&self) -> Value {
        json!({
            "runtime": "docker",
            "image": crate::DEFAULT_IMAGE,
            "pull": "missing",
            "secretUnreadable": "fail",
            "max": 3,
            "prefix": "ahpd-computer",
            "disposableDelay": 300_000,
            "bodyMounts": false,
            "sessionDefault": "",
            "startTimeoutMs": 30_000,
            "disposableAtStop": "keep"
        })
    }

    fn options_schema(&self) -> Value {
        options::schema()
    }

    fn check(&self, options: &Value) -> Readiness {
        match Options::parse(options) {
            Ok(_) => Readiness::Ready,
            Err(e) => Readiness::Unconfigured(e.to_string()),
        }
    }

    async fn apply(&self, options: Value, reg: &mut dyn Registrar) -> Result<(), PluginError> {
        let opts = Options::parse(&options).map_err(|e| PluginError(e.to_string()))?;
        let uri = engine::find(opts.engine.as_deref());
        if !std::path::Path::new(uri.trim_start_matches("unix://")).exists() {
            tracing::warn!(
                "no container engine socket at {uri}: machines fail until one answers there"
            );
        }
        let dir = reg.config_dir().ok_or_else(|| {
            PluginError("@ahpd/computer needs a configuration folder it can write".into())
        })?;
        let build = binary::install(
            &dir.join("computer").join("bin"),
            opts.ahpd_binary.as_deref().map(PathBuf::from).as_deref(),
        )
        .map_err(|e| PluginError(format!("cannot copy the ahpd build for machines: {e}")))?;
        let host_id = reg
            .host_id()
            .ok_or_else(|| PluginError("@ahpd/computer needs the daemon's host id".into()))?;
        let meta = manifest(&opts);
        let machines = Arc::new(Machines {
            engine: Engine::new(uri),
            opts,
            host_id,
            build,
            secrets: reg.secrets(),
            making: tokio::sync::Mutex::new(()),
            deleted: Mutex::new(Default::default()),
        });
        let computers = Arc::new(Computers::new(machines));
        reg.computers(computers.clone());
        reg.resource_provider("computer", Arc::new(ComputerResources(computers.clone())));
        let mut providers = serde_json::Map::new();
        providers.insert("computer".into(), meta);
        reg.meta("ahpd.resourceProviders", Value::Object(providers));
        if let Ok(mut a) = self.applied.lock() {
            *a = Some(computers);
        }
        Ok(())
    }
}
