//! Execs as host processes, with mount targets rewritten to their sources and the output in
//! the engine's multiplexed framing; archives read from and written to the mapped folders.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use axum::body::Body;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{Mutex as AsyncMutex, Notify};

use super::common::reply;
use super::{FakeExec, FakeMount, Shared, Upload};

fn error(status: u16, message: impl Into<String>) -> Response<Body> {
    reply(status, json!({ "message": message.into() }))
}

/// The host path of a path inside: through the longest mount whose target contains it.
pub(crate) fn through_mounts(mounts: &[FakeMount], inside: &str) -> Option<PathBuf> {
    mounts
        .iter()
        .filter(|m| {
            inside == m.target
                || inside
                    .strip_prefix(m.target.trim_end_matches('/'))
                    .is_some_and(|r| r.starts_with('/'))
        })
        .max_by_key(|m| m.target.len())
        .map(|m| {
            let rest = inside[m.target.trim_end_matches('/').len()..].trim_start_matches('/');
            if rest.is_empty() {
                m.source.clone()
            } else {
                m.source.join(rest)
            }
        })
}

/// A value rewritten when it begins with a mount's target.
fn rewrite(mounts: &[FakeMount], value: &str) -> String {
    through_mounts(mounts, value)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| value.to_owned())
}

/// The host path of a path inside: a mount's, else the container's own files.
fn host_path(mounts: &[FakeMount], scratch: &std::path::Path, inside: &str) -> PathBuf {
    through_mounts(mounts, inside).unwrap_or_else(|| scratch.join(inside.trim_start_matches('/')))
}

