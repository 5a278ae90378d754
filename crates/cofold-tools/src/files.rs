//! The files capability: `read_file`, `write_file`, `edit_file`, `list_files` and
//! `search_files` against the run's workspace.
//!
//! Reads go anywhere. Writes go through the checked open, so the file written is the file that
//! was checked, and an existing file is changed only after the session has read it as it is now.

mod list;
pub(crate) mod open;
mod read;
mod record;
mod search;
pub(crate) mod write;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use cofold_agents::capability::{Capability, CapabilityArgs, CapabilityError};
use cofold_agents::tool::{
    Preview, Tool, ToolContext, ToolDef, ToolEffects, ToolError, ToolHandler, ToolOutput,
    handler_fn,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub use record::ReadRecord;

/// The shape of the `before_open` test seam: called with the real path about to be opened.
#[doc(hidden)]
pub type BeforeOpen = dyn Fn(&Path) + Send + Sync;

use crate::paths::{absolute_of, display_path, normalize, real_path, resolve_within};

/// Options of the files capability. `Default` gives the documented defaults.
#[derive(Clone)]
pub struct FilesOptions {
    /// Lines read_file returns per call when the call gives no `limit` (default 2000).
    pub max_lines: usize,
    /// Rows search_files returns when the call gives no `limit` (default 200).
    pub max_matches: usize,
    /// Refuse write_file and edit_file on an existing file the session has not read as it is now
    /// (default on). Reads are recorded either way.
    pub require_read: bool,
    /// The read-before-write record; `None` uses the process-wide [`ReadRecord::global`].
    pub read_record: Option<Arc<ReadRecord>>,
    /// How long one list_files or search_files walk may take before it stops and says so
    /// (default 30 s).
    pub walk_limit: std::time::Duration,
    /// Test seam: called with the real path after the write checks and right before the first
    /// open of the file or its parent folder.
    #[doc(hidden)]
    pub before_open: Option<Arc<BeforeOpen>>,
}

impl Default for FilesOptions {
    fn default() -> FilesOptions {
        FilesOptions {
            max_lines: 2000,
            max_matches: 200,
            require_read: true,
            walk_limit: std::time::Duration::from_secs(30),
            read_record: None,
            before_open: None,
        }
    }
}

impl fmt::Debug for FilesOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FilesOptions")
            .field("max_lines", &self.max_lines)
            .field("max_matches", &self.max_matches)
            .field("require_read", &self.require_read)
            .field("walk_limit", &self.walk_limit)
            .field("read_record", &self.read_record.is_some())
            .finish_non_exhaustive()
    }
}

/// The files capability (id `files`), built by [`files`].
#[derive(Debug, Clone)]
pub struct FilesCapability {
    options: Arc<FilesOptions>,
    record: Arc<ReadRecord>,
}

/// Builds the files capability: its five tools and its instructions section.
pub fn files(options: FilesOptions) -> FilesCapability {
    let record = options
        .read_record
        .clone()
        .unwrap_or_else(ReadRecord::global);
    FilesCapability {
        options: Arc::new(options),
        record,
    }
}

/// The workspace a run works against: the session's, or the current directory without one.
fn workspace_of(args: &CapabilityArgs) -> PathBuf {
    let given = args.workspace.as_deref().unwrap_or(".");
    normalize(&absolute_of(Path::new(given)))
}

#[async_trait]
impl Capability for FilesCapability {
    fn id(&self) -> &str {
        "files"
    }

    async fn tools(&self, args: &CapabilityArgs) -> Result<Vec<Tool>, CapabilityError> {
        let run = Arc::new(Run {
            workspace: workspace_of(args),
            session: args.session_id.clone(),
            options: Arc::clone(&self.options),
            record: Arc::clone(&self.record),
        });
        let defs = [
            read_file_def(&run),
            write_file_def(&run),
            edit_file_def(&run),
            list_files_def(&run),
            search_files_def(&run),
        ];
        defs.into_iter()
            .map(|def| Tool::new(def).map_err(|e| CapabilityError::from(e.to_string())))
            .collect()
    }

    async fn instructions(&self, args: &CapabilityArgs) -> Result<Option<String>, CapabilityError> {
        let workspace = workspace_of(args);
        Ok(Some(format!(
            "The workspace is {}; relative paths resolve against it. You may read files anywhere, \
             but a write outside the workspace asks first.\n\
             Find code with search_files and see what exists with list_files, then read_file only \
             the files that matter instead of reading whole trees.\n\
             Read an existing file before changing it, and change it with edit_file and an exact, \
             unique old text; write_file is for new files and whole replacements.",
            workspace.display()
        )))
    }
}

/// What one run's tools share: the captured workspace and session, the options and the record.
pub(crate) struct Run {
    pub(crate) workspace: PathBuf,
    pub(crate) session: String,
    pub(crate) options: Arc<FilesOptions>,
    pub(crate) record: Arc<ReadRecord>,
}

