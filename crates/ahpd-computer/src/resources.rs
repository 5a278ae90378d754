//! `computer://` resources: machines listed, read, made, changed and deleted by clients.

use std::sync::Arc;

use ahpd_sdk::ahp_types::commands::{
    ContentEncoding, DirectoryEntry, ResourceListResult, ResourceReadResult, ResourceResolveResult,
};
use ahpd_sdk::error::RpcError;
use ahpd_sdk::ports::ResourceProvider;
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::ComputerError;
use crate::machines::{label, valid_id};
use crate::port::Computers;

/// The body fields a write may carry; with `bodyMounts`, also `folder` and `mounts`.
const FIELDS: &[&str] = &[
    "runtime", "image", "profile", "cpus", "memory", "workdir", "agents",
];

/// The provider.
pub struct ComputerResources(pub Arc<Computers>);

fn split(uri: &str) -> Result<(&str, Option<&str>), RpcError> {
    let rest = uri
        .strip_prefix("computer://")
        .ok_or_else(|| RpcError::invalid_params(format!("{uri} is not a computer:// URI")))?;
    Ok(match rest.split_once('/') {
        Some((id, "")) => (id, None),
        Some((id, part)) => (id, Some(part)),
        None => (rest, None),
    })
}

fn text(v: Value) -> ResourceReadResult {
    ResourceReadResult {
        data: v.to_string(),
        encoding: ContentEncoding::Utf8,
        content_type: Some("application/json".into()),
    }
}

impl ComputerResources {
    async fn status(&self, id: &str) -> Result<Value, ComputerError> {
        let m = &self.0.m;
        let c = m.inspect(id).await?;
        let config = c.config.clone().unwrap_or_default();
        let labels = config.labels.clone().unwrap_or_default();
        let mounts: Vec<Value> = c
            .mounts
            .unwrap_or_default()
            .into_iter()
            .map(|x| json!({ "source": x.name.or(x.source), "target": x.destination, "readOnly": x.rw == Some(false) }))
            .collect();
        let agents: Vec<&str> = labels
            .get(label::AGENTS)
            .map(|a| a.split(',').filter(|s| !s.is_empty()).collect())
            .unwrap_or_default();
        let status = c
            .state
            .as_ref()
            .and_then(|s| s.status)
            .map(|s| s.to_string())
            .unwrap_or_default();
        let mut v = json!({
            "id": id,
            "runtime": "docker",
            "image": config.image,
            "status": status,
            "agents": agents,
            "workdir": config.working_dir,
            "mounts": mounts,
            "createdAt": c.created.map(|d| d.to_string()),
            "sessions": self.0.sessions_in(id),
        });
        if let Some(p) = labels.get(label::PROFILE) {
            v["profile"] = json!(p);
        }
        if let Some(p) = labels.get(label::DISPOSABLE) {
            v["disposable"] = json!(p);
        }
        if let Some(f) = labels.get(label::FOLDER) {
            v["folder"] = json!(f);
        }
        Ok(v)
    }

    async fn stats(&self, id: &str) -> Result<Value, ComputerError> {
        let c = self.0.m.inspect(id).await?;
        if c.state.and_then(|s| s.running) != Some(true) {
            return Ok(json!({ "running": false }));
        }
        let docker = self.0.m.engine.docker().await?;
        let mut s = docker.stats(
            id,
            Some(bollard::query_parameters::StatsOptions {
                stream: false,
                one_shot: true,
            }),
        );
        let Some(Ok(st)) = s.next().await else {
            return Ok(json!({ "running": true }));
        };
        let st = serde_json::to_value(&st).unwrap_or(Value::Null);
        let cpu = |k: &str, f: &str| st[k]["cpu_usage"][f].as_f64().unwrap_or(0.0);
        let sys = |k: &str| st[k]["system_cpu_usage"].as_f64().unwrap_or(0.0);
        let d_cpu = cpu("cpu_stats", "total_usage") - cpu("precpu_stats", "total_usage");
        let d_sys = sys("cpu_stats") - sys("precpu_stats");
        let n = st["cpu_stats"]["online_cpus"].as_f64().unwrap_or(1.0);
        let pct = if d_sys > 0.0 {
            d_cpu / d_sys * n * 100.0
        } else {
            0.0
        };
        Ok(json!({
            "running": true,
            "cpuPercent": pct,
            "memoryBytes": st["memory_stats"]["usage"],
            "memoryLimitBytes": st["memory_stats"]["limit"],
        }))
    }

