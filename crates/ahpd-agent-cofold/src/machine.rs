//! What cofold asks of a machine it runs in: the `ahpd` part, its configuration as a state
//! volume seeded from this host's copapo file (or that file bound read-only for machines that
//! share the host's state), and the variables that point it at its model.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ahpd_sdk::machine::{MachineNeed, NeedKind, NeedWhen, Seed};
use serde_json::Value;

use crate::options::Environment;

/// This host's copapo file: `$COPAPO_CONFIG`, else the user file. Read when asked, so a file
/// made or moved later is found.
pub fn copapo_file(env: &Environment) -> PathBuf {
    match env.vars.get("COPAPO_CONFIG").filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => match env.vars.get("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
            Some(x) => PathBuf::from(x).join("copapo").join("config.json"),
            None => env.home.join(".config").join("copapo").join("config.json"),
        },
    }
}

fn env_need(var: &str, default: Option<String>) -> MachineNeed {
    MachineNeed::new(NeedKind::Env {
        name: var.to_owned(),
        default: default.map(Value::String),
    })
}

/// The needs, with `dir` the `computerConfigDir` in force (`None` for `false`).
pub fn needs(dir: Option<&str>, env: &Environment) -> BTreeMap<String, MachineNeed> {
    let mut out = BTreeMap::new();
    out.insert(
        "ahpdPart".to_owned(),
        MachineNeed::new(NeedKind::Part {
            name: "ahpd".into(),
        })
        .required(),
    );
    let Some(dir) = dir else {
        return out;
    };
    let file = copapo_file(env).to_string_lossy().into_owned();
    let inside = format!("{}/config.json", dir.trim_end_matches('/'));
    out.insert(
        "cofoldState".to_owned(),
        MachineNeed::new(NeedKind::State {
            target: dir.to_owned(),
            seed: vec![Seed {
                source: file.clone(),
                target: Some("config.json".into()),
                keep: Vec::new(),
                drop: Vec::new(),
            }],
        })
        .when(NeedWhen::Volume),
    );
    out.insert(
        "cofoldConfig".to_owned(),
        MachineNeed::new(NeedKind::File {
            path: file,
            target: inside.clone(),
            read_only: true,
        })
        .required()
        .when(NeedWhen::Host),
    );
    out.insert(
        "cofoldConfigPath".to_owned(),
        env_need("COPAPO_CONFIG", Some(inside)),
    );
    out.insert(
        "cofoldBaseUrl".to_owned(),
        env_need("COFOLD_BASE_URL", None),
    );
    out.insert("cofoldApiKey".to_owned(), env_need("COFOLD_API_KEY", None));
    out.insert("cofoldModel".to_owned(), env_need("COFOLD_MODEL", None));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn false_declares_only_the_part() {
        let env = Environment {
            vars: Default::default(),
            home: PathBuf::from("/home/u"),
        };
        assert_eq!(needs(None, &env).len(), 1);
        let all = needs(Some("/ahpd/cofold"), &env);
        let NeedKind::Env { default, .. } = &all["cofoldConfigPath"].kind else {
            panic!("an env need");
        };
        assert_eq!(
            default.as_ref().and_then(Value::as_str),
            Some("/ahpd/cofold/config.json")
        );
        let NeedKind::State { seed, .. } = &all["cofoldState"].kind else {
            panic!("a state need");
        };
        assert_eq!(seed[0].source, "/home/u/.config/copapo/config.json");
    }
}
