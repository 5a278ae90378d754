//! The memory capability: plain files under one folder that persist across sessions, read and
//! written with `memory_read` / `memory_write`, the index `MEMORY.md` shown in the instructions.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use cofold_agents::capability::{Capability, CapabilityArgs, CapabilityError};
use cofold_agents::tool::{Preview, Tool, ToolDef, ToolEffects, ToolError, ToolOutput, handler_fn};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::files::open::{OpenRefusal, Opened, checked_open, open_for_preview};
use crate::files::write::{PREVIEW_MAX_BYTES, read_for_preview, unshowable};
use crate::paths::{absolute_of, display_path, normalize, real_path, resolve_within};

/// The index file, read when memory_read names no path.
pub const MEMORY_INDEX: &str = "MEMORY.md";

/// Options of the memory capability.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryOptions {
    /// The memory folder; it may not exist yet.
    pub dir: PathBuf,
    /// Lines of `MEMORY.md` shown in the instructions (200 in `standard_capabilities`).
    pub index_lines: usize,
}

impl MemoryOptions {
    /// Options for `dir` with the default of 200 index lines.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            index_lines: 200,
        }
    }
}

/// The memory capability (id `memory`), built by [`memory`].
#[derive(Debug, Clone)]
pub struct MemoryCapability {
    folder: Arc<Folder>,
}

/// Builds the memory capability. The folder is made absolute (lexically) now.
pub fn memory(options: MemoryOptions) -> MemoryCapability {
    MemoryCapability {
        folder: Arc::new(Folder {
            dir: normalize(&absolute_of(&options.dir)),
            index_lines: options.index_lines,
        }),
    }
}

/// Why a memory tool refused.
#[derive(Debug, thiserror::Error)]
enum MemoryRefusal {
    #[error("{0} is outside the memory folder")]
    Outside(String),
    #[error("memory is empty")]
    Empty,
    #[error("no memory file {0}")]
    NoFile(String),
    #[error("{shown}: {error}")]
    Io {
        shown: String,
        error: std::io::Error,
    },
    #[error("bad input: {0}")]
    BadInput(String),
    #[error("name a file inside the memory folder, not the folder itself")]
    Folder,
    #[error("{0} would put a file under MEMORY.md, which is the index file, not a folder")]
    UnderIndex(String),
    #[error("{0} is a folder, a link or a special file, not a memory file")]
    NotAFile(String),
    #[error("{0} changed while it was being written; nothing was written")]
    Changed(String),
}

#[derive(Debug)]
struct Folder {
    dir: PathBuf,
    index_lines: usize,
}

#[derive(Deserialize)]
struct ReadInput {
    path: Option<String>,
}

#[derive(Deserialize)]
struct WriteInput {
    path: String,
    content: String,
}

impl Folder {
    /// The lexical absolute path of a memory file.
    fn absolute(&self, path: &str) -> PathBuf {
        normalize(&self.dir.join(path))
    }

    /// The display form: relative to the folder with `/`, absolute when it leaves the folder.
    fn shown(&self, path: &str) -> String {
        display_path(&self.dir, &self.absolute(path))
    }

    /// The absolute path to use, after the real-path inside check (S11).
    fn checked(&self, path: &str) -> Result<PathBuf, MemoryRefusal> {
        let resolved = resolve_within(&self.dir, Path::new(path));
        if resolved.inside {
            Ok(resolved.absolute)
        } else {
            Err(MemoryRefusal::Outside(path.to_owned()))
        }
    }

    /// The real path a write goes to, refused when it would break the folder: the folder itself
    /// (`.`, an empty path, `a/..`) or a name under `MEMORY.md`, as written or after links.
    fn writable(&self, path: &str) -> Result<PathBuf, MemoryRefusal> {
        let resolved = resolve_within(&self.dir, Path::new(path));
        if !resolved.inside {
            return Err(MemoryRefusal::Outside(path.to_owned()));
        }
        let real_dir = real_path(&self.dir);
        for (target, dir) in [(&resolved.absolute, &self.dir), (&resolved.real, &real_dir)] {
            let rest = target.strip_prefix(dir).unwrap_or(target);
            let mut names = rest.components();
            match names.next() {
                None => return Err(MemoryRefusal::Folder),
                Some(first)
                    if names.next().is_some()
                        && first.as_os_str().eq_ignore_ascii_case(MEMORY_INDEX) =>
                {
                    return Err(MemoryRefusal::UnderIndex(self.shown(path)));
                }
                Some(_) => {}
            }
        }
        Ok(resolved.real)
    }

