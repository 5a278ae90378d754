//! Project instructions in a session: which folders count as served, the person's answer for
//! a folder outside them (asked in the turn, remembered for the session or in the configuration
//! folder), and the files read, named in the session's `_meta` under `ahpd.instructions`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ahp_types::state::ChatInputResponseKind;
use ahpd_sdk::SessionContext;
use async_trait::async_trait;
use cofold_tools::project::{FolderTrust, Inclusion, Loaded, ProjectSources};
use serde_json::{Value, json};

/// The session `_meta` key naming the instruction files read for the last turn.
pub const META_KEY: &str = "ahpd.instructions";
/// The file in the configuration folder listing folders the person let in for good.
pub const TRUSTED_FILE: &str = "trusted-folders.json";

/// Where project instructions may come from, as the embedder (the daemon) says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProjectSetup {
    /// The folders the host serves. `None`: the host has no such notion, and each session's own
    /// folder counts as served.
    pub served: Option<Vec<PathBuf>>,
    /// The person's own instructions file, read after the project's.
    pub global: Option<PathBuf>,
    /// The configuration folder, where the answers "always" are kept ([`TRUSTED_FILE`]).
    pub config_dir: Option<PathBuf>,
}

/// The folders a person let in for this session or said no to.
#[derive(Default)]
pub(crate) struct Answers {
    allowed: HashSet<PathBuf>,
    declined: HashSet<PathBuf>,
}

/// Folders kept in the trusted file.
fn trusted(config_dir: &Path) -> Vec<PathBuf> {
    std::fs::read(config_dir.join(TRUSTED_FILE))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v.get("folders").cloned())
        .and_then(|v| serde_json::from_value::<Vec<PathBuf>>(v).ok())
        .unwrap_or_default()
}

/// Adds `folder` to the trusted file, written whole through a temporary file so a reader never
/// sees half of it; readable by the person alone.
fn remember(config_dir: &Path, folder: &Path) -> std::io::Result<()> {
    let mut folders = trusted(config_dir);
    if folders.iter().any(|f| f == folder) {
        return Ok(());
    }
    folders.push(folder.to_path_buf());
    std::fs::create_dir_all(config_dir)?;
    let path = config_dir.join(TRUSTED_FILE);
    let temp = config_dir.join(format!(".{TRUSTED_FILE}.{}", std::process::id()));
    let body =
        serde_json::to_vec_pretty(&json!({ "folders": folders })).map_err(std::io::Error::other)?;
    {
        use std::io::Write;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(&temp)?;
        file.write_all(&body)?;
        file.sync_all()?;
    }
    std::fs::rename(&temp, &path)
}

/// Asks the person of one turn about a folder outside the served ones.
struct TurnTrust {
    ctx: SessionContext,
    turn_id: String,
    config_dir: Option<PathBuf>,
    answers: Arc<Mutex<Answers>>,
}

const ALWAYS: &str = "always";
const SESSION: &str = "session";
const NO: &str = "no";

#[async_trait]
impl FolderTrust for TurnTrust {
    async fn allow(&self, top: &Path, files: &[PathBuf]) -> bool {
        if let Some(dir) = &self.config_dir
            && trusted(dir).iter().any(|f| top.starts_with(f))
        {
            return true;
        }
        {
            let answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
            if answers.allowed.contains(top) {
                return true;
            }
            if answers.declined.contains(top) {
                return false;
            }
        }
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        let mut options = Vec::new();
        if self.config_dir.is_some() {
            options.push(
                json!({ "id": ALWAYS, "label": "Read them, now and in later sessions",
                "description": format!("Remembers {} as trusted", top.display()) }),
            );
        }
        options.push(json!({ "id": SESSION, "label": "Read them in this session" }));
        options.push(json!({ "id": NO, "label": "Do not read them" }));
        let request = json!({
            "id": format!("{}:instructions", self.turn_id),
            "message": "Project instructions",
            "questions": [{
                "kind": "single-select", "id": "trust", "title": "Project instructions",
                "message": format!(
                    "{} is not in a folder this host serves. Read its instruction files into the \
                     session's instructions? {}",
                    top.display(),
                    names.join(", ")
                ),
                "options": options,
                "allowFreeformInput": false,
            }],
        });
        let Ok(request) = serde_json::from_value(request) else {
            return false;
        };
        let outcome = self.ctx.ask_input(&self.turn_id, request).await;
        if outcome.response != ChatInputResponseKind::Accept {
            // A stopped turn or a dismissed question decides nothing; a decline is kept.
            if outcome.response == ChatInputResponseKind::Decline {
                self.answers
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .declined
                    .insert(top.to_path_buf());
            }
            return false;
        }
        let answer = crate::asks::answers_value(outcome.answers.as_ref());
        let choice = answer.get("trust").and_then(Value::as_str).unwrap_or(NO);
        let mut answers = self.answers.lock().unwrap_or_else(|p| p.into_inner());
        match choice {
            ALWAYS | SESSION => {
                if choice == ALWAYS
                    && let Some(dir) = &self.config_dir
                    && let Err(e) = remember(dir, top)
                {
                    tracing::warn!("cannot keep {} as trusted: {e}", top.display());
                }
                answers.allowed.insert(top.to_path_buf());
                true
            }
            _ => {
                answers.declined.insert(top.to_path_buf());
                false
            }
        }
    }
}

fn inclusion_word(inclusion: Inclusion) -> &'static str {
    match inclusion {
        Inclusion::Whole => "whole",
        Inclusion::Cut => "cut",
        Inclusion::Left => "left out",
    }
}

/// The `ahpd.instructions` value for one reading.
pub(crate) fn meta_value(loaded: &Loaded) -> Value {
    let files: Vec<Value> = loaded
        .files
        .iter()
        .map(|f| {
            json!({
                "path": f.path.display().to_string(),
                "bytes": f.bytes,
                "included": inclusion_word(f.inclusion),
                "global": f.global,
            })
        })
        .collect();
    let mut value = json!({ "files": files, "cut": loaded.cut() });
    if !loaded.withheld.is_empty() {
        value["withheld"] = json!(
            loaded
                .withheld
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
        );
    }
    value
}

/// What a session keeps between turns about its instructions.
#[derive(Default)]
pub(crate) struct SessionProject {
    pub(crate) answers: Arc<Mutex<Answers>>,
}

impl SessionProject {
    /// The sources of one turn's instructions.
    pub(crate) fn sources(
        &self,
        setup: &ProjectSetup,
        folder: &Path,
        ctx: &SessionContext,
        turn_id: &str,
    ) -> ProjectSources {
        ProjectSources {
            folder: folder.to_path_buf(),
            served: setup
                .served
                .clone()
                .unwrap_or_else(|| vec![folder.to_path_buf()]),
            global: setup.global.clone(),
            trust: Some(Arc::new(TurnTrust {
                ctx: ctx.clone(),
                turn_id: turn_id.to_owned(),
                config_dir: setup.config_dir.clone(),
                answers: self.answers.clone(),
            })),
            cap: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remembered_folder_is_kept_in_the_configuration_folder() {
        let dir = tempfile::tempdir().expect("temp");
        remember(dir.path(), Path::new("/srv/one")).expect("kept");
        remember(dir.path(), Path::new("/srv/one")).expect("kept");
        remember(dir.path(), Path::new("/srv/two")).expect("kept");
        assert_eq!(
            trusted(dir.path()),
            [PathBuf::from("/srv/one"), PathBuf::from("/srv/two")]
        );
    }
}
