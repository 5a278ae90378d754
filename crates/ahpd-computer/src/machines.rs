//! This daemon's machines: finding them by label, making them (image checked, container
//! created with the binary folder, mounts and volumes, volumes seeded, started), changing
//! their state and removing them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use ahpd_sdk::machine::MachineNeed;
use ahpd_sdk::plugin::SecretReader;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerSummary, HostConfig,
};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, ListContainersOptions, RemoveContainerOptions,
    RemoveVolumeOptions, StopContainerOptions,
};
use futures::StreamExt;

use crate::ComputerError;
use crate::binary::{BIN_DIR, Build};
use crate::engine::{Engine, is_conflict, is_not_found, words};
use crate::needs::{self, Bind};
use crate::options::{Options, Profile, Pull, StateMode};
use crate::started;

/// Label keys.
pub mod label {
    /// Every machine of any daemon.
    pub const COMPUTER: &str = "ahpd.computer";
    /// The daemon's id.
    pub const HOST: &str = "ahpd.host";
    /// Providers the machine is prepared for.
    pub const AGENTS: &str = "ahpd.agents";
    /// The profile it was made from.
    pub const PROFILE: &str = "ahpd.profile";
    /// The disposable profile it was made for.
    pub const DISPOSABLE: &str = "ahpd.disposable";
    /// Made for one session only.
    pub const ALONE: &str = "ahpd.disposable.alone";
    /// The session it was made for.
    pub const SESSION: &str = "ahpd.session";
    /// `volume` or `host`.
    pub const STATE: &str = "ahpd.state";
    /// The build file its inner hosts run.
    pub const INIT: &str = "ahpd.init";
    /// Its host folder.
    pub const FOLDER: &str = "ahpd.folder";
}

/// What a machine is made from: the merged body, profile and plugin values.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// The id (container name).
    pub id: String,
    /// The image.
    pub image: String,
    /// The profile's name.
    pub profile: Option<String>,
    /// Limits and placement.
    pub cpus: Option<String>,
    /// Memory limit.
    pub memory: Option<String>,
    /// Network.
    pub network: Option<String>,
    /// Machine user.
    pub user: Option<String>,
    /// Working folder.
    pub workdir: Option<String>,
    /// Binds in order: plugin, profile, body.
    pub binds: Vec<Bind>,
    /// A host folder shown at the same path.
    pub folder: Option<String>,
    /// Providers it is prepared for.
    pub agents: Vec<String>,
    /// Extra labels (disposable, session).
    pub labels: HashMap<String, String>,
}

/// The machines of this daemon.
pub struct Machines {
    pub(crate) engine: Engine,
    pub(crate) opts: Options,
    pub(crate) host_id: String,
    pub(crate) build: Build,
    pub(crate) secrets: Option<Arc<dyn SecretReader>>,
    /// Held from the count to the create, so `max` holds under concurrent makes.
    pub(crate) making: tokio::sync::Mutex<()>,
    /// Machines deleted through this daemon, so their sessions get the deleted sentence.
    pub(crate) deleted: Mutex<BTreeSet<String>>,
}

/// The container a spec makes: the machine's init as its entry point, the limits and mounts.
fn create_body(
    spec: &Spec,
    binds: Vec<String>,
    labels: &HashMap<String, String>,
    entry: &str,
) -> Result<ContainerCreateBody, ComputerError> {
    let host_config = HostConfig {
        binds: Some(binds),
        nano_cpus: spec.cpus.as_deref().map(parse_cpus).transpose()?,
        memory: spec.memory.as_deref().map(parse_memory).transpose()?,
        network_mode: spec.network.clone(),
        init: Some(false),
        ..Default::default()
    };
    Ok(ContainerCreateBody {
        image: Some(spec.image.clone()),
        entrypoint: Some(vec![entry.to_owned()]),
        cmd: Some(vec!["machine-init".into()]),
        labels: Some(labels.clone()),
        user: spec.user.clone(),
        working_dir: spec.workdir.clone(),
        host_config: Some(host_config),
        ..Default::default()
    })
}