impl Run {
    /// The lexical absolute path of a tool's `path` (S1), as `writes` declares it.
    fn absolute(&self, path: &str) -> PathBuf {
        normalize(&self.workspace.join(path))
    }

    /// The subject of a path tool: where the path lands on disk now (links followed, dangling
    /// ones too), shown from the workspace's own real path. Rules match what is touched, not how
    /// it is spelled: with `lib -> src`, `lib/a.rs` is the subject `src/a.rs`.
    fn shown(&self, path: &str) -> String {
        let resolved = resolve_within(&self.workspace, Path::new(path));
        display_path(&real_path(&self.workspace), &resolved.real)
    }
}

/// A refusal: one sentence for the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Refusal(pub(crate) String);

impl Refusal {
    /// An operating-system error this crate does not name, shown as `<shown>: <error>`.
    pub(crate) fn io(shown: &str, error: &std::io::Error) -> Refusal {
        Refusal(format!("{shown}: {error}"))
    }
}

fn parse<T: DeserializeOwned>(input: Value) -> Result<T, ToolError> {
    serde_json::from_value(input)
        .map_err(|e| ToolError::failed(format!("the input does not fit the tool: {e}")))
}

/// A preview's input parsed as the handler parses it; an input the handler would refuse is
/// previewed as that refusal.
fn parsed<T: DeserializeOwned>(input: &Value) -> Result<T, Preview> {
    serde_json::from_value(input.clone())
        .map_err(|e| Preview::would_fail(format!("the input does not fit the tool: {e}")))
}

/// Runs synchronous file work on the blocking pool and turns a refusal into a tool error.
async fn blocking(
    work: impl FnOnce() -> Result<String, Refusal> + Send + 'static,
) -> Result<ToolOutput, ToolError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(Ok(text)) => Ok(ToolOutput::from(text)),
        Ok(Err(refusal)) => Err(ToolError::failed(refusal)),
        Err(error) => Err(ToolError::failed(format!("the tool stopped: {error}"))),
    }
}

/// The handler of a files tool: parse the input as `I`, then run `work` on the blocking pool with
/// the run's shared state and the call's cancel token.
fn handler<I>(
    run: &Arc<Run>,
    work: fn(&Run, I, &CancellationToken) -> Result<String, Refusal>,
) -> Arc<dyn ToolHandler>
where
    I: DeserializeOwned + Send + 'static,
{
    let run = Arc::clone(run);
    handler_fn(move |input, ctx: ToolContext| {
        let run = Arc::clone(&run);
        async move {
            let input: I = parse(input)?;
            let cancel = ctx.signal.token().clone();
            blocking(move || work(&run, input, &cancel)).await
        }
    })
}

/// Declares a tool that writes the file its `path` names: destructive, with the shown path as its
/// subject and the lexical absolute path as what it writes.
fn writes_its_path(def: ToolDef, run: &Arc<Run>) -> ToolDef {
    let subject = Arc::clone(run);
    let target = Arc::clone(run);
    def.effects(ToolEffects {
        writes: true,
        destructive: true,
        ..ToolEffects::default()
    })
    .subject(move |input| Some(subject.shown(path_of(input))))
    .writes(move |input| Some(target.absolute(path_of(input))))
}

fn path_of(input: &Value) -> &str {
    input.get("path").and_then(Value::as_str).unwrap_or(".")
}

