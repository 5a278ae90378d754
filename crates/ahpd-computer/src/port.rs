//! The host's side of machines: preparing one for a session, entering and leaving it (with the
//! disposable timers), starting inner hosts over exec streams, and adoption after a restart.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ahpd_sdk::ahp_types::commands::SessionConfigValueItem;
use ahpd_sdk::ahp_types::state::SessionConfigPropertySchema;
use ahpd_sdk::machine::{
    ComputerPort, InnerEnd, InnerProcess, InnerStart, KeptSession, MachineError, MachineNeed,
    NestedNeeds, PrepareRequest,
};
use async_trait::async_trait;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures::StreamExt;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::task::AbortHandle;

use crate::ComputerError;
use crate::binary::BIN_DIR;
use crate::machines::{Machines, label};
use crate::needs;
use crate::options::{AtStop, StateMode};

/// Armed removals by machine: a ticket (so a superseded timer knows it) and its task.
type Timers = Arc<Mutex<HashMap<String, (u64, AbortHandle)>>>;

/// The plugin's machines as the host sees them.
pub struct Computers {
    pub(crate) m: Arc<Machines>,
    sessions: Mutex<HashMap<String, BTreeSet<String>>>,
    timers: Timers,
    /// Read-held by each removal under way, so a shutdown can wait for them all.
    removing: Arc<tokio::sync::RwLock<()>>,
    tickets: AtomicU64,
    closing: AtomicBool,
    /// The host's agents that run nested, for machines made by a client's write.
    nested: Mutex<Vec<NestedNeeds>>,
    /// The disposable machines this host made, removed at its stop when `disposableAtStop`
    /// says so.
    made: Mutex<BTreeSet<String>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Computers {
    /// Over these machines.
    pub fn new(m: Arc<Machines>) -> Self {
        Self {
            m,
            sessions: Mutex::new(HashMap::new()),
            timers: Arc::default(),
            removing: Arc::default(),
            tickets: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            nested: Mutex::new(Vec::new()),
            made: Mutex::new(BTreeSet::new()),
        }
    }

    /// What a machine made by a write is prepared for: the providers named (by the body or
    /// the profile), else every agent that runs nested; with those agents' needs.
    pub(crate) fn prepared_for(
        &self,
        named: Option<Vec<String>>,
    ) -> (Vec<String>, BTreeMap<String, MachineNeed>) {
        let nested = lock(&self.nested).clone();
        let providers = named.unwrap_or_else(|| {
            nested
                .iter()
                .map(|a| a.provider.clone())
                .collect::<Vec<_>>()
        });
        let mut needs = BTreeMap::new();
        for a in nested.iter().filter(|a| providers.contains(&a.provider)) {
            needs.extend(a.needs.clone());
        }
        (providers, needs)
    }

    /// How many sessions are in each machine now.
    pub fn sessions_in(&self, id: &str) -> usize {
        lock(&self.sessions).get(id).map_or(0, BTreeSet::len)
    }

    fn disarm(&self, id: &str) {
        if let Some((_, t)) = lock(&self.timers).remove(id) {
            t.abort();
        }
    }

    /// Arms the removal of a disposable machine after its profile's delay.
    fn arm(&self, id: &str, profile: Option<&str>) {
        if self.closing.load(Ordering::SeqCst) {
            return;
        }
        let delay = profile
            .and_then(|p| self.m.opts.profiles.get(p))
            .and_then(|p| p.disposable_delay)
            .unwrap_or(self.m.opts.disposable_delay);
        let m = self.m.clone();
        let machine = id.to_owned();
        let timers = self.timers.clone();
        let removing = self.removing.clone();
        let ticket = self.tickets.fetch_add(1, Ordering::SeqCst);
        // Held while spawning, so the task cannot look for its entry before it is there.
        let mut armed = lock(&self.timers);
        let task = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let _under_way = removing.read_owned().await;
            // Fires only while still armed: a disarm or a shutdown took the entry first.
            let mine = {
                let mut t = lock(&timers);
                let mine = t.get(&machine).is_some_and(|(n, _)| *n == ticket);
                if mine {
                    t.remove(&machine);
                }
                mine
            };
            if !mine {
                return;
            }
            if let Err(e) = m.remove(&machine).await {
                tracing::warn!(machine = %machine, "cannot remove the disposable computer://{machine}: {e}");
            }
        });
        if let Some((_, old)) = armed.insert(id.to_owned(), (ticket, task.abort_handle())) {
            old.abort();
        }
    }

    /// At the daemon's stop: armed removals are cleared, not fired, and those under way are
    /// awaited. Nothing is armed afterwards. With `disposableAtStop: remove` the disposable
    /// machines this host made go now, whoever was in them (their sessions were closed).
    pub async fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        let armed: Vec<(u64, AbortHandle)> = lock(&self.timers).drain().map(|(_, t)| t).collect();
        for (_, task) in armed {
            task.abort();
        }
        let _all_done = self.removing.write().await;
        if self.m.opts.disposable_at_stop != AtStop::Remove {
            return;
        }
        let made: Vec<String> = std::mem::take(&mut *lock(&self.made)).into_iter().collect();
        for id in made {
            if let Err(e) = self.m.remove(&id).await {
                tracing::warn!(machine = %id, "cannot remove the disposable computer://{id}: {e}");
            }
        }
    }

    async fn prepare_existing(
        &self,
        id: &str,
        req: &PrepareRequest,
    ) -> Result<String, ComputerError> {
        let c = self.m.inspect(id).await?;
        let labels = c
            .config
            .as_ref()
            .and_then(|c| c.labels.clone())
            .unwrap_or_default();
        let agents: Vec<&str> = labels
            .get(label::AGENTS)
            .map(|a| a.split(',').filter(|s| !s.is_empty()).collect())
            .unwrap_or_default();
        if !agents.is_empty() && !agents.contains(&req.provider.as_str()) {
            return Err(ComputerError::Invalid(format!(
                "computer://{id} is prepared for {}, not {}",
                agents.join(", "),
                req.provider
            )));
        }
        if labels.get(label::ALONE).map(String::as_str) == Some("true")
            && labels.get(label::SESSION) != Some(&req.session)
        {
            return Err(ComputerError::Invalid(format!(
                "computer://{id} was made for another session"
            )));
        }
        self.m.ensure_running(id).await?;
        Ok(id.to_owned())
    }

    async fn prepare_disposable(
        &self,
        name: &str,
        req: &PrepareRequest,
    ) -> Result<String, ComputerError> {
        let profile = self
            .m
            .opts
            .profile(name)
            .map_err(|e| ComputerError::Invalid(e.to_string()))?
            .clone();
        if !profile.disposable {
            return Err(ComputerError::Invalid(format!(
                "the machine profile {name} is not disposable"
            )));
        }
        let id = format!("{}-{:08x}", self.m.opts.prefix, fastrand::u32(..));
        let mut body = serde_json::Map::new();
        body.insert("profile".into(), json!(name));
        let (mut spec, _) = self.m.spec(&id, &body, vec![req.provider.clone()])?;
        if profile.agents.is_none() {
            spec.agents = vec![req.provider.clone()];
        }
        if profile.session_folder
            && let Some(f) = &req.folder
        {
            let f = f.to_string_lossy().into_owned();
            spec.binds.push(needs::Bind {
                source: f.clone(),
                target: f.clone(),
                read_only: false,
            });
            spec.folder = Some(f.clone());
            spec.workdir = spec.workdir.or(Some(f));
        }
        spec.labels
            .insert(label::DISPOSABLE.into(), name.to_owned());
        spec.labels
            .insert(label::SESSION.into(), req.session.clone());
        if profile.disposable_alone {
            spec.labels.insert(label::ALONE.into(), "true".into());
        }
        self.m.make(spec, Some(&profile), &req.needs).await?;
        lock(&self.made).insert(id.clone());
        Ok(id)
    }

    async fn start(&self, id: &str, start: InnerStart) -> Result<InnerProcess, ComputerError> {
        let c = self.m.ensure_running(id).await?;
        let (env, working, build) = self.launch(id, c, &start)?;
        let docker = self.m.engine.docker().await?;
        let mut cmd = vec![
            format!("{BIN_DIR}/{build}"),
            "--stdio".into(),
            "--plugin".into(),
            start.plugin.clone(),
        ];
        if start.leave_unfinished {
            cmd.push("--leave-unfinished".into());
        }
        let exec = docker
            .create_exec(
                id,
                CreateExecOptions {
                    attach_stdin: Some(true),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    tty: Some(false),
                    env: Some(env),
                    cmd: Some(cmd),
                    working_dir: working.clone(),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| ComputerError::Failed(crate::engine::words(&e)))?;
        let started = docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: None,
                }),
            )
            .await
            .map_err(|e| ComputerError::Failed(crate::engine::words(&e)))?;
        let StartExecResults::Attached { mut output, input } = started else {
            return Err(ComputerError::Failed(
                "the engine started the inner host detached".into(),
            ));
        };
        let (mut out_w, out_r) = tokio::io::duplex(256 * 1024);
        let (mut err_w, err_r) = tokio::io::duplex(64 * 1024);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let m = self.m.clone();
        let machine = id.to_owned();
        let exec_id = exec.id.clone();
        tokio::spawn(async move {
            while let Some(item) = output.next().await {
                match item {
                    Ok(LogOutput::StdOut { message }) => {
                        if out_w.write_all(&message).await.is_err() {
                            break;
                        }
                    }
                    Ok(LogOutput::StdErr { message }) => {
                        let _ = err_w.write_all(&message).await;
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
            drop(out_w);
            drop(err_w);
            let _ = tx.send(m.ended(&machine, &exec_id).await);
        });
        Ok(InnerProcess {
            stdin: input,
            stdout: Box::pin(out_r),
            stderr: Box::pin(err_r),
            working_directory: working,
            ended: Box::pin(async move { rx.await.unwrap_or_default() }),
        })
    }

    /// What the inner host of a running machine starts with: its environment (the needs'
    /// variables), the folder it starts in (the session's, when mounted) and its binary.
    fn launch(
        &self,
        id: &str,
        c: bollard::models::ContainerInspectResponse,
        start: &InnerStart,
    ) -> Result<(Vec<String>, Option<String>, String), ComputerError> {
        let config = c.config.clone().unwrap_or_default();
        let labels = config.labels.clone().unwrap_or_default();
        let profile = labels
            .get(label::PROFILE)
            .and_then(|p| self.m.opts.profiles.get(p));
        let mode = match labels.get(label::STATE).map(String::as_str) {
            Some("host") => StateMode::Host,
            _ => StateMode::Volume,
        };
        let mut env = needs::variables(
            &start.needs,
            profile,
            &self.m.opts,
            mode,
            self.m.secrets.as_deref(),
        )
        .map_err(ComputerError::Invalid)?;
        env.push("RUST_LOG=warn".into());
        let binds: Vec<(String, String)> = c
            .mounts
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m.name.is_none())
            .filter_map(|m| Some((m.source?, m.destination?)))
            .collect();
        let working = match start
            .folder
            .as_deref()
            .and_then(|f| needs::map_folder(f, &binds))
        {
            Some(w) => Some(w),
            None => {
                if let Some(f) = &start.folder {
                    tracing::info!(machine = %id, "{} is not mounted in computer://{id}: the session starts in the machine's working folder", f.display());
                }
                config.working_dir.clone().filter(|w| !w.is_empty())
            }
        };
        let build = labels
            .get(label::INIT)
            .cloned()
            .unwrap_or_else(|| self.m.build.file.clone());
        Ok((env, working, build))
    }
}

