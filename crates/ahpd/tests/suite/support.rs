//! A private home and configuration folder per test, and ways to run the binary in them.

use std::fs::{self, File};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};

use ahp::client::{Client, ClientConfig};
use ahp_ws::WebSocketTransport;

pub const BIN: &str = env!("CARGO_BIN_EXE_ahpd");
pub const ECHO: &str = "@ahpd/agent-echo";

/// A temporary home with `XDG_CONFIG_HOME` inside it.
pub struct Env {
    pub root: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        fs::create_dir_all(root.path().join("home")).unwrap();
        fs::create_dir_all(root.path().join("xdg")).unwrap();
        Env { root }
    }

    pub fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    /// The configuration folder (`$XDG_CONFIG_HOME/ahpd`).
    pub fn dir(&self) -> PathBuf {
        self.root.path().join("xdg").join("ahpd")
    }

    pub fn base_file(&self) -> PathBuf {
        self.dir().join("config.json")
    }

    pub fn write_base(&self, text: &str) {
        fs::create_dir_all(self.dir()).unwrap();
        fs::write(self.base_file(), text).unwrap();
    }

    /// A command for the binary with this environment and nothing inherited that matters.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.env_clear()
            .env("HOME", self.home())
            .env("XDG_CONFIG_HOME", self.root.path().join("xdg"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(self.home())
            .stdin(Stdio::null());
        c
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    /// Runs with `input` on standard input.
    pub fn run_with_input(&self, args: &[&str], input: &str) -> Output {
        use std::io::Write;
        let mut child = self
            .cmd()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // A command that refuses its arguments exits without reading; that is not an error here.
        let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
        child.wait_with_output().unwrap()
    }

    /// Starts a foreground daemon and waits for its listening line; its standard error goes to
    /// `log` (a file in the temporary folder).
    pub fn daemon(&self, args: &[&str], log: &str) -> Daemon {
        self.daemon_with(self.cmd(), args, log)
    }

    pub fn daemon_with(&self, mut cmd: Command, args: &[&str], log: &str) -> Daemon {
        let log_path = self.root.path().join(log);
        let err = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .unwrap();
        let mut child = cmd
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let address = line
            .trim()
            .strip_prefix("ahpd listening on ")
            .unwrap_or_else(|| {
                let _ = child.kill();
                panic!(
                    "no listening line; got {line:?}; log:\n{}",
                    fs::read_to_string(&log_path).unwrap_or_default()
                )
            })
            .to_owned();
        Daemon {
            child,
            _stdout: stdout,
            address,
            log: log_path,
        }
    }

    /// Every file under the temporary folder whose bytes contain `needle`.
    pub fn files_containing(&self, needle: &str) -> Vec<PathBuf> {
        let mut out = Vec::new();
        collect(self.root.path(), needle.as_bytes(), &mut out);
        out
    }
}

fn collect(dir: &Path, needle: &[u8], out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            collect(&p, needle, out);
        } else if let Ok(bytes) = fs::read(&p)
            && bytes.windows(needle.len()).any(|w| w == needle)
        {
            out.push(p);
        }
    }
}

/// A running foreground daemon.
pub struct Daemon {
    pub child: Child,
    _stdout: BufReader<ChildStdout>,
    /// The URL its listening line prints, with `?tkn=` when it has a token.
    pub address: String,
    pub log: PathBuf,
}

impl Daemon {
    /// The address without the token.
    pub fn base(&self) -> String {
        base_of(&self.address)
    }

    pub fn port(&self) -> u16 {
        self.base().rsplit(':').next().unwrap().parse().unwrap()
    }

    /// SIGTERM, then the exit code.
    pub fn stop(mut self) -> i32 {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        self.child.wait().unwrap().code().unwrap_or(-1)
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ws://host:port` of a URL that may carry `/?tkn=`.
pub fn base_of(url: &str) -> String {
    url.split("/?")
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_owned()
}

/// The token of the default token file, which every daemon started without a token option uses.
pub fn default_token(env: &Env) -> String {
    fs::read_to_string(env.dir().join("token"))
        .unwrap()
        .trim()
        .to_owned()
}

pub fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

/// Connects the official client and initializes, subscribing to the root.
pub async fn client(address: &str) -> (Client, ahp_types::commands::InitializeResult) {
    let transport = WebSocketTransport::connect(address).await.unwrap();
    let client = Client::connect(
        transport,
        ClientConfig {
            subscription_buffer: 4096,
            ..ClientConfig::default()
        },
    )
    .await
    .unwrap();
    let init = client
        .initialize(
            "suite".into(),
            vec!["1.0.0".into()],
            vec![ahp_types::ROOT_RESOURCE_URI.into()],
        )
        .await
        .unwrap();
    (client, init)
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// The row `listSessions` shows for the session `uri`, which must be listed.
pub async fn listed_row(client: &Client, uri: &str) -> serde_json::Value {
    let list: serde_json::Value = client
        .request(
            "listSessions",
            serde_json::json!({"channel": ahp_types::ROOT_RESOURCE_URI}),
        )
        .await
        .unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == uri)
        .unwrap_or_else(|| panic!("{uri} not listed in {list}"))
        .clone()
}
