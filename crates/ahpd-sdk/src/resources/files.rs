//! [`FileResources`]: read-only `file:` resources inside the host's folders, never inside the
//! folders it is told to keep private, and never larger than a set size.
//!
//! Every path is resolved (links followed) before it is judged, so a link inside a served folder
//! that points at a private one is refused like the private path itself; a read is judged again
//! on the file it actually opened.

use std::ffi::OsStr;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use ahp_types::commands::{
    ContentEncoding, DirectoryEntry, ResourceListResult, ResourceReadResult, ResourceResolveResult,
    ResourceType,
};
use async_trait::async_trait;
use base64::Engine as _;

use crate::error::{RpcError, codes};
use crate::resources::port::Resources;
use crate::util::{file_uri, path_of};

/// The largest file `resourceRead` returns by default: 8 MiB, which stays under the host's
/// default 16 MiB frame once encoded as base64.
pub const DEFAULT_MAX_READ_BYTES: u64 = 8 * 1024 * 1024;

/// Folders served besides the fixed ones, asked at every request (the folders of the sessions
/// open now, say).
pub trait RootSource: Send + Sync + 'static {
    /// The folders to serve now.
    fn roots(&self) -> Vec<PathBuf>;
}

/// Serves `file:` URIs inside the given folders only: `-32009` outside them or inside a denied
/// folder, `-32008` when missing, `-32602` for a file over the size limit.
#[derive(Clone)]
pub struct FileResources {
    roots: Vec<PathBuf>,
    live: Option<Arc<dyn RootSource>>,
    deny: Vec<PathBuf>,
    denied_names: Vec<(PathBuf, NameRule)>,
    max_read_bytes: u64,
}

/// Picks, by file name, entries of one folder that are never served.
type NameRule = Arc<dyn Fn(&OsStr) -> bool + Send + Sync>;

impl std::fmt::Debug for FileResources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileResources")
            .field("roots", &self.roots)
            .field("deny", &self.deny)
            .field("max_read_bytes", &self.max_read_bytes)
            .finish_non_exhaustive()
    }
}

/// What a path resolves to with respect to the served and denied folders.
enum Judged {
    /// Inside a served folder and no denied one; the resolved path.
    Served(PathBuf),
    /// Inside a served folder but missing.
    Missing,
    /// Inside a denied folder.
    Private,
    /// Under `/proc`, `/sys` or `/dev`, which are never served.
    System,
    /// Outside every served folder.
    Outside,
}

impl FileResources {
    /// Serve these folders (they are resolved once, now), with nothing denied and the default
    /// size limit.
    pub fn new(roots: impl IntoIterator<Item = PathBuf>) -> Self {
        Self {
            roots: roots.into_iter().map(|r| resolved(&r)).collect(),
            live: None,
            deny: Vec::new(),
            denied_names: Vec::new(),
            max_read_bytes: DEFAULT_MAX_READ_BYTES,
        }
    }

    /// Also serve the folders `source` names at the time of each request.
    pub fn with_live_roots(mut self, source: Arc<dyn RootSource>) -> Self {
        self.live = Some(source);
        self
    }

    /// Never serve these files or folders, nor anything under them, even inside a served
    /// folder. They are resolved at each request, so one created later is denied too.
    pub fn with_denied(mut self, paths: impl IntoIterator<Item = PathBuf>) -> Self {
        self.deny.extend(paths);
        self
    }

    /// Never serve the entries directly inside `dir` whose file names `rule` picks, nor
    /// anything under them, even inside a served folder: for families of files whose names are
    /// only known by pattern (rotated logs, temporary files). Judged like
    /// [`with_denied`](Self::with_denied), on the resolved path at each request.
    pub fn with_denied_names(
        mut self,
        dir: PathBuf,
        rule: impl Fn(&OsStr) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.denied_names.push((dir, Arc::new(rule)));
        self
    }

    /// Refuse to read files larger than this many bytes.
    pub fn with_max_read_bytes(mut self, max: u64) -> Self {
        self.max_read_bytes = max;
        self
    }