impl Machines {
    /// How an exec ended, with the machine's state when it is down.
    async fn ended(&self, id: &str, exec: &str) -> InnerEnd {
        let mut end = InnerEnd {
            deleted: lock(&self.deleted).contains(id),
            ..InnerEnd::default()
        };
        let Ok(docker) = self.engine.docker().await else {
            return end;
        };
        if let Ok(x) = docker.inspect_exec(exec).await
            && x.running != Some(true)
        {
            end.code = x.exit_code;
        }
        // A host killed by a signal is often its machine being killed, which the engine may
        // not report yet: its own wait says when the machine is down, bounded in case the
        // machine lives on.
        if end.code.is_some_and(|c| c > 128) {
            let mut down = docker.wait_container(
                id,
                Some(bollard::query_parameters::WaitContainerOptions {
                    condition: "not-running".into(),
                }),
            );
            let _ = tokio::time::timeout(Duration::from_secs(2), down.next()).await;
        }
        if let Ok(c) = docker.inspect_container(id, None).await
            && let Some(s) = c.state
            && s.running != Some(true)
        {
            end.machine_exit_code = s.exit_code;
            end.oom_killed = s.oom_killed.unwrap_or(false);
            if end.code.is_none() || end.code == Some(0) {
                end.code = s.exit_code.filter(|c| *c > 128);
            }
        }
        end
    }
}