    async fn make(&self, id: &str, data: &str) -> Result<(), ComputerError> {
        if !valid_id(id) {
            return Err(ComputerError::Invalid(format!(
                "uri: {id} is not a machine id ([a-z0-9][a-z0-9_-]{{0,62}})"
            )));
        }
        let body: Value = serde_json::from_str(data)
            .map_err(|e| ComputerError::Invalid(format!("data: not JSON: {e}")))?;
        let Value::Object(body) = body else {
            return Err(ComputerError::Invalid("data: a JSON object".into()));
        };
        let mounts_ok = self.0.m.opts.body_mounts;
        for k in body.keys() {
            let allowed =
                FIELDS.contains(&k.as_str()) || (mounts_ok && (k == "folder" || k == "mounts"));
            if !allowed {
                return Err(ComputerError::Invalid(format!(
                    "{k}: not a field of a machine"
                )));
            }
        }
        if let Some(r) = body.get("runtime")
            && r != "docker"
        {
            return Err(ComputerError::Invalid(
                "runtime: the only runtime is docker".into(),
            ));
        }
        if self.0.m.inspect(id).await.is_ok() {
            return Err(ComputerError::Exists(format!(
                "computer://{id} exists already"
            )));
        }
        let named = match body.get("agents") {
            Some(Value::Array(a)) => Some(
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
            ),
            _ => body
                .get("profile")
                .and_then(Value::as_str)
                .and_then(|p| self.0.m.opts.profiles.get(p))
                .and_then(|p| p.agents.clone()),
        };
        // Prepared, needs included, for the agents it names or every agent that runs nested,
        // so a session of one of them finds its state and configuration there.
        let (agents, needs) = self.0.prepared_for(named);
        let (spec, profile) = self.0.m.spec(id, &body, agents)?;
        self.0.m.make(spec, profile.as_ref(), &needs).await
    }
}

fn rpc(e: ComputerError) -> RpcError {
    RpcError::new(e.code(), e.to_string())
}

#[async_trait]
impl ResourceProvider for ComputerResources {
    async fn read(&self, uri: &str) -> Result<ResourceReadResult, RpcError> {
        let (id, part) = split(uri)?;
        let v = match part {
            Some("status") | None => self.status(id).await,
            Some("capabilities") => self.0.m.inspect(id).await.map(|_| {
                json!({
                    "runtime": "docker",
                    "actions": ["create", "destroy", "exec", "start", "stop", "restart"],
                    "resources": ["status", "capabilities", "stats", "state"],
                })
            }),
            Some("stats") => self.stats(id).await,
            Some("state") => self.0.m.inspect(id).await.map(|c| {
                let running = c.state.and_then(|s| s.running) == Some(true);
                json!(if running { "running" } else { "stopped" })
            }),
            Some(other) => Err(ComputerError::NotFound(format!(
                "computer://{id}/{other} does not exist"
            ))),
        }
        .map_err(rpc)?;
        Ok(text(v))
    }

    async fn list(&self, uri: &str) -> Result<ResourceListResult, RpcError> {
        let (id, _) = split(uri)?;
        if !id.is_empty() {
            self.0.m.inspect(id).await.map_err(rpc)?;
            let entries = ["status", "capabilities", "stats", "state"]
                .into_iter()
                .map(|n| DirectoryEntry {
                    name: n.into(),
                    r#type: "file".into(),
                })
                .collect();
            return Ok(ResourceListResult { entries });
        }
        let list = self.0.m.list().await.map_err(rpc)?;
        let entries = list
            .into_iter()
            .filter_map(|c| c.names?.first().cloned())
            .map(|n| DirectoryEntry {
                name: n.trim_start_matches('/').to_owned(),
                r#type: "directory".into(),
            })
            .collect();
        Ok(ResourceListResult { entries })
    }

    async fn resolve(&self, uri: &str) -> Result<ResourceResolveResult, RpcError> {
        let (id, part) = split(uri)?;
        if !id.is_empty() {
            self.0.m.inspect(id).await.map_err(rpc)?;
        }
        let v = json!({
            "uri": uri,
            "type": if part.is_some() { "file" } else { "directory" },
        });
        serde_json::from_value(v).map_err(|e| RpcError::internal(e.to_string()))
    }

    async fn write(&self, uri: &str, data: &str, _create_only: bool) -> Result<(), RpcError> {
        let (id, part) = split(uri)?;
        match part {
            None => self.make(id, data).await.map_err(rpc),
            Some("state") => {
                let state =
                    serde_json::from_str::<String>(data).unwrap_or_else(|_| data.trim().to_owned());
                self.0.m.set_state(id, &state).await.map_err(rpc)
            }
            Some(other) => Err(RpcError::invalid_params(format!(
                "computer://{id}/{other} cannot be written; write the machine or its state"
            ))),
        }
    }

    async fn delete(&self, uri: &str) -> Result<(), RpcError> {
        let (id, part) = split(uri)?;
        if part.is_some() {
            return Err(RpcError::invalid_params(
                "only a whole machine can be deleted",
            ));
        }
        self.0.m.inspect(id).await.map_err(rpc)?;
        if let Ok(mut d) = self.0.m.deleted.lock() {
            d.insert(id.to_owned());
        }
        self.0.m.remove(id).await.map_err(rpc)
    }
}