/// Whether an id can name a machine.
pub fn valid_id(id: &str) -> bool {
    let b = id.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

fn parse_cpus(s: &str) -> Result<i64, ComputerError> {
    s.parse::<f64>()
        .ok()
        .filter(|c| *c > 0.0)
        .map(|c| (c * 1e9) as i64)
        .ok_or_else(|| ComputerError::Invalid(format!("cpus: {s} is not a number of CPUs")))
}

fn parse_memory(s: &str) -> Result<i64, ComputerError> {
    let t = s.trim().to_lowercase();
    let (num, mul) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 1i64 << 10),
        Some('m') => (&t[..t.len() - 1], 1 << 20),
        Some('g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t.as_str(), 1),
    };
    num.parse::<f64>()
        .ok()
        .filter(|n| *n > 0.0)
        .map(|n| (n * mul as f64) as i64)
        .ok_or_else(|| ComputerError::Invalid(format!("memory: {s} is not a size such as 512m")))
}

impl Machines {
    /// The labels that mark a container as this daemon's.
    fn ours(&self, labels: Option<&HashMap<String, String>>) -> bool {
        labels.is_some_and(|l| {
            l.get(label::COMPUTER).map(String::as_str) == Some("1")
                && l.get(label::HOST) == Some(&self.host_id)
        })
    }

