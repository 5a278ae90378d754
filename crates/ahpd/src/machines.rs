//! What the daemon adds for sessions in machines: the context a plugin may ask for (the
//! configuration folder, the vault, the daemon's id), what plugins register beyond agents (the
//! machines port, resource providers, `_meta` keys), adoption after a restart, and
//! `ahpd machine-init`, a machine's main process.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ahpd_sdk::ahp_types::common::JsonObject;
use ahpd_sdk::machine::{COMPUTER_KEY, ComputerPort, KeptSession};
use ahpd_sdk::nested::NestedIndex;
use ahpd_sdk::ports::{ResourceProvider, SessionStore};
use serde_json::Value;

use crate::locations::Locations;
use crate::vault::Vault;

/// What a plugin may ask of the daemon while it applies.
#[derive(Clone, Default)]
pub struct Context {
    /// The configuration folder, when it can be written.
    pub dir: Option<PathBuf>,
    /// The vault.
    pub vault: Option<Vault>,
    /// The daemon's id.
    pub host_id: Option<String>,
    /// The folders the daemon serves (`--path`, `paths`).
    pub served: Vec<PathBuf>,
}

/// Whether a folder can be made and written.
fn writable(dir: &Path) -> bool {
    if std::fs::create_dir_all(dir).is_err() {
        return false;
    }
    let probe = dir.join(format!(".ahpd-probe-{}", std::process::id()));
    let ok = std::fs::write(&probe, b"").is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}

/// The daemon's id: 16 hex characters in `host-id` beside the configuration, made once.
fn host_id(dir: &Path) -> Option<String> {
    let path = dir.join("host-id");
    if let Ok(text) = std::fs::read_to_string(&path) {
        let id = text.trim().to_owned();
        if id.len() == 16 && id.chars().all(|c| c.is_ascii_hexdigit()) {
            return Some(id);
        }
    }
    let id = format!("{:016x}", fastrand::u64(..));
    let tmp = dir.join(format!(".host-id.{}", std::process::id()));
    let written = (|| -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(id.as_bytes())?;
        std::fs::rename(&tmp, &path)
    })();
    match written {
        Ok(()) => Some(id),
        Err(e) => {
            tracing::warn!("cannot write {}: {e}", path.display());
            None
        }
    }
}

impl Context {
    /// The context of a run. A `--stdio` host whose folder cannot be written (an inner host in
    /// a machine, say) serves without it, after a `warn`.
    pub fn for_run(loc: &Locations, vault: &Vault, stdio: bool) -> Self {
        let dir = if writable(&loc.dir) {
            Some(loc.dir.clone())
        } else {
            if stdio {
                tracing::warn!(
                    "the configuration folder {} cannot be written: serving without a session store",
                    loc.dir.display()
                );
            }
            None
        };
        Context {
            host_id: dir.as_deref().and_then(host_id),
            dir,
            vault: Some(vault.clone()),
            served: Vec::new(),
        }
    }
}

/// What plugins registered beyond engines and agents.
#[derive(Default)]
pub struct Extras {
    /// The machines port.
    pub computers: Option<Arc<dyn ComputerPort>>,
    /// Resource providers by scheme.
    pub providers: Vec<(String, Arc<dyn ResourceProvider>)>,
    /// Keys for the root state's and `initialize`'s `_meta`.
    pub meta: JsonObject,
    /// How long an inner host has to answer `initialize`.
    pub start_timeout: Duration,
}

impl Extras {
    /// Takes one plugin's registrations.
    pub fn absorb(&mut self, other: Extras, options: &Value) {
        if other.computers.is_some() {
            self.computers = other.computers;
            self.start_timeout = ahpd_computer::ComputerPlugin::start_timeout(options);
        }
        self.providers.extend(other.providers);
        self.meta.extend(other.meta);
    }
}

/// Hands the machines port the kept sessions that name machines, in the background, and tells
/// `nested` where their conversations live.
pub fn adopt(port: Arc<dyn ComputerPort>, store: &dyn SessionStore, nested: &NestedIndex) {
    let records = store.load().unwrap_or_default();
    nested.learn(&records);
    let kept: Vec<KeptSession> = records
        .into_iter()
        .filter_map(|r| {
            let computer = r.config.get(COMPUTER_KEY)?.as_str()?;
            // A record may still say `disposable:<profile>`: its machine is then found by the
            // session label it carries, so the machine id stays empty here.
            let machine = match computer.strip_prefix("computer://") {
                Some(id) => id.to_owned(),
                None if computer.starts_with("disposable:") => String::new(),
                None => return None,
            };
            Some(KeptSession {
                session: r.uri,
                machine,
            })
        })
        .collect();
    tokio::spawn(async move { port.adopt(kept).await });
}

/// A machine's main process: waits, reaps every child that ends (orphans of backgrounded
/// commands included, as process 1), and exits 0 on SIGTERM or SIGINT. Prints nothing.
pub fn machine_init() -> i32 {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return 1;
    };
    rt.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int), Ok(mut child)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::child()),
        ) else {
            return 1;
        };
        loop {
            tokio::select! {
                _ = term.recv() => return 0,
                _ = int.recv() => return 0,
                _ = child.recv() => reap(),
            }
        }
    })
}

fn reap() {
    use rustix::process::{WaitOptions, wait};
    while let Ok(Some(_)) = wait(WaitOptions::NOHANG) {}
}