fn schema(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

#[derive(Deserialize)]
struct ReadInput {
    path: String,
    offset: Option<u64>,
    limit: Option<u64>,
}

fn read_file_def(run: &Arc<Run>) -> ToolDef {
    let max_lines = run.options.max_lines;
    let input = schema(
        json!({
            "path": {"type": "string", "description": "File to read, absolute or relative to the workspace"},
            "offset": {"type": "integer", "minimum": 1, "description": "First line to return, 1-based; default 1"},
            "limit": {"type": "integer", "minimum": 1, "description": format!("Number of lines; default {max_lines}")},
        }),
        &["path"],
    );
    let description = format!(
        "Read a text file. It comes back as numbered lines, {max_lines} at a time starting at \
         offset, with a note saying how many lines are left. Binary files are refused, and lines \
         longer than 2000 characters are cut."
    );
    let subject = Arc::clone(run);
    ToolDef::new(
        "read_file",
        description,
        input,
        handler(run, |run, input: ReadInput, _| {
            read::read_file(run, &input.path, input.offset, input.limit)
        }),
    )
    .effects(ToolEffects {
        reads: true,
        ..ToolEffects::default()
    })
    .subject(move |input| Some(subject.shown(path_of(input))))
}

#[derive(Deserialize)]
struct WriteInput {
    path: String,
    content: String,
}

fn write_file_def(run: &Arc<Run>) -> ToolDef {
    let input = schema(
        json!({
            "path": {"type": "string", "description": "File to write, absolute or relative to the workspace"},
            "content": {"type": "string", "description": "The whole new content"},
        }),
        &["path", "content"],
    );
    let description = "Write a whole file: create it (and its missing folders) or replace it \
                       entirely. To change part of a file, use edit_file.";
    let def = ToolDef::new(
        "write_file",
        description,
        input,
        handler(run, |run, input: WriteInput, _| {
            write::write_file(run, &input.path, &input.content)
        }),
    );
    let preview = Arc::clone(run);
    writes_its_path(def, run).preview(move |input| match parsed::<WriteInput>(input) {
        Ok(input) => write::preview_write(&preview, &input.path, &input.content),
        Err(why) => why,
    })
}

#[derive(Deserialize)]
struct EditInput {
    path: String,
    old: String,
    new: String,
    #[serde(default)]
    all: bool,
}

fn edit_file_def(run: &Arc<Run>) -> ToolDef {
    let input = schema(
        json!({
            "path": {"type": "string", "description": "File to change"},
            "old": {"type": "string", "minLength": 1, "description": "Exact text to replace, whitespace included"},
            "new": {"type": "string", "description": "Replacement text"},
            "all": {"type": "boolean", "description": "Replace every occurrence; default false"},
        }),
        &["path", "old", "new"],
    );
    let description = "Replace an exact piece of text in a file. old must occur exactly once \
                       (add neighbouring lines to make it unique) unless all is true. Read the \
                       file with read_file first.";
    let def = ToolDef::new(
        "edit_file",
        description,
        input,
        handler(run, |run, input: EditInput, _| {
            write::edit_file(run, &input.path, &input.old, &input.new, input.all)
        }),
    );
    let preview = Arc::clone(run);
    writes_its_path(def, run).preview(move |input| match parsed::<EditInput>(input) {
        Ok(i) => write::preview_edit(&preview, &i.path, &i.old, &i.new, i.all),
        Err(why) => why,
    })
}

fn pattern_of(input: &Value) -> Option<String> {
    input
        .get("pattern")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

#[derive(Deserialize)]
struct ListInput {
    pattern: String,
    cwd: Option<String>,
}

fn list_files_def(run: &Arc<Run>) -> ToolDef {
    let input = schema(
        json!({
            "pattern": {"type": "string", "description": "A glob relative to cwd, which it cannot leave (no .., /, ~); ** crosses folders"},
            "cwd": {"type": "string", "description": "Folder the pattern is relative to; default the workspace"},
        }),
        &["pattern"],
    );
    let description = format!(
        "List the files and folders matching a glob, such as src/**/*.ts or *.md. Folders end \
         with /. node_modules and .git are skipped unless the pattern names them. At most {} \
         entries come back.",
        list::MAX_ENTRIES
    );
    ToolDef::new(
        "list_files",
        description,
        input,
        handler(run, |run, input: ListInput, cancel| {
            list::list_files(run, &input.pattern, input.cwd.as_deref(), cancel)
        }),
    )
    .effects(ToolEffects {
        reads: true,
        ..ToolEffects::default()
    })
    .subject(pattern_of)
}

#[derive(Deserialize)]
struct SearchInput {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    #[serde(rename = "ignoreCase", default)]
    ignore_case: bool,
    limit: Option<u64>,
}

fn search_files_def(run: &Arc<Run>) -> ToolDef {
    let max_matches = run.options.max_matches;
    let input = schema(
        json!({
            "pattern": {"type": "string", "description": "A regular expression in Rust regex syntax (no look-around, no back-references)"},
            "path": {"type": "string", "description": "File or folder to search; default the workspace"},
            "glob": {"type": "string", "description": "Only files matching this glob under path, such as **/*.ts; it cannot leave path (no .., /, ~)"},
            "ignoreCase": {"type": "boolean", "description": "Match without regard to case; default false"},
            "limit": {"type": "integer", "minimum": 1, "description": format!("Rows to return; default {max_matches}")},
        }),
        &["pattern"],
    );
    let description = format!(
        "Search file contents line by line with a regular expression. Rows are file:line:text, \
         at most {max_matches}. Binary files, files over 2 MiB, node_modules and .git are \
         skipped."
    );
    ToolDef::new(
        "search_files",
        description,
        input,
        handler(run, |run, input: SearchInput, cancel| {
            let query = search::SearchInput {
                pattern: &input.pattern,
                path: input.path.as_deref(),
                glob: input.glob.as_deref(),
                ignore_case: input.ignore_case,
                limit: input.limit,
            };
            search::search_files(run, &query, cancel)
        }),
    )
    .effects(ToolEffects {
        reads: true,
        ..ToolEffects::default()
    })
    .subject(pattern_of)
}
