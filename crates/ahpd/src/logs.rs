//! Log output: `tracing` events to standard error (or, detached, to the rotating
//! `daemon.log`), one line each, filtered by `RUST_LOG`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Libraries that log whole frames or headers (a put's API key, a bearer token) at `debug` and
/// `trace`. They are capped at `info` whatever `RUST_LOG` says, so no level shows a secret.
const FRAME_LOGGERS: &[&str] = &[
    "tungstenite",
    "tokio_tungstenite",
    "hyper",
    "hyper_util",
    "h2",
    "axum",
    "tower_http",
    "reqwest",
    // The engine client logs request bodies at debug and trace, and an inner host's start
    // carries need values (keys among them) in its exec request.
    "bollard",
];

/// Installs the subscriber. `default` is the filter when `RUST_LOG` is unset (`info` for the
/// daemon, `warn` for the one-shot commands so their output stays their own).
pub fn init(default: &str) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter(default))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

/// Installs the subscriber for the detached daemon: lines go to `daemon.log`, rotated by size
/// (see `logfile`), and standard output and error follow the current file. Falls back to
/// standard error (which `ahpd start` pointed at the log) when the file cannot be opened.
pub fn init_file(path: &std::path::Path, default: &str) {
    match crate::logfile::RotatingLog::open(
        path,
        crate::logfile::MAX_BYTES,
        crate::logfile::KEEP,
        true,
    ) {
        Ok(log) => {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter(default))
                .with_writer(log)
                .with_ansi(false)
                .try_init();
        }
        Err(e) => {
            init(default);
            tracing::warn!("cannot open {} for rotation: {e}", path.display());
        }
    }
}

fn filter(default: &str) -> EnvFilter {
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    for target in FRAME_LOGGERS {
        if let Ok(directive) = format!("{target}=info").parse() {
            filter = filter.add_directive(directive);
        }
    }
    filter
}

/// Installs the subscriber for the terminal client: its lines (an in-process host's among
/// them: an MCP server that keeps failing, say) go to `client.log` beside the configuration,
/// never onto the screen the person reads; the client says what matters there itself. Falls
/// back to standard error when the file cannot be opened.
pub fn init_client(path: &std::path::Path) {
    match crate::logfile::RotatingLog::open(
        path,
        crate::logfile::MAX_BYTES,
        crate::logfile::KEEP,
        false,
    ) {
        Ok(log) => {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(filter("warn"))
                .with_writer(log)
                .with_ansi(false)
                .try_init();
        }
        Err(_) => init("warn"),
    }
}