fn machine_error(e: ComputerError) -> MachineError {
    match e {
        ComputerError::Invalid(m) | ComputerError::Limit(m) | ComputerError::NotFound(m) => {
            MachineError::Refused(m)
        }
        other => MachineError::Failed(other.to_string()),
    }
}

#[async_trait]
impl ComputerPort for Computers {
    fn setting(&self) -> SessionConfigPropertySchema {
        let v = json!({
            "type": "string",
            "title": "Computer",
            "description": "Where this session's tools run",
            "default": self.m.opts.session_default,
            "sessionMutable": false,
            "enumDynamic": true
        });
        serde_json::from_value(v).unwrap_or_else(|_| SessionConfigPropertySchema {
            r#type: "string".into(),
            title: "Computer".into(),
            description: None,
            default: None,
            r#enum: None,
            enum_labels: None,
            enum_descriptions: None,
            read_only: None,
            items: None,
            min_items: None,
            max_items: None,
            properties: None,
            required: None,
            additional_properties: None,
            enum_dynamic: Some(true),
            session_mutable: Some(false),
        })
    }

    async fn completions(
        &self,
        provider: &str,
        _query: Option<&str>,
    ) -> Vec<SessionConfigValueItem> {
        let mut items = vec![SessionConfigValueItem {
            value: String::new(),
            label: "This host".into(),
            description: None,
        }];
        if let Ok(list) = self.m.list().await {
            for c in list {
                let labels = c.labels.clone().unwrap_or_default();
                let agents = labels.get(label::AGENTS).cloned().unwrap_or_default();
                let prepared = agents.is_empty() || agents.split(',').any(|a| a == provider);
                let alone = labels.get(label::ALONE).map(String::as_str) == Some("true");
                let Some(name) = c.names.as_ref().and_then(|n| n.first()) else {
                    continue;
                };
                if !prepared || alone {
                    continue;
                }
                let what = labels
                    .get(label::FOLDER)
                    .cloned()
                    .or(c.image.clone())
                    .unwrap_or_default();
                let status = c.state.map(|s| s.to_string()).unwrap_or_default();
                items.push(SessionConfigValueItem {
                    value: format!("computer://{}", name.trim_start_matches('/')),
                    label: format!("{what} · {status}"),
                    description: None,
                });
            }
        }
        for (name, p) in &self.m.opts.profiles {
            if p.disposable {
                items.push(SessionConfigValueItem {
                    value: format!("disposable:{name}"),
                    label: p.title.clone().unwrap_or_else(|| name.clone()),
                    description: Some("A machine made for this session".into()),
                });
            }
        }
        items
    }

