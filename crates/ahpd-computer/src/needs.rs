//! Turning an agent's needs into mounts, volumes and variables, with values from the profile,
//! the plugin, or the agent's default, in that order.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ahpd_sdk::machine::{MachineNeed, NeedKind, NeedWhen, Seed};
use ahpd_sdk::plugin::SecretReader;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::options::{Options, Profile, StateMode, StateScope, Unreadable};

/// A bind of a host path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    /// Host path.
    pub source: String,
    /// Path inside.
    pub target: String,
    /// Read-only.
    pub read_only: bool,
}

impl Bind {
    /// The engine's `src:dst[:ro]` form.
    pub fn spec(&self) -> String {
        if self.read_only {
            format!("{}:{}:ro", self.source, self.target)
        } else {
            format!("{}:{}", self.source, self.target)
        }
    }

    /// Reads `src:dst[:ro]`.
    pub fn parse(m: &str) -> Option<Bind> {
        let mut it = m.split(':');
        let source = it.next()?.to_owned();
        let target = it.next()?.to_owned();
        Some(Bind {
            source,
            target,
            read_only: it.next() == Some("ro"),
        })
    }
}

/// A state volume to make and seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// The volume's name.
    pub name: String,
    /// Where it is mounted.
    pub target: String,
    /// What to copy in.
    pub seeds: Vec<Seed>,
    /// Removed with the machine (no profile).
    pub with_machine: bool,
}

/// What a machine's needs make of it.
#[derive(Debug, Default)]
pub struct Fixed {
    /// Binds.
    pub binds: Vec<Bind>,
    /// Volumes.
    pub volumes: Vec<Volume>,
}

/// `~` is the daemon user's home.
pub fn expand(path: &str) -> PathBuf {
    match path.strip_prefix('~') {
        Some(rest) => {
            let home = std::env::var("HOME").unwrap_or_else(|_| "/".into());
            PathBuf::from(format!("{home}{rest}"))
        }
        None => PathBuf::from(path),
    }
}

/// The value given to a need: the profile's, else the plugin's, else none.
fn given<'a>(name: &str, profile: Option<&'a Profile>, opts: &'a Options) -> Option<&'a Value> {
    profile
        .and_then(|p| p.needs.get(name))
        .or_else(|| opts.needs.get(name))
}

fn applies(need: &MachineNeed, mode: StateMode) -> bool {
    match need.when {
        None => true,
        Some(NeedWhen::Host) => mode == StateMode::Host,
        Some(NeedWhen::Volume) => mode == StateMode::Volume,
    }
}

/// The name of a state volume: lowercased pieces, then 8 hex of the sha256 of the unchanged
/// pieces joined by NUL.
pub fn volume_name(pieces: &[&str]) -> String {
    let clean = |p: &str| {
        let mut out = String::new();
        let mut dash = false;
        for c in p.to_lowercase().chars() {
            if c.is_ascii_alphanumeric() || c == '-' {
                out.push(c);
                dash = false;
            } else if !dash {
                out.push('-');
                dash = true;
            }
        }
        out
    };
    let hash = Sha256::digest(pieces.join("\0").as_bytes());
    let hex: String = hash.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let named: Vec<String> = pieces
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| clean(p))
        .collect();
    format!("ahpd-state-{}-{hex}", named.join("-"))
}

/// Mounts and volumes of a machine being made for these agents' needs.
pub(crate) fn fix(
    needs: &BTreeMap<String, MachineNeed>,
    provider: &str,
    machine: &str,
    profile: Option<(&str, &Profile)>,
    opts: &Options,
) -> Result<Fixed, String> {
    let mode = profile.map(|p| p.1.state).unwrap_or_default();
    let mut fixed = Fixed::default();
    for (name, need) in needs {
        if !applies(need, mode) {
            continue;
        }
        let value = given(name, profile.map(|p| p.1), opts).and_then(Value::as_str);
        let host_path = |path: &str| -> Result<String, String> {
            let p = expand(value.unwrap_or(path));
            if !p.is_absolute() || !p.exists() {
                return Err(format!(
                    "machine need {name}: {} does not exist on this host",
                    p.display()
                ));
            }
            Ok(p.to_string_lossy().into_owned())
        };
        match &need.kind {
            NeedKind::Directory {
                path,
                target,
                read_only,
            }
            | NeedKind::File {
                path,
                target,
                read_only,
            } => {
                let source = match host_path(path) {
                    Ok(s) => s,
                    Err(_) if !need.required => continue,
                    Err(e) => return Err(e),
                };
                fixed.binds.push(Bind {
                    source,
                    target: target.clone(),
                    read_only: *read_only,
                });
            }
            NeedKind::State { target, seed } => {
                let (pieces, with_machine) = match profile {
                    Some((pname, p)) => match p.state_scope {
                        StateScope::Owner => (vec![pname, "host", provider], false),
                        StateScope::Shared => (vec![pname, "", provider], false),
                    },
                    None => (vec![machine, provider], true),
                };
                fixed.volumes.push(Volume {
                    name: volume_name(&pieces),
                    target: target.clone(),
                    seeds: seed.clone(),
                    with_machine,
                });
            }
            NeedKind::Env { .. } | NeedKind::Part { .. } => {}
        }
    }
    check_targets(&fixed)?;
    Ok(fixed)
}