pub(crate) fn create(shared: &Shared, id: &str, body: Value) -> Response<Body> {
    let mut st = shared.lock();
    let Some(c) = st.containers.get(id) else {
        return error(404, format!("No such container: {id}"));
    };
    if c.status != "running" {
        return error(409, format!("Container {} is not running", c.id));
    }
    let name = c.name.clone();
    st.counter += 1;
    let exec_id = format!("exec{:012}{:048x}", st.counter, st.counter);
    let strings = |k: &str| -> Vec<String> {
        body[k]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    st.execs.insert(
        exec_id.clone(),
        FakeExec {
            id: exec_id.clone(),
            container: name,
            cmd: strings("Cmd"),
            env: strings("Env"),
            config: body,
            running: false,
            exit_code: None,
            pid: None,
        },
    );
    reply(201, json!({ "Id": exec_id }))
}

pub(crate) fn inspect(shared: &Shared, id: &str) -> Response<Body> {
    let st = shared.lock();
    match st.execs.get(id) {
        Some(e) => reply(
            200,
            json!({
                "ID": e.id, "Running": e.running, "ExitCode": e.exit_code,
                "ContainerID": st.containers.get(&e.container).map(|c| c.id.clone()),
                "Pid": e.pid.unwrap_or(0), "ProcessConfig": { "entrypoint": e.cmd.first(), "arguments": e.cmd.get(1..) },
            }),
        ),
        None => error(404, format!("No such exec instance: {id}")),
    }
}

/// The process to run for an exec: argv, folder and variables mapped to the host.
fn command(shared: &Shared, id: &str) -> Result<tokio::process::Command, String> {
    let st = shared.lock();
    let e = st
        .execs
        .get(id)
        .ok_or_else(|| format!("No such exec instance: {id}"))?;
    let c = st
        .containers
        .get(&e.container)
        .ok_or("the container is gone")?;
    let image = st.images.get(c.config["Image"].as_str().unwrap_or(""));
    let prog = e.cmd.first().ok_or("no command")?;
    let mut cmd = tokio::process::Command::new(rewrite(&c.mounts, prog));
    cmd.args(e.cmd[1..].iter().map(|a| rewrite(&c.mounts, a)));
    let dir = e.config["WorkingDir"]
        .as_str()
        .filter(|s| !s.is_empty())
        .or_else(|| c.config["WorkingDir"].as_str().filter(|s| !s.is_empty()))
        .or_else(|| image.and_then(|i| i.workdir.as_deref()))
        .unwrap_or("/")
        .to_owned();
    let dir = host_path(&c.mounts, &c.scratch, &dir);
    let _ = std::fs::create_dir_all(&dir);
    cmd.current_dir(dir);
    cmd.env_clear();
    cmd.env("PATH", "/usr/local/bin:/usr/bin:/bin");
    let root_home = host_path(&c.mounts, &c.scratch, "/root");
    let _ = std::fs::create_dir_all(&root_home);
    cmd.env("HOME", root_home);
    let all = image
        .map(|i| i.env.clone())
        .unwrap_or_default()
        .into_iter()
        .chain(
            c.config["Env"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
        )
        .chain(e.env.clone());
    for kv in all {
        let (k, v) = kv.split_once('=').unwrap_or((&kv, ""));
        let v = if v.starts_with('/') {
            let p = host_path(&c.mounts, &c.scratch, v);
            if k == "HOME" {
                let _ = std::fs::create_dir_all(&p);
            }
            if through_mounts(&c.mounts, v).is_some() || k == "HOME" {
                p.to_string_lossy().into_owned()
            } else {
                v.to_owned()
            }
        } else {
            v.to_owned()
        };
        cmd.env(k, v);
    }
    // As the engine does, an exec that does not attach its input reads an empty one.
    let attach_stdin = e.config["AttachStdin"].as_bool().unwrap_or(false);
    cmd.stdin(if attach_stdin {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .kill_on_drop(true);
    Ok(cmd)
}

/// One frame of the multiplexed stream: stream type, three zeros, the length, the bytes.
fn frame(kind: u8, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + data.len());
    v.extend_from_slice(&[kind, 0, 0, 0]);
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

pub(crate) fn start(shared: &Arc<Shared>, id: &str, req: &mut Request<()>) -> Response<Body> {
    let cmd = match command(shared, id) {
        Ok(c) => c,
        Err(e) => return error(404, e),
    };
    let on_upgrade = hyper::upgrade::on(req);
    let kill = Arc::new(Notify::new());
    {
        let mut st = shared.lock();
        if let Some(e) = st.execs.get_mut(id) {
            e.running = true;
        }
        st.kills.insert(id.to_owned(), kill.clone());
    }
    let shared = shared.clone();
    let id = id.to_owned();
    tokio::spawn(async move {
        let code = run(&shared, &id, cmd, on_upgrade, kill).await;
        let mut st = shared.lock();
        st.kills.remove(&id);
        if let Some(e) = st.execs.get_mut(&id) {
            e.running = false;
            e.exit_code = Some(code);
            e.pid = None;
        }
        drop(st);
        shared.changed.notify_waiters();
    });
    Response::builder()
        .status(101)
        .header("content-type", "application/vnd.docker.raw-stream")
        .header("connection", "Upgrade")
        .header("upgrade", "tcp")
        .body(Body::empty())
        .unwrap_or_default()
}

async fn pump(
    mut from: impl AsyncRead + Unpin,
    kind: u8,
    to: Arc<AsyncMutex<Box<dyn tokio::io::AsyncWrite + Send + Unpin>>>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut w = to.lock().await;
                if w.write_all(&frame(kind, &buf[..n])).await.is_err() || w.flush().await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Runs the process over the upgraded connection; its exit code (`128 + n` for a signal).
async fn run(
    shared: &Shared,
    id: &str,
    mut cmd: tokio::process::Command,
    on_upgrade: hyper::upgrade::OnUpgrade,
    kill: Arc<Notify>,
) -> i64 {
    let Ok(upgraded) = on_upgrade.await else {
        return 126;
    };
    let (mut rd, wr) = tokio::io::split(TokioIo::new(upgraded));
    let wr: Arc<AsyncMutex<Box<dyn tokio::io::AsyncWrite + Send + Unpin>>> =
        Arc::new(AsyncMutex::new(Box::new(wr)));
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let msg = format!("OCI runtime exec failed: exec failed: {e}: unknown\r\n");
            let mut w = wr.lock().await;
            let _ = w.write_all(&frame(1, msg.as_bytes())).await;
            let _ = w.shutdown().await;
            return 126;
        }
    };
    if let Some(e) = shared.lock().execs.get_mut(id) {
        e.pid = child.id();
    }
    shared.changed.notify_waiters();
    let mut stdin = child.stdin.take();
    let out = child.stdout.take();
    let err = child.stderr.take();
    let input = tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let Some(s) = stdin.as_mut() else { break };
                    if s.write_all(&buf[..n]).await.is_err() || s.flush().await.is_err() {
                        break;
                    }
                }
            }
        }
        drop(stdin);
    });
    let o = out.map(|o| tokio::spawn(pump(o, 1, wr.clone())));
    let e = err.map(|e| tokio::spawn(pump(e, 2, wr.clone())));
    let status = tokio::select! {
        s = child.wait() => s,
        _ = kill.notified() => {
            let _ = child.start_kill();
            child.wait().await
        }
    };
    if let Some(o) = o {
        let _ = o.await;
    }
    if let Some(e) = e {
        let _ = e.await;
    }
    input.abort();
    use std::os::unix::process::ExitStatusExt as _;
    let code = match status {
        Ok(s) => s
            .code()
            .map(i64::from)
            .or_else(|| s.signal().map(|n| 128 + i64::from(n)))
            .unwrap_or(1),
        Err(_) => 1,
    };
    // Kept before the stream closes, so whoever sees the end can inspect the exit code.
    if let Some(e) = shared.lock().execs.get_mut(id) {
        e.exit_code = Some(code);
        e.running = false;
    }
    let _ = wr.lock().await.shutdown().await;
    code
}