    async fn read(&self, input: Value) -> Result<String, MemoryRefusal> {
        let input: ReadInput =
            serde_json::from_value(input).map_err(|e| MemoryRefusal::BadInput(e.to_string()))?;
        let named = input.path.as_deref();
        let path = named.unwrap_or(MEMORY_INDEX);
        let absolute = self.checked(path)?;
        // A FIFO or a device would block the read or answer for ever: only regular files.
        if let Ok(meta) = tokio::fs::metadata(&absolute).await
            && !meta.is_file()
        {
            return Err(MemoryRefusal::NotAFile(self.shown(path)));
        }
        match tokio::fs::read(&absolute).await {
            Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
            Err(error) if error.kind() == ErrorKind::NotFound => {
                if path == MEMORY_INDEX {
                    Err(MemoryRefusal::Empty)
                } else {
                    Err(MemoryRefusal::NoFile(self.shown(path)))
                }
            }
            Err(error) => Err(MemoryRefusal::Io {
                shown: self.shown(path),
                error,
            }),
        }
    }

    /// What memory_write would do: the file created or replaced with `content` byte for byte,
    /// or the refusal the call would meet, or why the change cannot be shown.
    fn preview(&self, input: &Value) -> Preview {
        let input: WriteInput = match serde_json::from_value(input.clone()) {
            Ok(input) => input,
            Err(e) => {
                return Preview::would_fail(MemoryRefusal::BadInput(e.to_string()).to_string());
            }
        };
        let real = match self.writable(&input.path) {
            Ok(real) => real,
            Err(refusal) => return Preview::would_fail(refusal.to_string()),
        };
        let shown = self.shown(&input.path);
        let after = input.content.into_bytes();
        let before = match open_for_preview(&real) {
            Ok(None) => None,
            Ok(Some(file)) => match read_for_preview(file, &shown, PREVIEW_MAX_BYTES) {
                Ok(bytes) => Some(bytes),
                Err(why) => return why,
            },
            Err(OpenRefusal::Io(error)) => {
                return Preview::would_fail(MemoryRefusal::Io { shown, error }.to_string());
            }
            Err(_) => return Preview::would_fail(MemoryRefusal::NotAFile(shown).to_string()),
        };
        for (side, what) in [
            (before.as_deref(), ""),
            (Some(&after[..]), "the new content of"),
        ] {
            if let Some(why) = side.and_then(|bytes| unshowable(&shown, bytes, what)) {
                return why;
            }
        }
        Preview::file(real, before, Some(after))
    }

    async fn write(&self, input: Value) -> Result<String, MemoryRefusal> {
        let input: WriteInput =
            serde_json::from_value(input).map_err(|e| MemoryRefusal::BadInput(e.to_string()))?;
        let WriteInput { path, content } = input;
        let real = self.writable(&path)?;
        let shown = self.shown(&path);
        let size = content.len();
        let written = tokio::task::spawn_blocking(move || write_whole(&real, content.as_bytes()))
            .await
            .unwrap_or_else(|stopped| Err(OpenRefusal::Io(std::io::Error::other(stopped))));
        match written {
            Ok(()) => {}
            Err(OpenRefusal::Changed) => return Err(MemoryRefusal::Changed(shown)),
            Err(OpenRefusal::Folder | OpenRefusal::NotRegular) => {
                return Err(MemoryRefusal::NotAFile(shown));
            }
            Err(OpenRefusal::Missing) => return Err(MemoryRefusal::NoFile(shown)),
            Err(OpenRefusal::Io(error)) => return Err(MemoryRefusal::Io { shown, error }),
        }
        Ok(format!("wrote {shown} ({size} bytes)"))
    }

    /// The index part of the instructions: `MEMORY.md`'s first lines, or that it is empty.
    async fn index(&self) -> Result<String, String> {
        let path = self.dir.join(MEMORY_INDEX);
        let text = match tokio::fs::read(&path).await {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(error) if error.kind() == ErrorKind::NotFound => String::new(),
            Err(error) => return Err(format!("cannot read {}: {error}", path.display())),
        };
        let text = text.trim_end();
        if text.is_empty() {
            return Ok("MEMORY.md is empty.".to_owned());
        }
        let lines: Vec<&str> = text.split('\n').collect();
        let shown = lines[..lines.len().min(self.index_lines)].join("\n");
        let mut index = shown.trim_end().to_owned();
        if lines.len() > self.index_lines {
            let more = lines.len() - self.index_lines;
            index.push_str(&format!(
                "\n[{more} more lines; memory_read() has them all]"
            ));
        }
        Ok(index)
    }
}

