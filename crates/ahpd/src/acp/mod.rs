//! `ahpd acp`: the daemon's sessions inside an editor that speaks the Agent Client Protocol
//! (Zed, the JetBrains IDEs, Neovim's CodeCompanion, …).
//!
//! The command is an ACP agent on standard input and output and, on its other side, an ordinary
//! AHP client of the host the terminal client finds (the daemon of this configuration folder
//! with its token, else a host built in this process). An ACP session is an AHP session of that
//! host under the same id, so the conversation an editor starts is listed by `ahpd sessions`,
//! watched from VS Code and continued with `ahpd chat`.
//!
//! The crate's connection runs its request callbacks one at a time on its dispatch loop, and a
//! callback that awaited a request of its own to the editor would never see the answer; so every
//! callback that talks to the host hands its work to a task (`cx.spawn`) and returns, and each
//! open session has a task of its own that follows the host's actions and speaks for it.

mod listing;
mod prompt;
mod server;
mod session;
mod settings;
mod updates;

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::OnceCell;

use crate::commands::CommandError;
use crate::locations::Locations;
use crate::term::{Conn, Target, connect};

/// `ahpd acp`.
#[derive(Debug, Clone, clap::Args)]
pub struct AcpOpts {
    /// The agent new sessions use: an engine's provider id or an agent record's id, as the
    /// host's root lists them [default: cofold, else the first the host offers].
    #[arg(long, value_name = "ID")]
    pub agent: Option<String>,
    /// Run the host in this process even when a daemon runs.
    #[arg(long)]
    pub in_process: bool,
}

/// The host connection, made once in the background from the start so `initialize` is answered
/// at once; everything that needs the host waits for the same attempt.
pub(crate) struct Link {
    loc: Locations,
    target: Target,
    conn: OnceCell<Result<Arc<Conn>, String>>,
}

impl Link {
    /// The connected host, or the sentence why there is none.
    pub(crate) async fn conn(&self) -> Result<Arc<Conn>, String> {
        self.conn
            .get_or_init(|| async {
                connect(&self.loc, &self.target)
                    .await
                    .map(Arc::new)
                    .map_err(|e| format!("cannot reach the agent host: {e}"))
            })
            .await
            .clone()
    }

    /// The connection when one was made, for closing it.
    fn take(&mut self) -> Option<Arc<Conn>> {
        self.conn.take().and_then(Result::ok)
    }
}

/// `ahpd acp`; returns the exit code once the editor closes standard input.
pub fn acp(loc: &Locations, opts: &AcpOpts) -> Result<i32, CommandError> {
    let rt = crate::term::runtime()?;
    let cwd = std::env::current_dir()
        .map_err(|e| CommandError::Failed(format!("cannot read the current folder: {e}")))?;
    let link = Link {
        loc: loc.clone(),
        target: Target {
            path: Some(cwd.clone()),
            in_process: opts.in_process,
            ..Target::default()
        },
        conn: OnceCell::new(),
    };
    let code = rt.block_on(async move {
        let link = Arc::new(link);
        // Started now, so the first `session/new` finds the host ready or nearly.
        let early = link.clone();
        let warming = tokio::spawn(async move {
            let _ = early.conn().await;
        });
        let bridge = Arc::new(server::Bridge::new(link.clone(), opts.agent.clone(), cwd));
        // An editor usually ends its agent by closing standard input, some with a signal: either
        // way the sessions are closed and an in-process host writes its store.
        let served = tokio::select! {
            served = server::serve(bridge.clone()) => served,
            () = ended_by_signal() => Ok(()),
        };
        warming.abort();
        let _ = warming.await;
        bridge.close_all().await;
        drop(bridge);
        close(link).await;
        match served {
            Ok(()) => Ok(0),
            Err(e) => Err(CommandError::Failed(format!(
                "the ACP connection failed: {e}"
            ))),
        }
    });
    rt.shutdown_background();
    code
}

/// Resolves on SIGTERM, SIGINT or SIGHUP (never, when they cannot be caught).
async fn ended_by_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        _ = hup.recv() => {}
    }
}

/// Closes the host connection; an in-process host writes its store here, so what the editor's
/// sessions said is kept for the next command.
async fn close(link: Arc<Link>) {
    let Ok(mut link) = Arc::try_unwrap(link) else {
        eprintln!("ahpd acp: work was still running at the end; the host was left without closing");
        return;
    };
    let Some(conn) = link.take() else { return };
    match Arc::try_unwrap(conn) {
        Ok(conn) => conn.close().await,
        Err(_) => eprintln!(
            "ahpd acp: a session was still open at the end; the host was left without closing"
        ),
    }
}

/// A folder as the `file:` URI the host takes.
pub(crate) fn folder_uri(dir: &std::path::Path) -> String {
    ahpd_sdk::util::file_uri(dir)
}

/// A `file:` URI's path, when it is one.
pub(crate) fn uri_path(uri: &str) -> Option<PathBuf> {
    ahpd_sdk::util::path_of(uri)
}