    /// The size limit of a read.
    pub fn max_read_bytes(&self) -> u64 {
        self.max_read_bytes
    }

    fn judge(&self, path: &Path) -> Judged {
        let (real, exists) = match std::fs::canonicalize(path) {
            Ok(real) => (real, true),
            Err(_) => (normalise(path), false),
        };
        // The kernel's views of processes, devices and itself are never files to serve, even
        // under a root a session named there (a session at `/proc/self` would serve the host's
        // own environment and memory maps).
        if SYSTEM_TREES.iter().any(|t| real.starts_with(t)) {
            return Judged::System;
        }
        // Denied entries are matched both as written and resolved: a denied folder reached
        // through a link resolves to the resolved form, a missing one only has the other.
        let private = self
            .deny
            .iter()
            .any(|d| real.starts_with(d) || real.starts_with(resolved(d)))
            || self.denied_names.iter().any(|(dir, rule)| {
                [dir.clone(), resolved(dir)].iter().any(|dir| {
                    real.strip_prefix(dir)
                        .ok()
                        .and_then(|rest| rest.components().next())
                        .is_some_and(|first| rule(first.as_os_str()))
                })
            });
        if private {
            return Judged::Private;
        }
        let live = self.live.as_ref().map(|l| l.roots()).unwrap_or_default();
        let inside = self.roots.iter().any(|r| real.starts_with(r))
            || live.iter().any(|r| real.starts_with(resolved(r)));
        match (inside, exists) {
            (false, _) => Judged::Outside,
            (true, true) => Judged::Served(real),
            (true, false) => Judged::Missing,
        }
    }

    /// The path a URI names and what it resolves to, when it may be served.
    fn check(&self, uri: &str) -> Result<(PathBuf, PathBuf), RpcError> {
        let path = path_of(uri)
            .ok_or_else(|| RpcError::invalid_params(format!("{uri} is not a file: URI")))?;
        match self.judge(&path) {
            Judged::Served(real) => Ok((path, real)),
            Judged::Missing => Err(RpcError::new(
                codes::NOT_FOUND,
                format!("{uri} does not exist"),
            )),
            Judged::Private => Err(private(uri)),
            Judged::System => Err(system(uri)),
            Judged::Outside => Err(denied(uri)),
        }
    }

    /// Whether a file with this identity is one of the denied files under another name (a hard
    /// link). Only asked of files with more than one name. The denied folders are walked
    /// without following links; when they hold too many entries to rule it out, the answer is
    /// yes.
    fn is_denied_file(&self, dev: u64, ino: u64) -> bool {
        let mut budget = IDENTITY_WALK_LIMIT;
        let mut starts: Vec<PathBuf> = self.deny.iter().map(|d| resolved(d)).collect();
        for (dir, rule) in &self.denied_names {
            if let Ok(entries) = std::fs::read_dir(resolved(dir)) {
                starts.extend(
                    entries
                        .flatten()
                        .filter(|e| rule(&e.file_name()))
                        .map(|e| e.path()),
                );
            }
        }
        starts
            .iter()
            .any(|start| holds_identity(start, dev, ino, &mut budget))
    }
}

/// Trees never served, whatever the roots.
const SYSTEM_TREES: [&str; 3] = ["/proc", "/sys", "/dev"];

/// Entries of the denied folders looked at, at most, to tell whether a file with several names
/// is one of them.
const IDENTITY_WALK_LIMIT: usize = 50_000;

/// Whether `path` is, or holds below it, a file with this device and inode. Links are not
/// followed (a hard link is a file, and the link's target is judged on its own). Spends
/// `budget`; true once it is spent.
fn holds_identity(path: &Path, dev: u64, ino: u64, budget: &mut usize) -> bool {
    use std::os::unix::fs::MetadataExt;
    if *budget == 0 {
        return true;
    }
    *budget -= 1;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if meta.dev() == dev && meta.ino() == ino {
        return true;
    }
    // A hard link never crosses a file system, so a folder on another one cannot hold it.
    if !meta.is_dir() || meta.dev() != dev {
        return false;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return false;
    };
    entries
        .flatten()
        .any(|e| holds_identity(&e.path(), dev, ino, budget))
}