/// Writes `bytes` as the whole file at `real` through the checked open: no link is followed on
/// the way, so the file written is inside the folder that was checked.
fn write_whole(real: &Path, bytes: &[u8]) -> Result<(), OpenRefusal> {
    use std::io::{Seek, SeekFrom, Write};
    let (Opened::Existing(mut file) | Opened::Created(mut file)) = checked_open(real, true, None)?;
    file.seek(SeekFrom::Start(0))
        .and_then(|_| file.write_all(bytes))
        .and_then(|()| file.set_len(bytes.len() as u64))
        .map_err(OpenRefusal::Io)
}

#[async_trait]
impl Capability for MemoryCapability {
    fn id(&self) -> &str {
        "memory"
    }

    async fn tools(&self, _args: &CapabilityArgs) -> Result<Vec<Tool>, CapabilityError> {
        [self.read_def(), self.write_def()]
            .into_iter()
            .map(|def| Tool::new(def).map_err(|e| CapabilityError::from(e.to_string())))
            .collect()
    }

    async fn instructions(
        &self,
        _args: &CapabilityArgs,
    ) -> Result<Option<String>, CapabilityError> {
        let index = self.folder.index().await?;
        Ok(Some(format!(
            "You have a memory: files that persist across sessions, read with memory_read and \
             written with memory_write. MEMORY.md is the index, and its first lines follow.\n\
             Write what will matter in a later session (decisions, preferences, facts about this \
             project): one file per topic, each given one line in MEMORY.md; update a file rather \
             than start a second one on the same topic.\n\
             Do not write what the repository already records, nor what matters only to this \
             conversation.\n\n{index}"
        )))
    }
}

impl MemoryCapability {
    /// The memory folder, absolute.
    pub fn dir(&self) -> &Path {
        &self.folder.dir
    }

    fn read_def(&self) -> ToolDef {
        let folder = Arc::clone(&self.folder);
        let subject_folder = Arc::clone(&self.folder);
        ToolDef::new(
            "memory_read",
            "Read one memory file; without a path, MEMORY.md, the index of all the others.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File relative to the memory folder; default MEMORY.md"},
                },
                "additionalProperties": false,
            }),
            handler_fn(move |input: Value, _ctx| {
                let folder = Arc::clone(&folder);
                async move {
                    folder
                        .read(input)
                        .await
                        .map(ToolOutput::from)
                        .map_err(ToolError::failed)
                }
            }),
        )
        .effects(ToolEffects {
            reads: true,
            ..ToolEffects::default()
        })
        .subject(move |input: &Value| {
            let path = input
                .get("path")
                .and_then(Value::as_str)
                .unwrap_or(MEMORY_INDEX);
            Some(subject_folder.shown(path))
        })
    }

    fn write_def(&self) -> ToolDef {
        let folder = Arc::clone(&self.folder);
        let subject_folder = Arc::clone(&self.folder);
        let writes_folder = Arc::clone(&self.folder);
        let preview_folder = Arc::clone(&self.folder);
        ToolDef::new(
            "memory_write",
            "Write a whole memory file (folders are made). Keep MEMORY.md pointing at every file \
             with one line each.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File relative to the memory folder"},
                    "content": {"type": "string", "description": "The whole new content"},
                },
                "required": ["path", "content"],
                "additionalProperties": false,
            }),
            handler_fn(move |input: Value, _ctx| {
                let folder = Arc::clone(&folder);
                async move {
                    folder
                        .write(input)
                        .await
                        .map(ToolOutput::from)
                        .map_err(ToolError::failed)
                }
            }),
        )
        .effects(ToolEffects {
            writes: true,
            ..ToolEffects::default()
        })
        .subject(move |input: &Value| {
            let path = input.get("path").and_then(Value::as_str)?;
            Some(subject_folder.shown(path))
        })
        .writes(move |input: &Value| {
            let path = input.get("path").and_then(Value::as_str)?;
            Some(writes_folder.absolute(path))
        })
        .preview(move |input: &Value| preview_folder.preview(input))
    }
}