/// `GET …/archive`: a tar of the file or folder at `path`.
pub(crate) fn archive_get(shared: &Shared, id: &str, path: &str) -> Response<Body> {
    let st = shared.lock();
    let Some(c) = st.containers.get(id) else {
        return error(404, format!("No such container: {id}"));
    };
    let image = st.images.get(c.config["Image"].as_str().unwrap_or(""));
    let host = host_path(&c.mounts, &c.scratch, path);
    let name = path.rsplit('/').next().unwrap_or("file").to_owned();
    let mut b = tar::Builder::new(Vec::new());
    let added = if host.is_dir() {
        b.append_dir_all(&name, &host).is_ok()
    } else if let Ok(data) = std::fs::read(&host) {
        append(&mut b, &name, &data)
    } else if let Some(data) = image.and_then(|i| i.files.get(path)) {
        append(&mut b, &name, data)
    } else {
        false
    };
    if !added {
        return error(
            404,
            format!("Could not find the file {path} in container {id}"),
        );
    }
    let bytes = b.into_inner().unwrap_or_default();
    Response::builder()
        .status(200)
        .header("content-type", "application/x-tar")
        .body(Body::from(bytes))
        .unwrap_or_default()
}

fn append(b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) -> bool {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    b.append_data(&mut h, name, data).is_ok()
}

/// `PUT …/archive`: unpacks into the mapped folder, recording each entry's owner.
pub(crate) fn archive_put(shared: &Shared, id: &str, path: &str, raw: &[u8]) -> Response<Body> {
    let mut st = shared.lock();
    let Some(c) = st.containers.get(id) else {
        return error(404, format!("No such container: {id}"));
    };
    let name = c.name.clone();
    let (mounts, scratch) = (c.mounts.clone(), c.scratch.clone());
    let folder = path.trim_end_matches('/');
    // A folder that holds a mount point exists in a real container even when nothing else is
    // in it, so an archive may be unpacked there and reach the mount through its entries' paths.
    let holds_mount = c.mounts.iter().any(|m| {
        m.target
            .strip_prefix(folder)
            .is_some_and(|r| r.starts_with('/'))
    });
    if !host_path(&mounts, &scratch, path).is_dir() && !holds_mount {
        return error(
            404,
            format!("Could not find the file {path} in container {id}"),
        );
    }
    let mut archive = tar::Archive::new(raw);
    let Ok(entries) = archive.entries() else {
        return error(400, "not a tar archive");
    };
    for entry in entries {
        let Ok(mut entry) = entry else {
            return error(400, "a broken tar entry");
        };
        let Ok(p) = entry.path().map(|p| p.to_string_lossy().into_owned()) else {
            continue;
        };
        let (uid, gid) = (
            entry.header().uid().unwrap_or(0),
            entry.header().gid().unwrap_or(0),
        );
        let inside = format!("{folder}/{p}");
        let dest = host_path(&mounts, &scratch, &inside);
        if let Some(parent) = dest.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let mut data = Vec::new();
        if std::io::Read::read_to_end(&mut entry, &mut data).is_err() {
            return error(400, "a broken tar entry");
        }
        if entry.header().entry_type().is_dir() {
            let _ = std::fs::create_dir_all(&dest);
        } else if std::fs::write(&dest, &data).is_err() {
            return error(500, format!("cannot write {p}"));
        }
        super::common::push_upload(
            &mut st,
            Upload {
                container: name.clone(),
                path: inside,
                uid,
                gid,
            },
        );
    }
    reply(200, json!({}))
}
