use std::collections::HashMap;
use std::path::{Path, PathBuf};

use cofold_config::{LoadOptions, Mode};
use serde_json::Value;

/// A home folder, a project tree and an environment, all in one temporary folder.
pub struct World {
    pub dir: tempfile::TempDir,
    pub env: HashMap<String, String>,
}

impl World {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        std::fs::create_dir_all(dir.path().join("work/project/sub")).unwrap();
        World {
            dir,
            env: HashMap::new(),
        }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, value: &Value) -> PathBuf {
        self.write_text(rel, &value.to_string())
    }

    pub fn write_text(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    /// The user file under `~/.config/copapo/config.json`.
    pub fn user(&self, value: &Value) -> PathBuf {
        self.write("home/.config/copapo/config.json", value)
    }

    pub fn set(&mut self, k: &str, v: &str) {
        self.env.insert(k.into(), v.into());
    }

    pub fn load(&self, cwd: &Path, mode: Mode) -> LoadOptions {
        LoadOptions {
            cwd: cwd.to_path_buf(),
            env: Some(self.env.clone()),
            home: Some(self.home()),
            path: None,
            mode,
        }
    }
}