    async fn prepare(&self, req: PrepareRequest) -> Result<String, MachineError> {
        let r = if let Some(id) = req.value.strip_prefix("computer://") {
            self.prepare_existing(id, &req).await
        } else if let Some(p) = req.value.strip_prefix("disposable:") {
            self.prepare_disposable(p, &req).await
        } else {
            Err(ComputerError::Invalid(format!(
                "computer is \"\", computer://<id> or disposable:<profile>, not {}",
                req.value
            )))
        };
        r.map_err(machine_error)
    }

    async fn enter(&self, id: &str, session: &str) {
        self.disarm(id);
        lock(&self.sessions)
            .entry(id.to_owned())
            .or_default()
            .insert(session.to_owned());
    }

    async fn leave(&self, id: &str, session: &str) {
        let empty = {
            let mut s = lock(&self.sessions);
            let set = s.entry(id.to_owned()).or_default();
            set.remove(session);
            set.is_empty()
        };
        if !empty {
            return;
        }
        if let Ok(c) = self.m.inspect(id).await {
            let labels = c.config.and_then(|c| c.labels).unwrap_or_default();
            if let Some(p) = labels.get(label::DISPOSABLE) {
                self.arm(id, Some(p));
            }
        }
    }

    async fn start_inner(&self, id: &str, start: InnerStart) -> Result<InnerProcess, MachineError> {
        self.start(id, start).await.map_err(machine_error)
    }

    async fn shutdown(&self) {
        self.close().await;
    }

    async fn running(&self, id: &str) -> bool {
        self.m
            .inspect(id)
            .await
            .is_ok_and(|c| c.state.and_then(|s| s.running) == Some(true))
    }

    fn nested_agents(&self, agents: Vec<NestedNeeds>) {
        *lock(&self.nested) = agents;
    }

    async fn adopt(&self, kept: Vec<KeptSession>) {
        let list = match self.m.list().await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("cannot list this daemon's machines: {e}");
                return;
            }
        };
        let named: Vec<String> = list
            .iter()
            .filter_map(|c| c.labels.as_ref()?.get(label::INIT).cloned())
            .collect();
        crate::binary::prune(&self.m.build, &named);
        for c in list {
            let Some(id) = c
                .names
                .as_ref()
                .and_then(|n| n.first())
                .map(|n| n.trim_start_matches('/').to_owned())
            else {
                continue;
            };
            let labels = c.labels.unwrap_or_default();
            let Some(profile) = labels.get(label::DISPOSABLE) else {
                continue;
            };
            let made_for = labels.get(label::SESSION);
            let holders: Vec<&KeptSession> = kept
                .iter()
                .filter(|k| k.machine == id || made_for == Some(&k.session))
                .collect();
            if holders.is_empty() {
                tracing::info!(machine = %id, "computer://{id} has no kept session: it goes after its delay");
                self.arm(&id, Some(profile));
            } else {
                tracing::info!(machine = %id, "computer://{id} is held for its kept session");
                let mut s = lock(&self.sessions);
                let set = s.entry(id.clone()).or_default();
                set.extend(holders.iter().map(|k| k.session.clone()));
            }
        }
    }
}
