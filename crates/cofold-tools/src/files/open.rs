//! The checked open (S7–S10): the descriptor a write goes through is the file that was checked.
//!
//! `real` holds no links by construction, so the open refuses to follow any link in any
//! component: if one appears, the path changed between the check and the open. New files are
//! created exclusively inside a parent folder opened the same way, so nothing planted at the name
//! (a file, a link, even a dangling one) is ever followed or overwritten.

use std::fs::File;
use std::io;
use std::path::Path;

use super::BeforeOpen;

/// What the checked open gives back.
pub(crate) enum Opened {
    /// An existing regular file, opened for reading and writing.
    Existing(File),
    /// A file this call created, opened for writing.
    Created(File),
}

/// Why the checked open refused.
#[derive(Debug)]
pub(crate) enum OpenRefusal {
    /// Nothing at the path and creation was not allowed.
    Missing,
    /// A folder is there.
    Folder,
    /// A FIFO, socket, device or other non-regular file is there.
    NotRegular,
    /// The path changed between the check and the open.
    Changed,
    /// Any other operating-system error.
    Io(io::Error),
}

/// Opens `real` for writing under the rules of S7 (existing file) and S8 (new file).
pub(crate) fn checked_open(
    real: &Path,
    create: bool,
    before_open: Option<&BeforeOpen>,
) -> Result<Opened, OpenRefusal> {
    match std::fs::metadata(real) {
        Ok(meta) => {
            if meta.is_dir() {
                return Err(OpenRefusal::Folder);
            }
            if !meta.is_file() {
                return Err(OpenRefusal::NotRegular);
            }
            if let Some(hook) = before_open {
                hook(real);
            }
            let file = imp::open_existing(real).map_err(changed_or_io)?;
            let now = file.metadata().map_err(OpenRefusal::Io)?;
            if !imp::same_file(&meta, &now) {
                return Err(OpenRefusal::Changed);
            }
            Ok(Opened::Existing(file))
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            if !create {
                return Err(OpenRefusal::Missing);
            }
            let (Some(parent), Some(name)) = (real.parent(), real.file_name()) else {
                return Err(OpenRefusal::Changed);
            };
            std::fs::create_dir_all(parent).map_err(changed_or_io)?;
            if let Some(hook) = before_open {
                hook(real);
            }
            imp::create_new(parent, Path::new(name))
                .map(Opened::Created)
                .map_err(changed_or_io)
        }
        Err(error) => Err(OpenRefusal::Io(error)),
    }
}

/// Opens `real` read-only for a preview of a write: `None` when nothing is there, the checked
/// open's refusals for a folder or a file that is not regular. Never creates anything, and a
/// FIFO swapped in after the check cannot hang it.
pub(crate) fn open_for_preview(real: &Path) -> Result<Option<File>, OpenRefusal> {
    match std::fs::metadata(real) {
        Ok(meta) if meta.is_dir() => Err(OpenRefusal::Folder),
        Ok(meta) if !meta.is_file() => Err(OpenRefusal::NotRegular),
        Ok(_) => {
            let file = imp::open_reading(real).map_err(OpenRefusal::Io)?;
            let meta = file.metadata().map_err(OpenRefusal::Io)?;
            if meta.is_file() {
                Ok(Some(file))
            } else {
                Err(OpenRefusal::NotRegular)
            }
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(OpenRefusal::Io(error)),
    }
}

/// The errors that mean "the path is no longer what was checked".
fn changed_or_io(error: io::Error) -> OpenRefusal {
    if is_path_change(&error) {
        OpenRefusal::Changed
    } else {
        OpenRefusal::Io(error)
    }
}

fn is_path_change(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::AlreadyExists | io::ErrorKind::NotADirectory
    ) || imp::is_loop(error)
}

#[cfg(unix)]
mod imp {
    use std::fs::{File, Metadata};
    use std::io;
    use std::os::fd::OwnedFd;
    use std::os::unix::fs::MetadataExt;
    use std::path::{Component, Path};

    use rustix::fs::{Mode, OFlags};

    pub(super) fn same_file(a: &Metadata, b: &Metadata) -> bool {
        a.dev() == b.dev() && a.ino() == b.ino()
    }

    pub(super) fn is_loop(error: &io::Error) -> bool {
        error.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error())
    }

    pub(super) fn open_existing(real: &Path) -> io::Result<File> {
        let flags = OFlags::RDWR | OFlags::CLOEXEC | OFlags::NOCTTY;
        open_without_links(real, flags).map(File::from)
    }

    pub(super) fn open_reading(real: &Path) -> io::Result<File> {
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY;
        Ok(File::from(rustix::fs::open(real, flags, Mode::empty())?))
    }

    pub(super) fn create_new(parent: &Path, name: &Path) -> io::Result<File> {
        let dir = open_without_links(parent, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC)?;
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(&dir, name, flags, Mode::from_bits_truncate(0o666))?;
        Ok(File::from(fd))
    }

    /// Opens an absolute path, refusing any link in any component.
    fn open_without_links(path: &Path, flags: OFlags) -> io::Result<OwnedFd> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            use rustix::fs::{CWD, ResolveFlags};
            match rustix::fs::openat2(
                CWD,
                path,
                flags,
                Mode::empty(),
                ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            ) {
                Ok(fd) => return Ok(fd),
                // Older kernels and some sandboxes lack openat2: walk the names instead.
                Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {}
                Err(errno) => return Err(errno.into()),
            }
        }
        walk_without_links(path, flags)
    }

    /// The portable form: each folder opened with `O_NOFOLLOW | O_DIRECTORY` from the one before.
    fn walk_without_links(path: &Path, flags: OFlags) -> io::Result<OwnedFd> {
        let names: Vec<&std::ffi::OsStr> = path
            .components()
            .filter_map(|c| match c {
                Component::Normal(name) => Some(name),
                _ => None,
            })
            .collect();
        let folder = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut dir = rustix::fs::open("/", folder, Mode::empty())?;
        let Some((last, folders)) = names.split_last() else {
            return Ok(dir);
        };
        for name in folders {
            dir = rustix::fs::openat(&dir, *name, folder, Mode::empty())?;
        }
        Ok(rustix::fs::openat(
            &dir,
            *last,
            flags | OFlags::NOFOLLOW,
            Mode::empty(),
        )?)
    }
}

#[cfg(not(unix))]
mod imp {
    //! Windows (S10): open normally and compare identities; new files use `create_new`.
    use std::fs::{File, Metadata, OpenOptions};
    use std::io;
    use std::path::Path;

    pub(super) fn same_file(a: &Metadata, b: &Metadata) -> bool {
        // Without a stable file-ID accessor, compare what std exposes about the file.
        a.len() == b.len() && a.modified().ok() == b.modified().ok() && a.is_file() == b.is_file()
    }

    pub(super) fn is_loop(_error: &io::Error) -> bool {
        false
    }

    pub(super) fn open_existing(real: &Path) -> io::Result<File> {
        OpenOptions::new().read(true).write(true).open(real)
    }

    pub(super) fn open_reading(real: &Path) -> io::Result<File> {
        File::open(real)
    }

    pub(super) fn create_new(parent: &Path, name: &Path) -> io::Result<File> {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(parent.join(name))
    }
}
