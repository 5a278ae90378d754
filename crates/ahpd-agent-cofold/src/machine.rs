//! What cofold asks of a machine it runs in: the `ahpd` part, its configuration as a state
//! volume seeded from this host's copapo file (or that file bound read-only for machines that
//! share the host's state), and the variables that point it at its model.
//!
//! The model variables default to this host's own `COPAPO_*` (else `COFOLD_*`) values, so the
//! quick start (three variables, no copapo file) works in a machine too. They travel like every
//! need value, in the inner start's exec request only, and the inner host withholds the key from
//! its environment block as any host does. The configuration file is named to the inner host by
//! [`MACHINE_CONFIG`], which it reads only when the file is there: a host without a copapo file
//! makes a machine without one, and nothing inside asks for it.

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

/// The variable that names the copapo file a machine carries; read only when the file exists.
pub const MACHINE_CONFIG: &str = "COFOLD_MACHINE_CONFIG";

/// This host's value of a model variable: `COPAPO_<x>`, else `COFOLD_<x>`, when non-empty.
fn host_value(env: &Environment, x: &str) -> Option<String> {
    [format!("COPAPO_{x}"), format!("COFOLD_{x}")]
        .iter()
        .find_map(|name| env.vars.get(name).filter(|v| !v.trim().is_empty()).cloned())
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
        .when(NeedWhen::Host),
    );
    out.insert(
        "cofoldConfigPath".to_owned(),
        env_need(MACHINE_CONFIG, Some(inside)),
    );
    out.insert(
        "cofoldBaseUrl".to_owned(),
        env_need("COFOLD_BASE_URL", host_value(env, "BASE_URL")),
    );
    out.insert(
        "cofoldApiKey".to_owned(),
        env_need("COFOLD_API_KEY", host_value(env, "API_KEY")),
    );
    out.insert(
        "cofoldModel".to_owned(),
        env_need("COFOLD_MODEL", host_value(env, "MODEL")),
    );
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
        assert!(!all["cofoldConfig"].required);
    }

    #[test]
    fn the_model_variables_default_to_the_hosts_copapo_ones() {
        let env = Environment {
            vars: [
                ("COPAPO_BASE_URL", "http://127.0.0.1:9/v1"),
                ("COFOLD_BASE_URL", "http://other/v1"),
                ("COFOLD_API_KEY", "sk-x"),
                ("COPAPO_MODEL", " "),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
            home: PathBuf::from("/home/u"),
        };
        let all = needs(Some("/ahpd/cofold"), &env);
        let default = |need: &str| match &all[need].kind {
            NeedKind::Env { default, .. } => default.clone(),
            _ => panic!("an env need"),
        };
        assert_eq!(
            default("cofoldBaseUrl"),
            Some(Value::String("http://127.0.0.1:9/v1".into()))
        );
        assert_eq!(default("cofoldApiKey"), Some(Value::String("sk-x".into())));
        assert_eq!(default("cofoldModel"), None);
    }
}