/// A path with its links resolved when it exists, else tidied as written.
fn resolved(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| normalise(p))
}

fn denied(uri: &str) -> RpcError {
    RpcError::new(
        codes::PERMISSION_DENIED,
        format!("{uri} is outside the folders this host serves"),
    )
}

fn private(uri: &str) -> RpcError {
    RpcError::new(
        codes::PERMISSION_DENIED,
        format!(
            "{uri} is not served: it is in a folder this host keeps private (credentials or the host's own files)"
        ),
    )
}

fn system(uri: &str) -> RpcError {
    RpcError::new(
        codes::PERMISSION_DENIED,
        format!("{uri} is not served: /proc, /sys and /dev are never served"),
    )
}

fn linked_private(uri: &str) -> RpcError {
    RpcError::new(
        codes::PERMISSION_DENIED,
        format!(
            "{uri} is not served: it is another name (a hard link) of a file this host keeps private"
        ),
    )
}

fn too_large(uri: &str, size: u64, max: u64) -> RpcError {
    let mut e = RpcError::invalid_params(format!(
        "{uri} is {} bytes, over the {max}-byte ({}) limit of resourceRead",
        size,
        human(max)
    ));
    e.data = Some(serde_json::json!({"size": size, "maxBytes": max}));
    e
}

/// `8 MiB`, `512 KiB` or `100 bytes`.
fn human(n: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if n >= MIB && n.is_multiple_of(MIB) {
        format!("{} MiB", n / MIB)
    } else if n >= 1024 && n.is_multiple_of(1024) {
        format!("{} KiB", n / 1024)
    } else {
        format!("{n} bytes")
    }
}

/// Why a read did not produce the file's bytes.
enum ReadFailure {
    Io(std::io::Error),
    NotAFile,
    TooLarge(u64),
    /// The file opened is not where the checked path led (a link was swapped in between).
    Moved,
    /// The file is a denied file under another name.
    LinkedPrivate,
}

/// Opens without following a final link and without blocking on a FIFO, refuses anything but a
/// regular file and a file `denied` says is private under another name, and reads at most
/// `max` bytes.
fn read_capped(
    path: &Path,
    max: u64,
    denied: impl Fn(u64, u64) -> bool,
) -> Result<Vec<u8>, ReadFailure> {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(ReadFailure::Io)?;
    let meta = file.metadata().map_err(ReadFailure::Io)?;
    if !meta.is_file() {
        return Err(ReadFailure::NotAFile);
    }
    // Judged on the opened file, so a name swapped meanwhile changes nothing. A file with one
    // name cannot be another's hard link.
    if meta.nlink() > 1 && denied(meta.dev(), meta.ino()) {
        return Err(ReadFailure::LinkedPrivate);
    }
    if meta.len() > max {
        return Err(ReadFailure::TooLarge(meta.len()));
    }
    // Where the open file really is, as the kernel knows it.
    let opened = {
        use std::os::fd::AsRawFd;
        std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .unwrap_or_else(|_| path.to_path_buf())
    };
    if opened != path {
        return Err(ReadFailure::Moved);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(ReadFailure::Io)?;
    if bytes.len() as u64 > max {
        return Err(ReadFailure::TooLarge(bytes.len() as u64));
    }
    Ok(bytes)
}

fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

fn io_error(uri: &str, e: &std::io::Error) -> RpcError {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            RpcError::new(codes::NOT_FOUND, format!("{uri} does not exist"))
        }
        std::io::ErrorKind::PermissionDenied => denied(uri),
        _ => RpcError::internal(format!("{uri} could not be read: {e}")),
    }
}

