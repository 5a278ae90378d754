//! `FakeEngine`: the subset of the Docker Engine API that `@ahpd/computer` uses, served in
//! process on a unix socket in a temporary folder, so machines can be tested with no engine.
//!
//! Containers and images live in memory; volumes are real folders under the temporary folder.
//! A container's main process is recorded, never run. An exec runs its command as a host
//! process, with every argument, the working folder and each variable's value that begins with
//! a mount's target rewritten to that mount's source (a bind's host folder or a volume's
//! folder); its output goes back in the engine's multiplexed framing over the upgraded
//! connection, and its exit code is kept. Killing a container ends its execs with `SIGKILL`.
//! Every request is recorded (method, path without the API version, query, JSON body).
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use testkit::{FakeEngine, FakeImage};
//! let engine = FakeEngine::start()?;
//! engine.image(FakeImage::new("ahpd-test/glibc:1").user("agent"));
//! let uri = engine.uri(); // unix:///tmp/…/docker.sock
//! # Ok(()) }
//! ```

mod common;
mod exec;
mod server;
mod store;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::{Notify, watch};

/// The message runc gives for an entry point whose loader is missing, as an image without glibc
/// produces for a glibc build.
pub const NO_LOADER: &str = "failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: no such file or directory: unknown";

/// An image the fake engine holds.
#[derive(Debug, Clone, Default)]
pub struct FakeImage {
    /// `repo:tag`.
    pub name: String,
    /// `Config.User`.
    pub user: Option<String>,
    /// `Config.Env`.
    pub env: Vec<String>,
    /// `Config.WorkingDir`.
    pub workdir: Option<String>,
    /// Whether a container of it fails to start with runc's missing-loader message.
    pub no_glibc: bool,
    /// Files the image holds (for archive reads), by absolute path.
    pub files: BTreeMap<String, Vec<u8>>,
}

impl FakeImage {
    /// An image with nothing declared.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            ..Self::default()
        }
    }

    /// Its user.
    pub fn user(mut self, user: &str) -> Self {
        self.user = Some(user.to_owned());
        self
    }

    /// Adds a variable (`K=V`).
    pub fn env(mut self, kv: &str) -> Self {
        self.env.push(kv.to_owned());
        self
    }

    /// Its working folder.
    pub fn workdir(mut self, dir: &str) -> Self {
        self.workdir = Some(dir.to_owned());
        self
    }

    /// Without glibc: starting a container of it fails.
    pub fn no_glibc(mut self) -> Self {
        self.no_glibc = true;
        self
    }

    /// A file inside it.
    pub fn file(mut self, path: &str, data: impl Into<Vec<u8>>) -> Self {
        self.files.insert(path.to_owned(), data.into());
        self
    }
}

/// An operation a test can make fail once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOn {
    /// `POST /containers/create`.
    Create,
    /// `POST /containers/{id}/start`.
    Start,
    /// `POST /images/create` (a pull).
    Pull,
}

/// One request the engine received.
#[derive(Debug, Clone)]
pub struct EngineRequest {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path without the `/v1.xx` prefix.
    pub path: String,
    /// Decoded query pairs.
    pub query: Vec<(String, String)>,
    /// The body when it was JSON.
    pub body: Option<Value>,
}

