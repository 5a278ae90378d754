//! Reaching the container engine: finding its socket, connecting on first use with the API
//! version negotiated, and the sentences its failures become.

use std::path::Path;

use bollard::Docker;
use tokio::sync::OnceCell;

use crate::ComputerError;

/// Sockets tried, in order, when neither the `engine` option nor `DOCKER_HOST` names one.
fn candidates() -> Vec<String> {
    let mut v = vec!["/var/run/docker.sock".to_owned()];
    if let Ok(x) = std::env::var("XDG_RUNTIME_DIR") {
        v.push(format!("{x}/docker.sock"));
        v.push(format!("{x}/podman/podman.sock"));
    }
    v.push("/run/podman/podman.sock".into());
    v
}

/// The engine's socket URI: the option, else `DOCKER_HOST` when `unix://`, else the first
/// socket that exists (the first candidate when none does, for the sentences).
pub fn find(option: Option<&str>) -> String {
    if let Some(o) = option {
        return o.to_owned();
    }
    if let Ok(h) = std::env::var("DOCKER_HOST")
        && h.starts_with("unix://")
    {
        return h;
    }
    let all = candidates();
    all.iter()
        .find(|p| Path::new(p).exists())
        .or(all.first())
        .map(|p| format!("unix://{p}"))
        .unwrap_or_default()
}

/// A lazily connected engine.
pub struct Engine {
    uri: String,
    docker: OnceCell<Docker>,
}

impl Engine {
    /// An engine at this socket; nothing is contacted yet.
    pub fn new(uri: String) -> Self {
        Self {
            uri,
            docker: OnceCell::new(),
        }
    }

    /// The path of the socket.
    pub fn socket_path(&self) -> &str {
        self.uri.trim_start_matches("unix://")
    }

    /// The sentence for an engine that does not answer.
    pub fn no_answer(&self, reason: impl std::fmt::Display) -> ComputerError {
        ComputerError::NoEngine(format!(
            "no container engine answers at {}: {reason}; start Docker or Podman's socket, or set the engine option of @ahpd/computer",
            self.uri
        ))
    }

    /// The client, connected and with its API version agreed on first use.
    pub async fn docker(&self) -> Result<&Docker, ComputerError> {
        self.docker
            .get_or_try_init(|| async {
                let d = Docker::connect_with_unix(
                    self.socket_path(),
                    120,
                    bollard::API_DEFAULT_VERSION,
                )
                .map_err(|e| self.no_answer(e))?;
                let d = d.negotiate_version().await.map_err(|e| self.no_answer(e))?;
                d.ping().await.map_err(|e| self.no_answer(e))?;
                Ok(d)
            })
            .await
    }
}

/// The engine's own words from an error, without the client's wrapping.
pub fn words(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        bollard::errors::Error::DockerStreamError { error } => error.clone(),
        other => other.to_string(),
    }
}

/// Whether the engine answered 404.
pub fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// Whether the engine answered 409 (a name in use).
pub fn is_conflict(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 409,
            ..
        }
    )
}
