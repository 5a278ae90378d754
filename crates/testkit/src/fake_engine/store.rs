//! The fake engine's images, volumes and one-shot stats.

use std::collections::BTreeMap;
use std::path::PathBuf;

use axum::body::Body;
use hyper::Response;
use serde_json::{Value, json};

use super::common::{error, find, label_filters, matches, no_content, param, reply, take_failure};
use super::{FailOn, Shared, State};

pub(crate) fn volume_path(st: &mut State, name: &str, labels: BTreeMap<String, String>) -> PathBuf {
    if let Some((p, _)) = st.volumes.get(name) {
        return p.clone();
    }
    let p = st.root.join("volumes").join(name);
    let _ = std::fs::create_dir_all(&p);
    st.volumes.insert(name.to_owned(), (p.clone(), labels));
    p
}

pub(crate) fn stats(shared: &Shared, id: &str) -> Response<Body> {
    let st = shared.lock();
    if find(&st, id).is_none() {
        return error(404, format!("No such container: {id}"));
    }
    reply(
        200,
        json!({
            "read": "2026-01-01T00:00:01Z", "preread": "2026-01-01T00:00:00Z",
            "cpu_stats": { "cpu_usage": { "total_usage": 2000000 }, "system_cpu_usage": 100000000, "online_cpus": 2 },
            "precpu_stats": { "cpu_usage": { "total_usage": 1000000 }, "system_cpu_usage": 0, "online_cpus": 2 },
            "memory_stats": { "usage": 10485760, "limit": 2147483648u64 },
        }),
    )
}

pub(crate) fn inspect_image(shared: &Shared, name: &str) -> Response<Body> {
    let st = shared.lock();
    let Some(i) = st.images.get(name) else {
        return error(404, format!("No such image: {name}"));
    };
    reply(
        200,
        json!({
            "Id": format!("sha256:{:064x}", i.name.len()), "RepoTags": [i.name],
            "Os": "linux", "Architecture": "amd64",
            "Config": { "User": i.user.clone().unwrap_or_default(), "Env": i.env, "WorkingDir": i.workdir.clone().unwrap_or_default() },
        }),
    )
}

pub(crate) fn create_image(shared: &Shared, q: &[(String, String)]) -> Response<Body> {
    let mut st = shared.lock();
    let name = match (param(q, "fromImage"), param(q, "repo")) {
        (Some(i), _) => match param(q, "tag").filter(|t| !t.is_empty()) {
            Some(t) => format!("{i}:{t}"),
            None if i.contains(':') => i.to_owned(),
            None => format!("{i}:latest"),
        },
        (None, Some(r)) => format!("{r}:{}", param(q, "tag").unwrap_or("latest")),
        _ => return error(400, "no image named"),
    };
    if param(q, "fromImage").is_some()
        && let Some((s, m)) = take_failure(&mut st, FailOn::Pull)
    {
        return error(s, m);
    }
    st.images.insert(name.clone(), super::FakeImage::new(&name));
    reply(
        200,
        json!({ "status": format!("Downloaded newer image for {name}") }),
    )
}

pub(crate) fn create_volume(shared: &Shared, body: Value) -> Response<Body> {
    let mut st = shared.lock();
    let name = body["Name"].as_str().unwrap_or("").to_owned();
    let labels: BTreeMap<String, String> = body["Labels"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let path = volume_path(&mut st, &name, labels);
    let labels = &st.volumes[&name].1;
    reply(
        201,
        json!({ "Name": name, "Driver": "local", "Mountpoint": path, "Labels": labels, "Scope": "local", "Options": {} }),
    )
}

fn volume_json(name: &str, path: &std::path::Path, labels: &BTreeMap<String, String>) -> Value {
    json!({ "Name": name, "Driver": "local", "Mountpoint": path, "Labels": labels, "Scope": "local", "Options": {} })
}

pub(crate) fn list_volumes(shared: &Shared, q: &[(String, String)]) -> Response<Body> {
    let st = shared.lock();
    let filters = label_filters(q);
    let list: Vec<Value> = st
        .volumes
        .iter()
        .filter(|(_, (_, l))| matches(l, &filters))
        .map(|(n, (p, l))| volume_json(n, p, l))
        .collect();
    reply(200, json!({ "Volumes": list, "Warnings": [] }))
}

pub(crate) fn inspect_volume(shared: &Shared, name: &str) -> Response<Body> {
    let st = shared.lock();
    match st.volumes.get(name) {
        Some((p, l)) => reply(200, volume_json(name, p, l)),
        None => error(404, format!("get {name}: no such volume")),
    }
}

pub(crate) fn remove_volume(shared: &Shared, name: &str) -> Response<Body> {
    let mut st = shared.lock();
    if st
        .containers
        .values()
        .any(|c| c.mounts.iter().any(|m| m.name.as_deref() == Some(name)))
    {
        return error(409, format!("remove {name}: volume is in use"));
    }
    match st.volumes.remove(name) {
        Some((p, _)) => {
            let _ = std::fs::remove_dir_all(p);
            no_content()
        }
        None => error(404, format!("get {name}: no such volume")),
    }
}
