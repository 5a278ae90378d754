//! list_files: the matching entries under a folder, in path order, 1000 at most.

use std::fs::FileType;
use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use super::{Refusal, Run};
use crate::paths::{display_path, resolve_within};
use crate::walk::{Glob, GlobError, Visit, walk};

/// Entries returned at most; the trailer says when the cap was reached.
pub(crate) const MAX_ENTRIES: usize = 1000;

/// Runs list_files for one call.
pub(crate) fn list_files(
    run: &Run,
    pattern: &str,
    cwd: Option<&str>,
    cancel: &CancellationToken,
) -> Result<String, Refusal> {
    let base = resolve_within(&run.workspace, Path::new(cwd.unwrap_or("."))).absolute;
    let glob = Glob::new(&base, pattern).map_err(|error| glob_refusal(pattern, &error, "cwd"))?;
    let found = walk(
        &glob,
        cancel,
        run.options.walk_limit,
        run.options.private.as_ref(),
        Vec::new,
    );
    let (stopped, skipped) = (found.stopped, found.skipped);
    let mut entries: Vec<(PathBuf, bool)> = found.visits.into_iter().flatten().collect();
    if entries.is_empty() {
        let mut out = format!(
            "no files match {pattern} under {}",
            display_path(&run.workspace, &base)
        );
        out.push_str(&skipped_note(skipped));
        if stopped {
            out.push_str(&stopped_note(run));
        }
        return Ok(out);
    }
    let capped = entries.len() >= MAX_ENTRIES;
    if entries.len() > MAX_ENTRIES {
        entries.select_nth_unstable_by(MAX_ENTRIES - 1, |a, b| a.0.cmp(&b.0));
        entries.truncate(MAX_ENTRIES);
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut out = String::new();
    for (i, (path, is_dir)) in entries.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&row(&base, path));
        if *is_dir {
            out.push('/');
        }
    }
    if capped {
        out.push_str(&format!("\n[{MAX_ENTRIES} entries; narrow the pattern]"));
    }
    out.push_str(&skipped_note(skipped));
    if stopped {
        out.push_str(&stopped_note(run));
    }
    Ok(out)
}

/// The refusal of a glob: the compiler's reason, or how it would leave the folder and what to
/// give instead (`folder` is the input naming the folder: `cwd` or `path`).
pub(crate) fn glob_refusal(pattern: &str, error: &GlobError, folder: &str) -> Refusal {
    Refusal(match error {
        GlobError::Invalid(reason) => format!("invalid glob {pattern}: {reason}"),
        GlobError::Outside(how) => format!(
            "the glob {pattern} {how}; a glob stays inside the folder it applies to, so give \
             another folder as {folder} (a folder outside the workspace may need approval)"
        ),
    })
}

/// The trailer of a walk that left private entries out; empty when it left none.
pub(crate) fn skipped_note(skipped: usize) -> String {
    match skipped {
        0 => String::new(),
        n => format!(
            "\n[{n} private entries skipped (credential stores, the host's own files): name one as \
             the folder to ask for it]"
        ),
    }
}

/// The trailer of a walk the time limit stopped.
pub(crate) fn stopped_note(run: &Run) -> String {
    format!(
        "\n[stopped after {} s, the time limit of a walk: the results are partial; narrow the \
         folder or the pattern]",
        crate::shell::seconds(
            u64::try_from(run.options.walk_limit.as_millis()).unwrap_or(u64::MAX)
        )
    )
}

/// The entry relative to the base when under it; display_path's rule otherwise.
fn row(base: &Path, path: &Path) -> String {
    match path.strip_prefix(base) {
        Ok(rest) if !rest.as_os_str().is_empty() && !cfg!(windows) => {
            rest.to_string_lossy().into_owned()
        }
        _ => display_path(base, path),
    }
}

impl Visit for Vec<(PathBuf, bool)> {
    fn entry(&mut self, path: &Path, file_type: FileType) -> bool {
        // A link to a folder is a link: only real folders get the trailing `/`.
        self.push((path.to_path_buf(), file_type.is_dir()));
        true
    }
}