fn check_targets(fixed: &Fixed) -> Result<(), String> {
    let mut seen: BTreeMap<&str, String> = BTreeMap::new();
    let all = fixed
        .binds
        .iter()
        .map(|b| (b.target.as_str(), b.source.clone()))
        .chain(
            fixed
                .volumes
                .iter()
                .map(|v| (v.target.as_str(), v.name.clone())),
        );
    for (target, what) in all {
        if let Some(other) = seen.get(target)
            && *other != what
        {
            return Err(format!(
                "machine needs {other} and {what} both want {target}"
            ));
        }
        seen.insert(target, what);
    }
    Ok(())
}

/// The variables of an inner start, `NAME=value`, read now (vault values included).
pub(crate) fn variables(
    needs: &BTreeMap<String, MachineNeed>,
    profile: Option<&Profile>,
    opts: &Options,
    mode: StateMode,
    secrets: Option<&dyn SecretReader>,
) -> Result<Vec<String>, String> {
    let unreadable = profile
        .and_then(|p| p.secret_unreadable)
        .unwrap_or(opts.secret_unreadable);
    let mut out = Vec::new();
    for (name, need) in needs {
        let NeedKind::Env { name: var, default } = &need.kind else {
            continue;
        };
        if !applies(need, mode) {
            continue;
        }
        let value = given(name, profile, opts).or(default.as_ref());
        let text = match value {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Object(o)) => {
                let secret = o.get("$secret").and_then(Value::as_str).unwrap_or("");
                match secrets.map(|s| s.read(secret)) {
                    Some(Ok(v)) => v.expose().to_owned(),
                    _ => {
                        let sentence = format!(
                            "machine need {name} names {secret}, which the vault does not hold"
                        );
                        if unreadable == Unreadable::Drop {
                            tracing::warn!("{sentence}: the session starts without it");
                            continue;
                        }
                        return Err(sentence);
                    }
                }
            }
            _ if need.required => {
                return Err(format!(
                    "machine need {name} is required, and neither the profile, the plugin's needs nor the agent's default gives it a value"
                ));
            }
            _ => continue,
        };
        out.push(format!("{var}={text}"));
    }
    Ok(out)
}

/// The folder inside that a host folder maps to through the binds: the longest source
/// containing it on a path boundary.
pub fn map_folder(folder: &Path, binds: &[(String, String)]) -> Option<String> {
    binds
        .iter()
        .filter(|(src, _)| folder.starts_with(src))
        .max_by_key(|(src, _)| src.len())
        .map(|(src, dst)| {
            let rest = folder.strip_prefix(src).unwrap_or(Path::new(""));
            Path::new(dst).join(rest).to_string_lossy().into_owned()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_names_follow_the_pieces() {
        let hash = |s: &str| {
            let h = Sha256::digest(s.as_bytes());
            h.iter()
                .take(4)
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        assert_eq!(
            volume_name(&["box", "host", "cofold"]),
            format!("ahpd-state-box-host-cofold-{}", hash("box\0host\0cofold"))
        );
        assert_eq!(
            volume_name(&["box", "", "cofold"]),
            format!("ahpd-state-box-cofold-{}", hash("box\0\0cofold"))
        );
    }

    #[test]
    fn folders_map_through_the_longest_bind() {
        let binds = vec![("/srv/app".to_owned(), "/workspaces/app".to_owned())];
        assert_eq!(
            map_folder(Path::new("/srv/app/x"), &binds).as_deref(),
            Some("/workspaces/app/x")
        );
        assert_eq!(map_folder(Path::new("/srv/apple"), &binds), None);
    }

    #[test]
    fn a_required_need_valued_nowhere_is_refused_with_its_sentence() {
        let mut need = MachineNeed::new(NeedKind::Env {
            name: "COFOLD_MODEL".into(),
            default: None,
        });
        need.required = true;
        let needs = BTreeMap::from([("cofoldModel".to_owned(), need)]);
        let opts = Options::parse(&serde_json::json!({})).expect("options");
        assert_eq!(
            variables(&needs, None, &opts, StateMode::Volume, None),
            Err("machine need cofoldModel is required, and neither the profile, the plugin's needs nor the agent's default gives it a value".to_owned())
        );
        let opts = Options::parse(&serde_json::json!({ "needs": { "cofoldModel": "q" } }))
            .expect("options");
        assert_eq!(
            variables(&needs, None, &opts, StateMode::Volume, None),
            Ok(vec!["COFOLD_MODEL=q".to_owned()])
        );
    }

    #[test]
    fn a_profile_less_state_volume_is_named_after_the_machine_and_goes_with_it() {
        let needs = BTreeMap::from([(
            "cofoldState".to_owned(),
            MachineNeed::new(NeedKind::State {
                target: "/ahpd/cofold".into(),
                seed: Vec::new(),
            }),
        )]);
        let fixed = fix(
            &needs,
            "cofold",
            "box",
            None,
            &Options::parse(&serde_json::json!({})).expect("options"),
        )
        .expect("fixed");
        assert_eq!(fixed.volumes.len(), 1);
        assert_eq!(fixed.volumes[0].name, volume_name(&["box", "cofold"]));
        assert!(fixed.volumes[0].name.starts_with("ahpd-state-box-cofold-"));
        assert!(fixed.volumes[0].with_machine);
    }
}
