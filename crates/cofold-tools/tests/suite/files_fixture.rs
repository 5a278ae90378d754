//! Fixture F of the tools cases (docs/acceptance.md), and the files tools of one run through the shared driver.

use std::fs;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cofold_agents::capability::Capability;
use cofold_tools::files::{FilesOptions, ReadRecord, files};
use tempfile::TempDir;

use super::tools_driver::Caps;

/// A temporary workspace, canonicalised.
pub struct Ws {
    _dir: TempDir,
    pub root: PathBuf,
}

impl Ws {
    /// An empty workspace.
    pub fn empty() -> Ws {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = fs::canonicalize(dir.path()).expect("canonical");
        Ws { _dir: dir, root }
    }

    /// Fixture F.
    pub fn f() -> Ws {
        let ws = Ws::empty();
        ws.write(
            "src/a.ts",
            "const a = 1;\nexport const b = a + 1;\n// TODO later\n",
        );
        ws.write("src/deep/c.ts", "export const c = 3; // todo\n");
        let readme: Vec<String> = (1..=12).map(|i| format!("line {i}")).collect();
        ws.write("README.md", &readme.join("\n"));
        ws.write_bytes("image.bin", &[0x89, 0x50, 0x00, 0x47]);
        ws.write("node_modules/dep/index.js", "const a = 0;\n");
        ws
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    pub fn write(&self, rel: &str, text: &str) {
        self.write_bytes(rel, text.as_bytes());
    }

    pub fn write_bytes(&self, rel: &str, bytes: &[u8]) {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).expect("folders");
        }
        fs::write(path, bytes).expect("write");
    }

    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.path(rel)).expect("read")
    }

    pub fn bytes(&self, rel: &str) -> Vec<u8> {
        fs::read(self.path(rel)).expect("read")
    }

    /// The root as text, the way the tools print absolute paths.
    pub fn text(&self) -> String {
        self.root.to_string_lossy().into_owned()
    }
}

/// Options of fixture F: five lines a page, three rows a search, a private record.
pub fn f_options() -> FilesOptions {
    FilesOptions {
        max_lines: 5,
        max_matches: 3,
        read_record: Some(Arc::new(ReadRecord::new())),
        ..FilesOptions::default()
    }
}

/// The files tools of one run: the shared driver, resolved from the files capability.
pub struct Files(Caps);

impl Deref for Files {
    type Target = Caps;

    fn deref(&self) -> &Caps {
        &self.0
    }
}

impl Files {
    /// Builds the capability with `options` and resolves it for `session` in `workspace`.
    pub async fn new(workspace: &Path, session: &str, options: FilesOptions) -> Files {
        let capability = files(options);
        assert_eq!(capability.id(), "files");
        let caps = Caps::for_session(&capability, Some(workspace), session).await;
        assert!(
            caps.instructions.is_some(),
            "the files section is always there"
        );
        Files(caps)
    }

    /// Fixture F's tools for session `s` (or another), sharing nothing with other tests.
    pub async fn f(ws: &Ws, session: &str) -> Files {
        Files::new(&ws.root, session, f_options()).await
    }
}

/// The parent of a path as text with `/`.
pub fn slash(path: &Path) -> String {
    path.to_string_lossy().replace('\\', "/")
}
