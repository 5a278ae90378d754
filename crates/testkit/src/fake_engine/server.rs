//! The HTTP side of the fake engine: routing, containers, images, volumes and archives.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use bytes::Bytes;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::common::{error, find, label_filters, matches, no_content, param, reply, take_failure};
use super::{EngineRequest, FailOn, FakeContainer, FakeMount, NO_LOADER, Shared, State};

pub(crate) async fn serve(
    listener: std::os::unix::net::UnixListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let Ok(listener) = tokio::net::UnixListener::from_std(listener) else {
        return;
    };
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|v| *v) => return,
        };
        let Ok((socket, _)) = accepted else { continue };
        let shared = shared.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(handle(shared, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(socket), service)
                .with_upgrades();
            tokio::select! {
                _ = conn => {}
                _ = stop.wait_for(|v| *v) => {}
            }
        });
    }
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                match s.get(i + 1..i + 3).map(|h| u8::from_str_radix(h, 16)) {
                    Some(Ok(v)) => {
                        out.push(v);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query(q: Option<&str>) -> Vec<(String, String)> {
    q.unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// The path without a leading `/v1.41`.
fn strip_version(path: &str) -> String {
    if let Some(rest) = path.strip_prefix("/v")
        && let Some((v, tail)) = rest.split_once('/')
        && v.chars().all(|c| c.is_ascii_digit() || c == '.')
    {
        return format!("/{tail}");
    }
    path.to_owned()
}

async fn handle(shared: Arc<Shared>, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let method = req.method().to_string();
    let path = strip_version(req.uri().path());
    let q = query(req.uri().query());
    let is_exec_start = method == "POST" && path.starts_with("/exec/") && path.ends_with("/start");
    let (parts, body) = req.into_parts();
    let mut req = Request::from_parts(parts, ());
    let bytes = if is_exec_start {
        // The body is small JSON; read it before the upgrade takes the connection.
        axum::body::to_bytes(Body::new(body), 1 << 20)
            .await
            .unwrap_or_default()
    } else {
        axum::body::to_bytes(Body::new(body), 512 << 20)
            .await
            .unwrap_or_default()
    };
    let json_body: Option<Value> = serde_json::from_slice(&bytes).ok();
    shared.lock().requests.push(EngineRequest {
        method: method.clone(),
        path: path.clone(),
        query: q.clone(),
        body: json_body.clone(),
    });
    let r = route(&shared, &mut req, &method, &path, &q, json_body, bytes).await;
    shared.changed.notify_waiters();
    r
}

async fn route(
    shared: &Arc<Shared>,
    req: &mut Request<()>,
    method: &str,
    path: &str,
    q: &[(String, String)],
    body: Option<Value>,
    raw: Bytes,
) -> Response<Body> {
    let seg: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match (method, seg.as_slice()) {
        ("GET" | "HEAD", ["_ping"]) => Response::new(Body::from("OK")),
        ("GET", ["version"]) => reply(
            200,
            json!({ "ApiVersion": "1.41", "MinAPIVersion": "1.12", "Version": "20.10.99-fake", "Os": "linux", "Arch": "amd64" }),
        ),
        ("GET", ["info"]) => reply(
            200,
            json!({ "SecurityOptions": [], "OperatingSystem": "fake" }),
        ),
        ("GET", ["containers", "json"]) => list_containers(shared, q),
        ("POST", ["containers", "create"]) => create_container(shared, q, body.unwrap_or_default()),
        ("GET", ["containers", id, "json"]) => inspect_container(shared, id),
        ("POST", ["containers", id, "start"]) => start_container(shared, id),
        ("POST", ["containers", id, "stop"]) => stop_container(shared, id, 0),
        ("POST", ["containers", id, "restart"]) => {
            let r = stop_container(shared, id, 0);
            if r.status() == 404 {
                return r;
            }
            start_container(shared, id)
        }
        ("POST", ["containers", id, "kill"]) => {
            if kill(shared, id, 137, false) {
                no_content()
            } else {
                error(404, format!("No such container: {id}"))
            }
        }
        ("DELETE", ["containers", id]) => {
            remove_container(shared, id, param(q, "force") == Some("true"))
        }
        ("GET", ["containers", id, "archive"]) => {
            super::exec::archive_get(shared, id, param(q, "path").unwrap_or("/"))
        }
        ("PUT", ["containers", id, "archive"]) => {
            super::exec::archive_put(shared, id, param(q, "path").unwrap_or("/"), &raw)
        }
        ("GET", ["containers", id, "stats"]) => super::store::stats(shared, id),
        ("POST", ["containers", id, "exec"]) => {
            super::exec::create(shared, id, body.unwrap_or_default())
        }
        ("POST", ["exec", id, "start"]) => super::exec::start(shared, id, req),
        ("GET", ["exec", id, "json"]) => super::exec::inspect(shared, id),
        ("GET", ["images", rest @ .., "json"]) => {
            super::store::inspect_image(shared, &rest.join("/"))
        }
        ("POST", ["images", "create"]) => super::store::create_image(shared, q),
        ("POST", ["volumes", "create"]) => {
            super::store::create_volume(shared, body.unwrap_or_default())
        }
        ("GET", ["volumes"]) => super::store::list_volumes(shared, q),
        ("GET", ["volumes", name]) => super::store::inspect_volume(shared, name),
        ("DELETE", ["volumes", name]) => super::store::remove_volume(shared, name),
        _ => error(404, format!("page not found: {method} {path}")),
    }
}

fn name_of(st: &State, id: &str) -> Option<String> {
    find(st, id).map(|c| c.name.clone())
}

fn list_containers(shared: &Shared, q: &[(String, String)]) -> Response<Body> {
    let st = shared.lock();
    let all = param(q, "all") == Some("true") || param(q, "all") == Some("1");
    let filters = label_filters(q);
    let list: Vec<Value> = st
        .containers
        .values()
        .filter(|c| all || c.status == "running")
        .filter(|c| matches(&c.labels, &filters))
        .map(|c| {
            json!({
                "Id": c.id, "Names": [format!("/{}", c.name)], "Image": c.config["Image"],
                "Labels": c.labels, "State": c.status, "Status": c.status,
                "Created": 0,
            })
        })
        .collect();
    reply(200, Value::Array(list))
}

/// Parses binds into mounts, making volumes named there that do not exist.
fn mounts_of(st: &mut State, body: &Value) -> Vec<FakeMount> {
    let binds: Vec<String> = body["HostConfig"]["Binds"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    binds
        .iter()
        .filter_map(|b| {
            let mut parts = b.splitn(3, ':');
            let src = parts.next()?;
            let target = parts.next()?.to_owned();
            let opts = parts.next().unwrap_or("");
            let rw = !opts.split(',').any(|o| o == "ro");
            if src.starts_with('/') {
                Some(FakeMount {
                    name: None,
                    source: PathBuf::from(src),
                    target,
                    rw,
                })
            } else {
                let path = super::store::volume_path(st, src, BTreeMap::new());
                Some(FakeMount {
                    name: Some(src.to_owned()),
                    source: path,
                    target,
                    rw,
                })
            }
        })
        .collect()
}

pub(crate) fn new_container(
    st: &mut State,
    name: &str,
    body: Value,
    mounts: Vec<FakeMount>,
) -> FakeContainer {
    st.counter += 1;
    let id = format!("{:016x}{:048x}", st.counter, st.counter);
    let scratch = st.root.join("containers").join(name);
    let _ = std::fs::create_dir_all(&scratch);
    let labels = body["Labels"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                .collect()
        })
        .unwrap_or_default();
    FakeContainer {
        id,
        name: name.to_owned(),
        config: body,
        labels,
        mounts,
        status: "created".into(),
        exit_code: 0,
        oom_killed: false,
        scratch,
        created: "2026-01-01T00:00:00Z".into(),
    }
}

fn create_container(shared: &Shared, q: &[(String, String)], body: Value) -> Response<Body> {
    let mut st = shared.lock();
    if let Some((s, m)) = take_failure(&mut st, FailOn::Create) {
        return error(s, m);
    }
    let name = param(q, "name")
        .unwrap_or("")
        .trim_start_matches('/')
        .to_owned();
    let name = if name.is_empty() {
        format!("fake_{}", st.counter + 1)
    } else {
        name
    };
    if st.containers.contains_key(&name) {
        return error(
            409,
            format!("Conflict. The container name \"/{name}\" is already in use"),
        );
    }
    let image = body["Image"].as_str().unwrap_or("").to_owned();
    if !st.images.contains_key(&image) {
        return error(404, format!("No such image: {image}"));
    }
    let mounts = mounts_of(&mut st, &body);
    let c = new_container(&mut st, &name, body, mounts);
    let id = c.id.clone();
    st.containers.insert(name, c);
    reply(201, json!({ "Id": id, "Warnings": [] }))
}

fn inspect_container(shared: &Shared, id: &str) -> Response<Body> {
    let st = shared.lock();
    let Some(c) = find(&st, id) else {
        return error(404, format!("No such container: {id}"));
    };
    let image = st.images.get(c.config["Image"].as_str().unwrap_or(""));
    let mut config = json!({
        "Hostname": &c.id[..12],
        "Image": c.config["Image"],
        "Labels": c.labels,
        "Env": c.config["Env"].as_array().cloned().unwrap_or_default(),
        "User": c.config["User"].as_str().map(str::to_owned).or_else(|| image.and_then(|i| i.user.clone())).unwrap_or_default(),
        "WorkingDir": c.config["WorkingDir"].as_str().map(str::to_owned).or_else(|| image.and_then(|i| i.workdir.clone())).unwrap_or_default(),
        "Entrypoint": c.config["Entrypoint"],
        "Cmd": c.config["Cmd"],
    });
    if let Some(i) = image {
        let mut env: Vec<Value> = i.env.iter().map(|e| json!(e)).collect();
        env.extend(config["Env"].as_array().cloned().unwrap_or_default());
        config["Env"] = Value::Array(env);
    }
    let mounts: Vec<Value> = c
        .mounts
        .iter()
        .map(|m| {
            let mut v = json!({
                "Type": if m.name.is_some() { "volume" } else { "bind" },
                "Source": m.source, "Destination": m.target, "RW": m.rw,
                "Mode": if m.rw { "" } else { "ro" },
            });
            if let Some(n) = &m.name {
                v["Name"] = json!(n);
            }
            v
        })
        .collect();
    reply(
        200,
        json!({
            "Id": c.id, "Name": format!("/{}", c.name), "Created": c.created,
            "State": {
                "Status": c.status, "Running": c.status == "running", "ExitCode": c.exit_code,
                "OOMKilled": c.oom_killed, "Pid": if c.status == "running" { 1 } else { 0 },
            },
            "Config": config,
            "HostConfig": c.config["HostConfig"],
            "Mounts": mounts,
        }),
    )
}

fn start_container(shared: &Shared, id: &str) -> Response<Body> {
    let mut st = shared.lock();
    let Some(name) = name_of(&st, id) else {
        return error(404, format!("No such container: {id}"));
    };
    if let Some((s, m)) = take_failure(&mut st, FailOn::Start) {
        return error(s, m);
    }
    let image = st.containers[&name].config["Image"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    if st.images.get(&image).is_some_and(|i| i.no_glibc) {
        return error(400, NO_LOADER);
    }
    let Some(c) = st.containers.get_mut(&name) else {
        return error(404, format!("No such container: {id}"));
    };
    if c.status == "running" {
        return Response::builder()
            .status(304)
            .body(Body::empty())
            .unwrap_or_default();
    }
    c.status = "running".into();
    c.exit_code = 0;
    c.oom_killed = false;
    no_content()
}

/// Ends a container's execs with SIGKILL and marks it exited with `code`.
pub(crate) fn kill(shared: &Shared, id: &str, code: i64, oom: bool) -> bool {
    let mut st = shared.lock();
    let Some(name) = name_of(&st, id) else {
        return false;
    };
    if let Some(c) = st.containers.get_mut(&name)
        && c.status == "running"
    {
        c.status = "exited".into();
        c.exit_code = code;
        c.oom_killed = oom;
    }
    let ids: Vec<String> = st
        .execs
        .values()
        .filter(|e| e.container == name && e.running)
        .map(|e| e.id.clone())
        .collect();
    for e in ids {
        if let Some(k) = st.kills.get(&e) {
            k.notify_one();
        }
    }
    drop(st);
    shared.changed.notify_waiters();
    true
}

fn stop_container(shared: &Shared, id: &str, code: i64) -> Response<Body> {
    let running = {
        let st = shared.lock();
        match find(&st, id) {
            None => return error(404, format!("No such container: {id}")),
            Some(c) => c.status == "running",
        }
    };
    if !running {
        return Response::builder()
            .status(304)
            .body(Body::empty())
            .unwrap_or_default();
    }
    kill(shared, id, code, false);
    no_content()
}

fn remove_container(shared: &Shared, id: &str, force: bool) -> Response<Body> {
    let running = {
        let st = shared.lock();
        match find(&st, id) {
            None => return error(404, format!("No such container: {id}")),
            Some(c) => c.status == "running",
        }
    };
    if running && !force {
        return error(
            409,
            format!(
                "You cannot remove a running container {id}. Stop the container before attempting removal or force remove"
            ),
        );
    }
    kill(shared, id, 137, false);
    let mut st = shared.lock();
    if let Some(name) = name_of(&st, id)
        && let Some(c) = st.containers.remove(&name)
    {
        let _ = std::fs::remove_dir_all(&c.scratch);
    }
    no_content()
}