impl EngineRequest {
    /// A query value.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A mount of a container, resolved to a host folder.
#[derive(Debug, Clone)]
pub struct FakeMount {
    /// The volume's name; `None` for a bind.
    pub name: Option<String>,
    /// The host path (a bind's source or the volume's folder).
    pub source: PathBuf,
    /// The path inside.
    pub target: String,
    /// Writable.
    pub rw: bool,
}

/// A container as the fake holds it.
#[derive(Debug, Clone)]
pub struct FakeContainer {
    /// The long id.
    pub id: String,
    /// The name, without a slash.
    pub name: String,
    /// The create body as sent.
    pub config: Value,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Mounts, in bind order.
    pub mounts: Vec<FakeMount>,
    /// `created`, `running` or `exited`.
    pub status: String,
    /// The main process's exit code.
    pub exit_code: i64,
    /// Whether it was marked out of memory.
    pub oom_killed: bool,
    /// Its own files: what no mount covers.
    pub scratch: PathBuf,
    /// When it was created.
    pub created: String,
}

/// An exec as the fake holds it.
#[derive(Debug, Clone)]
pub struct FakeExec {
    /// Its id.
    pub id: String,
    /// The container's name.
    pub container: String,
    /// The exec-create body as sent.
    pub config: Value,
    /// The command as asked (not rewritten).
    pub cmd: Vec<String>,
    /// The variables as asked.
    pub env: Vec<String>,
    /// Whether its process runs.
    pub running: bool,
    /// Its exit code once ended.
    pub exit_code: Option<i64>,
    /// The host process id while it runs.
    pub pid: Option<u32>,
}

/// A tar entry written through `PUT …/archive`, with the owner the tar gave it.
#[derive(Debug, Clone)]
pub struct Upload {
    /// The container.
    pub container: String,
    /// The path inside it (folder + entry name).
    pub path: String,
    /// Owner ids in the tar header.
    pub uid: u64,
    /// Group id.
    pub gid: u64,
}

pub(crate) struct State {
    pub(crate) root: PathBuf,
    pub(crate) images: HashMap<String, FakeImage>,
    pub(crate) containers: BTreeMap<String, FakeContainer>,
    pub(crate) volumes: BTreeMap<String, (PathBuf, BTreeMap<String, String>)>,
    pub(crate) execs: BTreeMap<String, FakeExec>,
    /// Kill switches of running execs, by exec id.
    pub(crate) kills: HashMap<String, Arc<Notify>>,
    pub(crate) failures: VecDeque<(FailOn, u16, String)>,
    pub(crate) requests: Vec<EngineRequest>,
    pub(crate) uploads: Vec<Upload>,
    pub(crate) counter: u64,
}

pub(crate) struct Shared {
    pub(crate) state: Mutex<State>,
    pub(crate) changed: Notify,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The running fake engine; dropping it stops the server and removes its folder.
pub struct FakeEngine {
    dir: tempfile::TempDir,
    socket: PathBuf,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
}

impl FakeEngine {
    /// Binds a socket in a new temporary folder and serves on a thread of its own.
    pub fn start() -> std::io::Result<FakeEngine> {
        let dir = tempfile::Builder::new().prefix("fake-engine").tempdir()?;
        let socket = dir.path().join("docker.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket)?;
        listener.set_nonblocking(true)?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                root: dir.path().to_path_buf(),
                images: HashMap::new(),
                containers: BTreeMap::new(),
                volumes: BTreeMap::new(),
                execs: BTreeMap::new(),
                kills: HashMap::new(),
                failures: VecDeque::new(),
                requests: Vec::new(),
                uploads: Vec::new(),
                counter: 0,
            }),
            changed: Notify::new(),
        });
        let (stop, stop_rx) = watch::channel(false);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let s = shared.clone();
        std::thread::Builder::new()
            .name("testkit-fake-engine".into())
            .spawn(move || runtime.block_on(server::serve(listener, s, stop_rx)))?;
        Ok(FakeEngine {
            dir,
            socket,
            shared,
            stop,
        })
    }

    /// `unix://<socket>`.
    pub fn uri(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The socket's path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The engine's temporary folder.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Declares an image.
    pub fn image(&self, image: FakeImage) {
        self.shared.lock().images.insert(image.name.clone(), image);
    }

    /// Makes the next such operation fail with `status` and the engine's `message`.
    pub fn fail(&self, on: FailOn, status: u16, message: &str) {
        self.shared
            .lock()
            .failures
            .push_back((on, status, message.to_owned()));
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<EngineRequest> {
        self.shared.lock().requests.clone()
    }

    /// Requests with this method whose path matches `pred`.
    pub fn requests_to(&self, method: &str, pred: impl Fn(&str) -> bool) -> Vec<EngineRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method && pred(&r.path))
            .collect()
    }

    /// A container by name.
    pub fn container(&self, name: &str) -> Option<FakeContainer> {
        self.shared.lock().containers.get(name).cloned()
    }

    /// Every container.
    pub fn containers(&self) -> Vec<FakeContainer> {
        self.shared.lock().containers.values().cloned().collect()
    }

    /// Every exec, oldest first.
    pub fn execs(&self) -> Vec<FakeExec> {
        let mut v: Vec<FakeExec> = self.shared.lock().execs.values().cloned().collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// Volume names with their folders.
    pub fn volumes(&self) -> BTreeMap<String, PathBuf> {
        self.shared
            .lock()
            .volumes
            .iter()
            .map(|(k, (p, _))| (k.clone(), p.clone()))
            .collect()
    }

    /// Tar entries written into containers.
    pub fn uploads(&self) -> Vec<Upload> {
        self.shared.lock().uploads.clone()
    }

    /// Adds a container directly (not through the API), created and running, with these labels.
    pub fn insert_container(&self, name: &str, image: &str, labels: &[(&str, &str)]) {
        let mut st = self.shared.lock();
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let body = serde_json::json!({ "Image": image, "Labels": labels });
        let c = server::new_container(&mut st, name, body, Vec::new());
        let mut c = c;
        c.status = "running".into();
        st.containers.insert(name.to_owned(), c);
        drop(st);
        self.shared.changed.notify_waiters();
    }

    /// Kills a container as the engine would (its execs get `SIGKILL`, it exits `137`), or
    /// marks it out of memory.
    pub fn kill(&self, name: &str, oom: bool) -> bool {
        server::kill(&self.shared, name, 137, oom)
    }

    /// Waits until `check` holds over the engine's requests (checked on every change).
    pub async fn wait_for<T>(&self, mut check: impl FnMut(&FakeEngine) -> Option<T>) -> T {
        loop {
            let notified = self.shared.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(t) = check(self) {
                return t;
            }
            notified.await;
        }
    }
}

impl Drop for FakeEngine {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        let kills: Vec<Arc<Notify>> = self.shared.lock().kills.values().cloned().collect();
        for k in kills {
            k.notify_one();
        }
    }
}
