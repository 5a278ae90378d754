//! Seeding state volumes before a machine starts, through a helper container that is created
//! and never started (so images without a shell work), with marks so only changed seeds are
//! written again.

use std::collections::HashMap;
use std::io::Read as _;
use std::path::Path;
use std::time::UNIX_EPOCH;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, DownloadFromContainerOptions, RemoveContainerOptions,
    UploadToContainerOptions,
};
use futures::TryStreamExt;
use serde_json::{Value, json};

use crate::ComputerError;
use crate::engine::words;
use crate::needs::{Volume, expand};

/// Where the helper mounts the volume, and the folder above it that tars are written into:
/// an entry for `state` itself is the only way to set the owner of the volume's top folder
/// (the engine ignores a `.` entry).
const AT: &str = "/ahpd-seed/state";
const ABOVE: &str = "/ahpd-seed";
const TOP: &str = "state";
/// The marks file inside the volume.
const MARKS: &str = ".ahpd-seed.json";

/// A uid and gid that own what is written.
#[derive(Debug, Clone, Copy, Default)]
pub struct Owner {
    /// User id.
    pub uid: u64,
    /// Group id.
    pub gid: u64,
}

/// Seeds every volume of a machine; `user` is the machine user (`Config.User` or the option).
pub async fn seed_all(
    docker: &Docker,
    image: &str,
    entry: &str,
    user: Option<&str>,
    volumes: &[Volume],
    labels: &HashMap<String, String>,
) -> Result<(), ComputerError> {
    for v in volumes.iter().filter(|v| !v.seeds.is_empty()) {
        let name = format!("ahpd-state-seed-{:08x}", fastrand::u32(..));
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            entrypoint: Some(vec![entry.to_owned()]),
            labels: Some(labels.clone()),
            host_config: Some(HostConfig {
                binds: Some(vec![format!("{}:{AT}", v.name)]),
                ..Default::default()
            }),
            ..Default::default()
        };
        docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(name.clone()),
                    ..Default::default()
                }),
                body,
            )
            .await
            .map_err(|e| ComputerError::Failed(format!("cannot seed {}: {}", v.name, words(&e))))?;
        let done = seed_one(docker, &name, user, v).await;
        let _ = docker
            .remove_container(
                &name,
                Some(RemoveContainerOptions {
                    force: true,
                    ..Default::default()
                }),
            )
            .await;
        done?;
    }
    Ok(())
}

async fn read_file(docker: &Docker, container: &str, path: &str) -> Option<Vec<u8>> {
    let bytes: Vec<u8> = docker
        .download_from_container(
            container,
            Some(DownloadFromContainerOptions {
                path: path.to_owned(),
            }),
        )
        .map_ok(|b| b.to_vec())
        .try_concat()
        .await
        .ok()?;
    let mut archive = tar::Archive::new(bytes.as_slice());
    let mut entry = archive.entries().ok()?.next()?.ok()?;
    let mut out = Vec::new();
    entry.read_to_end(&mut out).ok()?;
    Some(out)
}

/// The owner a user spec names: numbers as they are, names looked up in the image's files.
async fn owner(docker: &Docker, container: &str, user: Option<&str>) -> Owner {
    let Some(user) = user.filter(|u| !u.is_empty()) else {
        return Owner::default();
    };
    let (u, g) = user.split_once(':').unwrap_or((user, ""));
    let lookup = |file: &[u8], name: &str| -> Option<(u64, u64)> {
        String::from_utf8_lossy(file).lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.first() == Some(&name) && f.len() > 3)
                .then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))
                .flatten()
        })
    };
    let (uid, mut gid) = match u.parse::<u64>() {
        Ok(n) => (n, n),
        Err(_) => match read_file(docker, container, "/etc/passwd").await {
            Some(f) => lookup(&f, u).unwrap_or((0, 0)),
            None => (0, 0),
        },
    };
    if !g.is_empty() {
        gid = match g.parse::<u64>() {
            Ok(n) => n,
            Err(_) => match read_file(docker, container, "/etc/group").await {
                Some(f) => lookup(&f, g).map_or(gid, |x| x.0),
                None => gid,
            },
        };
    }
    Owner { uid, gid }
}

fn mark_of(path: &Path, source: &str) -> Value {
    match std::fs::metadata(path) {
        Ok(m) => {
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis());
            json!({ "source": source, "size": m.len(), "mtime": mtime as u64 })
        }
        Err(_) => json!({ "source": source, "absent": true }),
    }
}

async fn seed_one(
    docker: &Docker,
    helper: &str,
    user: Option<&str>,
    v: &Volume,
) -> Result<(), ComputerError> {
    let old: Value = read_file(docker, helper, &format!("{AT}/{MARKS}"))
        .await
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(json!({}));
    // `user` is the option's, else the image's own (`Machines::make` reads it from the image).
    let who = owner(docker, helper, user).await;
    let mut marks = old.as_object().cloned().unwrap_or_default();
    let mut builder = tar::Builder::new(Vec::new());
    let mut changed = false;
    for s in &v.seeds {
        let path = expand(&s.source);
        let target = s.target.clone().unwrap_or_else(|| {
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        let mark = mark_of(&path, &s.source);
        if marks.get(&target) == Some(&mark) {
            continue;
        }
        if mark.get("absent").is_some() {
            tracing::info!(volume = %v.name, "the seed {} is absent; it is seeded once it exists", path.display());
        } else if path.is_file() {
            let data = std::fs::read(&path).map_err(|e| {
                ComputerError::Failed(format!("cannot read the seed {}: {e}", path.display()))
            })?;
            append(&mut builder, &format!("{TOP}/{target}"), &data, who, 0o600)?;
            changed = true;
        } else {
            tracing::info!(volume = %v.name, "the seed {} is not a file; folders are not seeded in this version", path.display());
        }
        marks.insert(target, mark);
    }
    if !changed && Value::Object(marks.clone()) == old {
        return Ok(());
    }
    let text = serde_json::to_vec_pretty(&marks).unwrap_or_default();
    append(&mut builder, &format!("{TOP}/{MARKS}"), &text, who, 0o600)?;
    // The volume's top folder too, so the machine user may write its state beside the seeds.
    let mut top = tar::Header::new_gnu();
    top.set_entry_type(tar::EntryType::Directory);
    top.set_size(0);
    top.set_mode(0o755);
    top.set_uid(who.uid);
    top.set_gid(who.gid);
    top.set_mtime(
        std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    );
    builder
        .append_data(&mut top, TOP, std::io::empty())
        .map_err(|e| ComputerError::Failed(e.to_string()))?;
    let tar = builder
        .into_inner()
        .map_err(|e| ComputerError::Failed(e.to_string()))?;
    docker
        .upload_to_container(
            helper,
            Some(UploadToContainerOptions {
                path: ABOVE.to_owned(),
                ..Default::default()
            }),
            bollard::body_full(tar.into()),
        )
        .await
        .map_err(|e| ComputerError::Failed(format!("cannot seed {}: {}", v.name, words(&e))))
}

fn append(
    b: &mut tar::Builder<Vec<u8>>,
    name: &str,
    data: &[u8],
    who: Owner,
    mode: u32,
) -> Result<(), ComputerError> {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(mode);
    h.set_uid(who.uid);
    h.set_gid(who.gid);
    h.set_mtime(
        std::time::SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    );
    h.set_entry_type(tar::EntryType::Regular);
    b.append_data(&mut h, name, data)
        .map_err(|e| ComputerError::Failed(e.to_string()))
}
