//! [`FileResources`]: read-only `file:` resources inside the host's folders.

use std::path::{Component, Path, PathBuf};

use ahp_types::commands::{
    ContentEncoding, DirectoryEntry, ResourceListResult, ResourceReadResult, ResourceResolveResult,
    ResourceType,
};
use async_trait::async_trait;
use base64::Engine as _;

use crate::error::{RpcError, codes};
use crate::ports::Resources;
use crate::util::{file_uri, path_of};

/// Serves `file:` URIs inside the given folders only: `-32009` outside them, `-32008` when
/// missing.
#[derive(Debug, Clone)]
pub struct FileResources {
    roots: Vec<PathBuf>,
}

impl FileResources {
    /// Serve these folders (they are resolved once, now).
    pub fn new(roots: impl IntoIterator<Item = PathBuf>) -> Self {
        Self {
            roots: roots
                .into_iter()
                .map(|r| std::fs::canonicalize(&r).unwrap_or(r))
                .collect(),
        }
    }

    fn inside(&self, p: &Path) -> bool {
        self.roots.iter().any(|r| p.starts_with(r))
    }

    /// The path a URI names, checked against the roots (following symlinks when it exists).
    fn check(&self, uri: &str) -> Result<PathBuf, RpcError> {
        let path = path_of(uri)
            .ok_or_else(|| RpcError::invalid_params(format!("{uri} is not a file: URI")))?;
        match std::fs::canonicalize(&path) {
            Ok(real) if self.inside(&real) => Ok(path),
            Ok(_) => Err(denied(uri)),
            Err(_) => {
                let lexical = normalise(&path);
                if self.inside(&lexical) {
                    Err(RpcError::new(
                        codes::NOT_FOUND,
                        format!("{uri} does not exist"),
                    ))
                } else {
                    Err(denied(uri))
                }
            }
        }
    }
}

fn denied(uri: &str) -> RpcError {
    RpcError::new(
        codes::PERMISSION_DENIED,
        format!("{uri} is outside the folders this host serves"),
    )
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
        let path = self.check(uri)?;
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|e| io_error(uri, &e))?;
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
        let path = self.check(uri)?;
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
        let path = self.check(uri)?;
        let (target, meta) = if follow_symlinks {
            let real = tokio::fs::canonicalize(&path)
                .await
                .map_err(|e| io_error(uri, &e))?;
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
}
