//! Root filesystems for container images made on the spot, so tests with a real engine need no
//! registry: the static busybox of Debian's `busybox-static` with applet links, plus (for the
//! glibc image) the loader and libraries a given binary links, copied from this host at their
//! paths. The caller imports the tar through the engine's API.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// Applets linked under `/bin`.
const APPLETS: &[&str] = &[
    "sh", "sleep", "hostname", "id", "cat", "ls", "kill", "echo", "env", "mkdir", "rm", "cp", "mv",
    "touch", "head", "tail", "grep", "sed", "wc", "ps", "find", "true", "false", "pwd", "test",
    "uname", "stat", "chmod", "readlink", "printf",
];

/// A root filesystem as a tar, with a tag made of the first 8 hex of its sha256.
pub struct RootFs {
    /// The tar.
    pub tar: Vec<u8>,
    /// 8 hex characters naming its content.
    pub tag: String,
}

/// Finds a static busybox: `$AHPD_TEST_BUSYBOX`, else one unpacked under `cache` before, else
/// Debian's `busybox-static` fetched with `apt-get download` and unpacked there.
pub fn busybox(cache: &Path) -> io::Result<PathBuf> {
    if let Some(p) = std::env::var_os("AHPD_TEST_BUSYBOX") {
        return Ok(PathBuf::from(p));
    }
    let unpacked = cache.join("busybox-static");
    let bin = unpacked.join("bin").join("busybox");
    if bin.is_file() {
        return Ok(bin);
    }
    std::fs::create_dir_all(&unpacked)?;
    let fetched = Command::new("apt-get")
        .args(["download", "busybox-static"])
        .current_dir(cache)
        .output()?;
    if !fetched.status.success() {
        return Err(io::Error::other(format!(
            "apt-get download busybox-static failed: {}",
            String::from_utf8_lossy(&fetched.stderr)
        )));
    }
    let deb = std::fs::read_dir(cache)?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("busybox-static"))
                && p.extension().is_some_and(|e| e == "deb")
        })
        .ok_or_else(|| io::Error::other("apt-get download left no busybox-static package"))?;
    let status = Command::new("dpkg")
        .arg("-x")
        .arg(&deb)
        .arg(&unpacked)
        .status()?;
    if !status.success() || !bin.is_file() {
        return Err(io::Error::other(
            "dpkg -x of busybox-static gave no bin/busybox",
        ));
    }
    Ok(bin)
}

/// The files `ldd` lists for a binary: its libraries and its loader.
pub fn linked(binary: &Path) -> io::Result<Vec<PathBuf>> {
    let out = Command::new("ldd").arg(binary).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut files = Vec::new();
    for line in text.lines() {
        let path = match line.split_once("=>") {
            Some((_, right)) => right.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        if let Some(p) = path.filter(|p| p.starts_with('/')) {
            files.push(PathBuf::from(p));
        }
    }
    Ok(files)
}

struct Tar(tar::Builder<Vec<u8>>);

impl Tar {
    fn new() -> Self {
        Tar(tar::Builder::new(Vec::new()))
    }

    fn header(kind: tar::EntryType, mode: u32, owner: u64, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_uid(owner);
        h.set_gid(owner);
        h.set_size(size);
        h.set_mtime(0);
        h
    }

    fn dir(&mut self, path: &str, mode: u32, owner: u64) -> io::Result<()> {
        let mut h = Self::header(tar::EntryType::Directory, mode, owner, 0);
        self.0.append_data(&mut h, path, io::empty())
    }

    fn file(&mut self, path: &str, data: &[u8], mode: u32) -> io::Result<()> {
        let mut h = Self::header(tar::EntryType::Regular, mode, 0, data.len() as u64);
        self.0.append_data(&mut h, path, data)
    }

    fn link(&mut self, path: &str, target: &str) -> io::Result<()> {
        let mut h = Self::header(tar::EntryType::Symlink, 0o777, 0, 0);
        self.0.append_link(&mut h, path, target)
    }

    fn finish(self) -> io::Result<RootFs> {
        let tar = self.0.into_inner()?;
        let hash = Sha256::digest(&tar);
        let tag = hash.iter().take(4).map(|b| format!("{b:02x}")).collect();
        Ok(RootFs { tar, tag })
    }
}

/// A file every test image holds and no host does, to prove a command ran inside.
pub const MARKER: &str = "/etc/ahpd-test-image";
/// What [`MARKER`] says.
pub const MARKER_TEXT: &str = "made by testkit::images for ahpd's machine tests\n";

fn base(busybox: &Path) -> io::Result<Tar> {
    let mut t = Tar::new();
    for d in [
        "bin", "etc", "lib", "lib64", "usr", "usr/bin", "root", "home", "proc", "sys", "dev",
    ] {
        t.dir(d, if d == "root" { 0o700 } else { 0o755 }, 0)?;
    }
    t.dir("tmp", 0o1777, 0)?;
    t.dir("home/agent", 0o755, 1000)?;
    t.file("bin/busybox", &std::fs::read(busybox)?, 0o755)?;
    for a in APPLETS {
        t.link(&format!("bin/{a}"), "busybox")?;
    }
    t.file(
        "etc/passwd",
        b"root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/home/agent:/bin/sh\n",
        0o644,
    )?;
    t.file("etc/group", b"root:x:0:\nagent:x:1000:\n", 0o644)?;
    t.file(
        MARKER.trim_start_matches('/'),
        MARKER_TEXT.as_bytes(),
        0o644,
    )?;
    Ok(t)
}

/// Busybox with the libraries and loader `binary` needs, copied at their paths.
pub fn glibc_rootfs(busybox: &Path, binary: &Path) -> io::Result<RootFs> {
    let mut t = base(busybox)?;
    let mut dirs = std::collections::BTreeSet::new();
    for f in linked(binary)? {
        let rel = f.to_string_lossy().trim_start_matches('/').to_owned();
        let mut parent = Path::new(&rel).parent();
        let mut chain = Vec::new();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            chain.push(p.to_string_lossy().into_owned());
            parent = p.parent();
        }
        for d in chain.into_iter().rev() {
            if dirs.insert(d.clone()) && !["lib", "lib64", "usr"].contains(&d.as_str()) {
                t.dir(&d, 0o755, 0)?;
            }
        }
        // Links are followed: the image holds each library's bytes at the listed path.
        t.file(&rel, &std::fs::read(&f)?, 0o755)?;
    }
    t.finish()
}

/// Busybox alone: no loader, so a glibc program cannot start.
pub fn noglibc_rootfs(busybox: &Path) -> io::Result<RootFs> {
    base(busybox)?.finish()
}