/// A content type from a file name's extension.
pub(crate) fn content_type(path: &Path) -> Option<String> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    let t = match ext.as_str() {
        "txt" | "log" => "text/plain",
        "md" => "text/markdown",
        "rs" => "text/x-rust",
        "json" => "application/json",
        "toml" => "application/toml",
        "yaml" | "yml" => "application/yaml",
        "html" | "htm" => "text/html",
        "css" => "text/css",
        "js" | "mjs" => "text/javascript",
        "ts" => "text/typescript",
        "py" => "text/x-python",
        "sh" => "text/x-shellscript",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "pdf" => "application/pdf",
        _ => return None,
    };
    Some(t.to_owned())
}

fn kind(meta: &std::fs::Metadata) -> &'static str {
    if meta.file_type().is_symlink() {
        "symlink"
    } else if meta.is_dir() {
        "directory"
    } else {
        "file"
    }
}

#[async_trait]
impl Resources for FileResources {
    async fn read(
        &self,
        uri: &str,
        encoding: Option<ContentEncoding>,
    ) -> Result<ResourceReadResult, RpcError> {
        let (_, path) = self.check(uri)?;
        let max = self.max_read_bytes;
        let read = {
            let path = path.clone();
            let this = self.clone();
            tokio::task::spawn_blocking(move || {
                read_capped(&path, max, |dev, ino| this.is_denied_file(dev, ino))
            })
            .await
            .map_err(|_| RpcError::internal(format!("{uri} could not be read")))?
        };
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(ReadFailure::Io(e)) if e.raw_os_error() == Some(libc::ELOOP) => {
                // The checked path became a link after it was checked.
                return Err(denied(uri));
            }
            Err(ReadFailure::Io(e)) => return Err(io_error(uri, &e)),
            Err(ReadFailure::NotAFile) => {
                return Err(RpcError::invalid_params(format!(
                    "{uri} is not a regular file"
                )));
            }
            Err(ReadFailure::TooLarge(size)) => return Err(too_large(uri, size, max)),
            Err(ReadFailure::Moved) => return Err(denied(uri)),
            Err(ReadFailure::LinkedPrivate) => return Err(linked_private(uri)),
        };
        let content_type = content_type(&path);
        let want_base64 = matches!(encoding, Some(ContentEncoding::Base64));
        Ok(match String::from_utf8(bytes) {
            Ok(text) if !want_base64 => ResourceReadResult {
                data: text,
                encoding: ContentEncoding::Utf8,
                content_type,
            },
            Ok(text) => ResourceReadResult {
                data: base64::engine::general_purpose::STANDARD.encode(text.as_bytes()),
                encoding: ContentEncoding::Base64,
                content_type,
            },
            Err(e) => ResourceReadResult {
                data: base64::engine::general_purpose::STANDARD.encode(e.as_bytes()),
                encoding: ContentEncoding::Base64,
                content_type,
            },
        })
    }

    async fn list(&self, uri: &str) -> Result<ResourceListResult, RpcError> {
        let (_, path) = self.check(uri)?;
        let mut dir = tokio::fs::read_dir(&path)
            .await
            .map_err(|e| io_error(uri, &e))?;
        let mut entries = Vec::new();
        while let Some(entry) = dir.next_entry().await.map_err(|e| io_error(uri, &e))? {
            let Ok(meta) = tokio::fs::symlink_metadata(entry.path()).await else {
                continue;
            };
            entries.push(DirectoryEntry {
                name: entry.file_name().to_string_lossy().into_owned(),
                r#type: kind(&meta).to_owned(),
            });
        }
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(ResourceListResult { entries })
    }

    async fn resolve(
        &self,
        uri: &str,
        follow_symlinks: bool,
    ) -> Result<ResourceResolveResult, RpcError> {
        let (path, real) = self.check(uri)?;
        let (target, meta) = if follow_symlinks {
            let meta = tokio::fs::metadata(&real)
                .await
                .map_err(|e| io_error(uri, &e))?;
            (real, meta)
        } else {
            let meta = tokio::fs::symlink_metadata(&path)
                .await
                .map_err(|e| io_error(uri, &e))?;
            (path, meta)
        };
        let r#type = match kind(&meta) {
            "symlink" => ResourceType::Symlink,
            "directory" => ResourceType::Directory,
            _ => ResourceType::File,
        };
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| jiff::Timestamp::try_from(t).ok())
            .map(|t| format!("{t:.3}"));
        Ok(ResourceResolveResult {
            uri: file_uri(&target),
            size: meta.is_file().then_some(meta.len() as i64),
            content_type: if meta.is_file() {
                content_type(&target)
            } else {
                None
            },
            r#type,
            mtime,
            ctime: None,
            etag: None,
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn serves_inside_and_refuses_outside() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("a.md"), "hello").unwrap();
        std::fs::write(outside.path().join("secret.txt"), "no").unwrap();
        std::fs::create_dir(root.path().join("sub")).unwrap();
        let res = FileResources::new([root.path().to_path_buf()]);
        let a = file_uri(&root.path().join("a.md"));
        let read = res.read(&a, None).await.unwrap();
        assert_eq!(read.data, "hello");
        assert_eq!(read.content_type.as_deref(), Some("text/markdown"));
        let b64 = res.read(&a, Some(ContentEncoding::Base64)).await.unwrap();
        assert_eq!(b64.data, "aGVsbG8=");
        let list = res.list(&file_uri(root.path())).await.unwrap();
        let names: Vec<_> = list
            .entries
            .iter()
            .map(|e| (e.name.as_str(), e.r#type.as_str()))
            .collect();
        assert_eq!(names, vec![("a.md", "file"), ("sub", "directory")]);
        let out = res
            .read(&file_uri(&outside.path().join("secret.txt")), None)
            .await
            .unwrap_err();
        assert_eq!(out.code, codes::PERMISSION_DENIED);
        let escape = format!("{}/../{}", file_uri(root.path()), "x");
        assert_eq!(
            res.read(&escape, None).await.unwrap_err().code,
            codes::PERMISSION_DENIED
        );
        let missing = res
            .read(&file_uri(&root.path().join("nope")), None)
            .await
            .unwrap_err();
        assert_eq!(missing.code, codes::NOT_FOUND);
        let resolved = res.resolve(&a, true).await.unwrap();
        assert_eq!(resolved.size, Some(5));
    }

    struct Fixed(Vec<PathBuf>);

    impl RootSource for Fixed {
        fn roots(&self) -> Vec<PathBuf> {
            self.0.clone()
        }
    }

    #[tokio::test]
    async fn hard_links_to_denied_files_and_the_kernels_trees_are_refused() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        std::fs::create_dir_all(h.join(".ssh/keys")).unwrap();
        std::fs::write(h.join(".ssh/keys/id"), "key").unwrap();
        std::fs::write(h.join("a.txt"), "fine").unwrap();
        std::fs::hard_link(h.join(".ssh/keys/id"), h.join("innocent.txt")).unwrap();
        // A file with two names neither of which is private is served.
        std::fs::hard_link(h.join("a.txt"), h.join("b.txt")).unwrap();
        let names = tempfile::tempdir().unwrap();
        std::fs::write(names.path().join("daemon.log.1"), "log").unwrap();
        std::fs::hard_link(names.path().join("daemon.log.1"), h.join("log.txt")).unwrap();
        let res = FileResources::new([h.to_path_buf(), PathBuf::from("/proc/self")])
            .with_denied([h.join(".ssh")])
            .with_denied_names(names.path().to_path_buf(), |n| {
                n.to_string_lossy().starts_with("daemon.log")
            });
        assert_eq!(
            res.read(&file_uri(&h.join("b.txt")), None)
                .await
                .unwrap()
                .data,
            "fine"
        );
        for p in [h.join("innocent.txt"), h.join("log.txt")] {
            let e = res.read(&file_uri(&p), None).await.unwrap_err();
            assert_eq!(e.code, codes::PERMISSION_DENIED, "{}", p.display());
            assert!(e.message.contains("hard link"), "{}", e.message);
        }
        for p in [
            "/proc/self/environ",
            "/proc/self/maps",
            "/sys/kernel/notes",
            "/dev/null",
        ] {
            let e = res.read(&file_uri(Path::new(p)), None).await.unwrap_err();
            assert_eq!(e.code, codes::PERMISSION_DENIED, "{p}");
            assert!(e.message.contains("never served"), "{}", e.message);
        }
    }

    #[tokio::test]
    async fn denied_folders_stay_private_whatever_links_point_there() {
        let home = tempfile::tempdir().unwrap();
        let h = home.path();
        std::fs::create_dir(h.join(".ssh")).unwrap();
        std::fs::write(h.join(".ssh/id"), "key").unwrap();
        std::fs::write(h.join("notes.txt"), "fine").unwrap();
        std::os::unix::fs::symlink(h.join(".ssh/id"), h.join("id-link")).unwrap();
        std::os::unix::fs::symlink(h.join(".ssh"), h.join("dir-link")).unwrap();
        let res =
            FileResources::new([h.to_path_buf()]).with_denied([h.join(".ssh"), h.join(".aws")]);
        assert_eq!(
            res.read(&file_uri(&h.join("notes.txt")), None)
                .await
                .unwrap()
                .data,
            "fine"
        );
        for p in [
            h.join(".ssh/id"),
            h.join("id-link"),
            h.join("dir-link/id"),
            h.join(".ssh"),
        ] {
            let e = res.read(&file_uri(&p), None).await.unwrap_err();
            assert_eq!(e.code, codes::PERMISSION_DENIED, "{}", p.display());
            assert!(e.message.contains("private"), "{}", e.message);
        }
        assert_eq!(
            res.list(&file_uri(&h.join("dir-link")))
                .await
                .unwrap_err()
                .code,
            codes::PERMISSION_DENIED
        );
        assert_eq!(
            res.resolve(&file_uri(&h.join("id-link")), false)
                .await
                .unwrap_err()
                .code,
            codes::PERMISSION_DENIED
        );
        // A denied folder made after the start is denied too.
        std::fs::create_dir(h.join(".aws")).unwrap();
        std::fs::write(h.join(".aws/credentials"), "k").unwrap();
        let e = res
            .read(&file_uri(&h.join(".aws/credentials")), None)
            .await
            .unwrap_err();
        assert_eq!(e.code, codes::PERMISSION_DENIED);
    }

    #[tokio::test]
    async fn reads_are_capped_and_only_of_regular_files() {
        let root = tempfile::tempdir().unwrap();
        let big = root.path().join("big.bin");
        std::fs::File::create(&big).unwrap().set_len(1025).unwrap();
        std::fs::write(root.path().join("small.txt"), "x".repeat(1024)).unwrap();
        let res = FileResources::new([root.path().to_path_buf()]).with_max_read_bytes(1024);
        let e = res.read(&file_uri(&big), None).await.unwrap_err();
        assert_eq!(e.code, codes::INVALID_PARAMS);
        assert!(e.message.contains("1 KiB"), "{}", e.message);
        assert!(
            res.read(&file_uri(&root.path().join("small.txt")), None)
                .await
                .is_ok()
        );
        let fifo = root.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let e = res.read(&file_uri(&fifo), None).await.unwrap_err();
            assert!(e.message.contains("not a regular file"), "{}", e.message);
        }
    }

    #[tokio::test]
    async fn live_roots_are_asked_at_each_request() {
        let served = tempfile::tempdir().unwrap();
        let session = tempfile::tempdir().unwrap();
        std::fs::write(session.path().join("a.txt"), "a").unwrap();
        let uri = file_uri(&session.path().join("a.txt"));
        let alone = FileResources::new([served.path().to_path_buf()]);
        assert_eq!(
            alone.read(&uri, None).await.unwrap_err().code,
            codes::PERMISSION_DENIED
        );
        let with = alone.with_live_roots(Arc::new(Fixed(vec![session.path().to_path_buf()])));
        assert_eq!(with.read(&uri, None).await.unwrap().data, "a");
    }
}