    /// Every container of this daemon, in any state.
    pub async fn list(&self) -> Result<Vec<ContainerSummary>, ComputerError> {
        let docker = self.engine.docker().await?;
        let mut filters = HashMap::new();
        filters.insert(
            "label".to_owned(),
            vec![
                format!("{}=1", label::COMPUTER),
                format!("{}={}", label::HOST, self.host_id),
            ],
        );
        let all = docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(filters),
                ..Default::default()
            }))
            .await
            .map_err(|e| ComputerError::Failed(words(&e)))?;
        Ok(all
            .into_iter()
            .filter(|c| self.ours(c.labels.as_ref()))
            .collect())
    }

    /// One machine of this daemon; `-32008` for a missing one or another's.
    pub async fn inspect(&self, id: &str) -> Result<ContainerInspectResponse, ComputerError> {
        let docker = self.engine.docker().await?;
        let missing =
            || ComputerError::NotFound(format!("there is no computer called computer://{id}"));
        if !valid_id(id) {
            return Err(missing());
        }
        match docker.inspect_container(id, None).await {
            Ok(c) if self.ours(c.config.as_ref().and_then(|c| c.labels.as_ref())) => Ok(c),
            Ok(_) => Err(missing()),
            Err(e) if is_not_found(&e) => Err(missing()),
            Err(e) => Err(ComputerError::Failed(words(&e))),
        }
    }

    /// Makes the image present, or says why it cannot be; its `Config.User` when it names one.
    async fn ensure_image(&self, image: &str) -> Result<Option<String>, ComputerError> {
        let docker = self.engine.docker().await?;
        match docker.inspect_image(image).await {
            Ok(i) => return Ok(i.config.and_then(|c| c.user).filter(|u| !u.is_empty())),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(ComputerError::Failed(words(&e))),
        }
        if self.opts.pull == Pull::Never {
            return Err(ComputerError::Invalid(format!(
                "the image {image} is not on this engine and pull is never; build or load it there first"
            )));
        }
        tracing::info!("pulling the image {image}");
        let mut pulled = docker.create_image(
            Some(CreateImageOptions {
                from_image: Some(image.to_owned()),
                ..Default::default()
            }),
            None,
            None,
        );
        while let Some(step) = pulled.next().await {
            step.map_err(|e| {
                ComputerError::Failed(format!("cannot pull the image {image}: {}", words(&e)))
            })?;
        }
        Ok(docker
            .inspect_image(image)
            .await
            .ok()
            .and_then(|i| i.config)
            .and_then(|c| c.user)
            .filter(|u| !u.is_empty()))
    }

    /// Makes a machine: counted against `max`, created, seeded and started. A failure leaves
    /// no container.
    pub async fn make(
        &self,
        mut spec: Spec,
        profile: Option<&Profile>,
        needs: &BTreeMap<String, MachineNeed>,
    ) -> Result<(), ComputerError> {
        let _held = self.making.lock().await;
        let count = self.list().await?.len();
        if count >= self.opts.max as usize {
            return Err(ComputerError::Limit(format!(
                "this host already has {} machines, its limit: `ahpd machines list` shows them, `ahpd machines rm <id>` removes one and `ahpd machines prune` the stopped and disposable ones left; or raise max",
                self.opts.max
            )));
        }
        let docker = self.engine.docker().await?;
        // Seeded files belong to the machine's user: the option's, else the image's own.
        let image_user = self.ensure_image(&spec.image).await?;
        let seed_user = spec.user.clone().or(image_user);
        let mode = profile.map(|p| p.state).unwrap_or_default();
        let provider = spec.agents.first().cloned().unwrap_or_default();
        let fixed = needs::fix(
            needs,
            &provider,
            &spec.id,
            spec.profile.as_deref().zip(profile),
            &self.opts,
        )
        .map_err(ComputerError::Invalid)?;
        let binds = self.binds(&spec, &fixed)?;
        let labels = self.labels(&mut spec, mode);
        let entry = format!("{BIN_DIR}/{}", self.build.file);
        let body = create_body(&spec, binds, &labels, &entry)?;
        // A volume carries the labels that say whose it is, not the machine's others.
        let volume_labels: HashMap<String, String> = [label::COMPUTER, label::HOST, label::PROFILE]
            .into_iter()
            .filter_map(|k| labels.get(k).map(|v| (k.to_owned(), v.clone())))
            .collect();
        make_volumes(docker, &fixed.volumes, &volume_labels).await?;
        docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(spec.id.clone()),
                    ..Default::default()
                }),
                body,
            )
            .await
            .map_err(|e| {
                if is_conflict(&e) {
                    ComputerError::Exists(format!("computer://{} exists already", spec.id))
                } else {
                    ComputerError::Failed(format!(
                        "cannot make computer://{}: {}",
                        spec.id,
                        words(&e)
                    ))
                }
            })?;
        let started = async {
            crate::seed::seed_all(
                docker,
                &spec.image,
                &entry,
                seed_user.as_deref(),
                &fixed.volumes,
                &volume_labels,
            )
            .await?;
            docker
                .start_container(&spec.id, None)
                .await
                .map_err(|e| self.start_error(&spec.image, &e))?;
            started::check(docker, &spec.id, &spec.image, &entry, &self.opts).await
        };
        if let Err(e) = started.await {
            let _ = self.remove(&spec.id).await;
            return Err(e);
        }
        tracing::info!(machine = %spec.id, image = %spec.image, "made computer://{}", spec.id);
        Ok(())
    }

    /// A machine's labels: the spec's own, then the ones that make it this daemon's and say
    /// what it was made from.
    fn labels(&self, spec: &mut Spec, mode: StateMode) -> HashMap<String, String> {
        let mut labels = std::mem::take(&mut spec.labels);
        labels.insert(label::COMPUTER.into(), "1".into());
        labels.insert(label::HOST.into(), self.host_id.clone());
        labels.insert(label::AGENTS.into(), spec.agents.join(","));
        labels.insert(label::INIT.into(), self.build.file.clone());
        labels.insert(
            label::STATE.into(),
            if mode == StateMode::Host {
                "host"
            } else {
                "volume"
            }
            .into(),
        );
        if let Some(p) = &spec.profile {
            labels.insert(label::PROFILE.into(), p.clone());
        }
        if let Some(f) = &spec.folder {
            labels.insert(label::FOLDER.into(), f.clone());
        }
        labels
    }

    /// The engine's binds of a machine: the build folder, then the spec's and the needs'
    /// mounts (two at one target refused), then the state volumes.
    fn binds(&self, spec: &Spec, fixed: &needs::Fixed) -> Result<Vec<String>, ComputerError> {
        let mut binds: Vec<String> = vec![format!("{}:{BIN_DIR}:ro", self.build.dir.display())];
        let mut targets = BTreeMap::new();
        for b in spec.binds.iter().chain(&fixed.binds) {
            if let Some(other) = targets.insert(b.target.clone(), b.source.clone())
                && other != b.source
            {
                return Err(ComputerError::Invalid(format!(
                    "the mounts {other} and {} both want {}",
                    b.source, b.target
                )));
            }
            binds.push(b.spec());
            // A writable repository's .git stays read-only, so nothing inside plants hooks
            // or configuration the host's git would run.
            let git = std::path::Path::new(&b.source).join(".git");
            if !b.read_only && git.is_dir() {
                binds.push(format!("{}:{}/.git:ro", git.display(), b.target));
            }
        }
        binds.extend(
            fixed
                .volumes
                .iter()
                .map(|v| format!("{}:{}", v.name, v.target)),
        );
        Ok(binds)
    }

    /// The sentence of a failed start: an image that cannot run the build gets the glibc one.
    fn start_error(&self, image: &str, e: &bollard::errors::Error) -> ComputerError {
        crate::started::start_sentence(image, &words(e))
    }

    /// Removes a machine by force, with its volumes made for it alone.
    pub async fn remove(&self, id: &str) -> Result<(), ComputerError> {
        let docker = self.engine.docker().await?;
        let volumes: Vec<String> = match docker.inspect_container(id, None).await {
            Ok(c) => c
                .mounts
                .unwrap_or_default()
                .into_iter()
                .filter_map(|m| m.name)
                .filter(|n| n.starts_with(&format!("ahpd-state-{id}-")))
                .collect(),
            Err(_) => Vec::new(),
        };
        match docker
            .remove_container(
                id,
                Some(RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                }),
            )
            .await
        {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(ComputerError::Failed(words(&e))),
        }
        for v in volumes {
            let _ = docker
                .remove_volume(&v, Some(RemoveVolumeOptions { force: true }))
                .await;
        }
        tracing::info!(machine = %id, "removed computer://{id}");
        Ok(())
    }

    /// Starts a stopped machine.
    pub async fn ensure_running(
        &self,
        id: &str,
    ) -> Result<ContainerInspectResponse, ComputerError> {
        let c = self.inspect(id).await?;
        if c.state.as_ref().and_then(|s| s.running) == Some(true) {
            return Ok(c);
        }
        let docker = self.engine.docker().await?;
        let image = c
            .config
            .as_ref()
            .and_then(|c| c.image.clone())
            .unwrap_or_default();
        docker
            .start_container(id, None)
            .await
            .map_err(|e| self.start_error(&image, &e))?;
        let entry = format!(
            "{BIN_DIR}/{}",
            c.config
                .as_ref()
                .and_then(|c| c.labels.as_ref())
                .and_then(|l| l.get(label::INIT))
                .unwrap_or(&self.build.file)
        );
        started::check(docker, id, &image, &entry, &self.opts).await?;
        self.inspect(id).await
    }

    /// `running`, `stopped` or `restarted`.
    pub async fn set_state(&self, id: &str, state: &str) -> Result<(), ComputerError> {
        self.inspect(id).await?;
        let docker = self.engine.docker().await?;
        let stop = Some(StopContainerOptions {
            t: Some(2),
            ..Default::default()
        });
        let r = match state {
            "running" => return self.ensure_running(id).await.map(|_| ()),
            "stopped" => docker.stop_container(id, stop).await,
            "restarted" => {
                docker
                    .restart_container(
                        id,
                        Some(bollard::query_parameters::RestartContainerOptions {
                            t: Some(2),
                            ..Default::default()
                        }),
                    )
                    .await
            }
            other => {
                return Err(ComputerError::Invalid(format!(
                    "state: {other} is not running, stopped or restarted"
                )));
            }
        };
        r.map_err(|e| ComputerError::Failed(words(&e)))
    }
}

/// Makes a machine's state volumes before its container, so they carry this daemon's labels;
/// one that exists is kept as it is (a profile's next machine finds what the last one left).
async fn make_volumes(
    docker: &bollard::Docker,
    volumes: &[needs::Volume],
    labels: &HashMap<String, String>,
) -> Result<(), ComputerError> {
    for v in volumes {
        docker
            .create_volume(bollard::models::VolumeCreateRequest {
                name: Some(v.name.clone()),
                labels: Some(labels.clone()),
                ..Default::default()
            })
            .await
            .map_err(|e| {
                ComputerError::Failed(format!("cannot make the volume {}: {}", v.name, words(&e)))
            })?;
    }
    Ok(())
}
