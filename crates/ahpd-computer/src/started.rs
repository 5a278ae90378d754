//! Whether a machine that the engine says it started can run the build. With runc 1.1 and
//! later, a main process whose loader is missing (an image without glibc) passes the start and
//! dies just after it, so the start's answer alone proves nothing: one exec of the build's
//! `--version` does, and its failure is turned into the glibc sentence.

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::query_parameters::LogsOptions;
use futures::StreamExt;

use crate::ComputerError;
use crate::engine::words;

/// The sentence of a machine that could not start, from the engine's words: an image that
/// cannot run the build gets the glibc one.
pub fn start_sentence(image: &str, said: &str) -> ComputerError {
    if loader_missing(said) {
        return ComputerError::Failed(format!(
            "the image {image} cannot run ahpd: {said}; use an image built on glibc {} or newer for {}, such as Debian or Ubuntu (not Alpine or busybox)",
            crate::binary::GLIBC,
            std::env::consts::ARCH
        ));
    }
    ComputerError::Failed(format!("cannot start a machine of {image}: {said}"))
}

/// Whether the engine's words say the program could not be loaded at all.
fn loader_missing(said: &str) -> bool {
    said.contains("no such file or directory") || said.contains("exec format error")
}

/// Runs `<entry> --version` in the machine; a failure that shows the machine cannot run the
/// build (its loader missing, or its main process gone) is the machine's start failing.
pub async fn check(
    docker: &Docker,
    id: &str,
    image: &str,
    entry: &str,
    opts: &crate::options::Options,
) -> Result<(), ComputerError> {
    // Bounded like an inner host's start (`startTimeoutMs`).
    let limit = std::time::Duration::from_millis(opts.start_timeout_ms);
    let said = match tokio::time::timeout(limit, probe(docker, id, entry)).await {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(said)) => said,
        // A build that does not end its `--version` was loaded: the machine runs it, and the
        // inner host's start says what is wrong with it.
        Err(_) => {
            tracing::info!(machine = id, "the build's --version did not end in time");
            return Ok(());
        }
    };
    // The main process's own words say more than the exec's once it has died.
    let logs = logs(docker, id).await;
    let said = if logs.is_empty() { said } else { logs };
    let running = docker
        .inspect_container(
            id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .ok()
        .and_then(|c| c.state)
        .and_then(|s| s.running)
        .unwrap_or(false);
    // A machine whose main process lives and whose loader is there did start: the build
    // itself failed, and the inner host's start tells that with its own sentence.
    if running && !loader_missing(&said) {
        tracing::info!(
            machine = id,
            "the build's --version failed in a running machine: {said}"
        );
        return Ok(());
    }
    Err(start_sentence(image, &said))
}

async fn probe(docker: &Docker, id: &str, entry: &str) -> Result<(), String> {
    let exec = docker
        .create_exec(
            id,
            CreateExecOptions {
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                cmd: Some(vec![entry.to_owned(), "--version".to_owned()]),
                ..Default::default()
            },
        )
        .await
        .map_err(|e| words(&e))?;
    let mut out = String::new();
    match docker.start_exec(&exec.id, None).await {
        Ok(StartExecResults::Attached { mut output, .. }) => {
            while let Some(Ok(chunk)) = output.next().await {
                out.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
            }
        }
        Ok(StartExecResults::Detached) => {}
        Err(e) => return Err(words(&e)),
    }
    let code = docker
        .inspect_exec(&exec.id)
        .await
        .map_err(|e| words(&e))?
        .exit_code;
    match code {
        Some(0) => Ok(()),
        other => Err(format!(
            "{} (exit code {})",
            out.trim(),
            other.map_or_else(|| "unknown".to_owned(), |c| c.to_string())
        )),
    }
}

/// The last lines the machine's main process printed.
async fn logs(docker: &Docker, id: &str) -> String {
    let mut s = docker.logs(
        id,
        Some(LogsOptions {
            stdout: true,
            stderr: true,
            tail: "5".into(),
            ..Default::default()
        }),
    );
    let mut text = String::new();
    while let Some(Ok(chunk)) = s.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
    }
    text.trim().to_owned()
}
