//! What recording costs, in one run, each figure beside its baseline:
//!
//! 1. **A tool edit's checkpoint**: `capture` + the write + `record_write` against the bare
//!    write, for a 4 KiB file and a 1 MiB one (goal: at most 1 ms plus the copy of the earlier
//!    content).
//! 2. **The comparison around a command**: `index_before` + `record_command` (two walks of the
//!    folder, one file changed) against `git status --porcelain` on the same committed tree, both
//!    warm (goal: ratio at most 1.0).
//!
//! The tree: `COFOLD_BENCH_TREE=<folder>` names one (the Linux 6.1 source, unpacked, is the
//! reference: `tar xJf /usr/src/linux-source-6.1.tar.xz`); without it a tree of
//! `COFOLD_BENCH_FILES` files (default 78 000, the Linux tree's count) of 1–8 KiB in nested
//! folders is generated once under `target/bench-tree-<count>` and reused. The tree is made a
//! git repository with everything committed, so `git status` has its index to compare against.
//!
//! Run: `cargo bench -p cofold-changes --bench checkpoints`. Each side gets a warm-up and 5
//! interleaved runs; medians are printed.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cofold_changes::{Bounds, Journal};

const RUNS: usize = 5;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn edit_checkpoint(dir: &Path, size: usize) {
    let path = dir.join(format!("edit-{size}.txt"));
    let body: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
    std::fs::write(&path, &body).expect("seed");
    let mut journal =
        Journal::open(&dir.join(format!("journal-{size}")), Bounds::default()).expect("a journal");
    let (mut bare, mut recorded) = (Vec::new(), Vec::new());
    for run in 0..=RUNS * 4 {
        let mut next = body.clone();
        next[run % size] = b'#';
        next[(run * 7) % size] = b'0' + (run % 10) as u8;
        let start = Instant::now();
        std::fs::write(&path, &next).expect("write");
        let plain = start.elapsed();
        next[(run * 13) % size] = b'!';
        let start = Instant::now();
        let before = journal.capture(&path).expect("capture");
        std::fs::write(&path, &next).expect("write");
        journal
            .record_write(&format!("t{run}"), &path, before, "edit_file")
            .expect("record");
        let with = start.elapsed();
        if run > 0 {
            bare.push(plain);
            recorded.push(with);
        }
    }
    let (bare, recorded) = (median(bare), median(recorded));
    println!(
        "edit checkpoint, {size} bytes: bare write {bare:?}, with checkpoint {recorded:?}, \
         checkpoint cost {:?} (ratio {:.2})",
        recorded.saturating_sub(bare),
        recorded.as_secs_f64() / bare.as_secs_f64().max(1e-9)
    );
}

fn tree(files: usize) -> PathBuf {
    if let Some(t) = std::env::var_os("COFOLD_BENCH_TREE") {
        let t = PathBuf::from(t);
        println!("tree: {} (given)", t.display());
        return t;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target")
        .join(format!("bench-tree-{files}"));
    let done = root.join(".generated");
    if !done.exists() {
        let _ = std::fs::remove_dir_all(&root);
        for i in 0..files {
            let dir = root.join(format!("d{:02}/e{:03}", i % 40, (i / 40) % 50));
            std::fs::create_dir_all(&dir).expect("folder");
            let size = 1024 + (i * 7919) % 7168;
            let body: Vec<u8> = (0..size).map(|j| b'a' + ((i + j) % 26) as u8).collect();
            std::fs::write(dir.join(format!("f{i}.c")), body).expect("file");
        }
        std::fs::write(root.join(".gitignore"), "*.o\n").expect("ignore");
        let git = |args: &[&str]| {
            let ok = Command::new("git")
                .args(args)
                .current_dir(&root)
                .env("GIT_AUTHOR_NAME", "bench")
                .env("GIT_AUTHOR_EMAIL", "bench@invalid")
                .env("GIT_COMMITTER_NAME", "bench")
                .env("GIT_COMMITTER_EMAIL", "bench@invalid")
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            assert!(ok, "git {args:?} failed in {}", root.display());
        };
        git(&["init", "-q"]);
        git(&["add", "-A"]);
        git(&["commit", "-q", "-m", "tree"]);
        std::fs::write(&done, "").expect("mark");
    }
    println!(
        "tree: {files} generated files in {} (the Linux 6.1 source is not on this machine)",
        root.display()
    );
    root
}

fn command_comparison(root: &Path, scratch: &Path) {
    let mut journal =
        Journal::open(&scratch.join("journal-cmd"), Bounds::default()).expect("a journal");
    let touched = root.join("bench-touched.txt");
    let git_status = || {
        let out = Command::new("git")
            .args(["status", "--porcelain"])
            .current_dir(root)
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git status failed");
        out.stdout.len()
    };
    // Warm both: the page cache, git's index, the walker.
    git_status();
    let index = journal.index_before(root);
    println!("indexed files: {}", index.files.len());
    journal
        .record_command("warm", index, "command")
        .expect("compares");
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for run in 0..RUNS {
        let start = Instant::now();
        let index = journal.index_before(root);
        std::fs::write(&touched, format!("run {run}")).expect("write");
        let found = journal
            .record_command(&format!("r{run}"), index, "command")
            .expect("compares");
        ours.push(start.elapsed());
        assert_eq!(found, 1, "the one changed file is found");
        let start = Instant::now();
        git_status();
        theirs.push(start.elapsed());
    }
    let _ = std::fs::remove_file(&touched);
    let (ours, theirs) = (median(ours), median(theirs));
    println!(
        "after-command comparison (two walks): {ours:?}; git status --porcelain: {theirs:?}; \
         ratio {:.2} (goal <= 1.0)",
        ours.as_secs_f64() / theirs.as_secs_f64().max(1e-9)
    );
}

fn main() {
    let scratch = tempfile::tempdir().expect("a temporary folder");
    edit_checkpoint(scratch.path(), 4 * 1024);
    edit_checkpoint(scratch.path(), 1024 * 1024);
    let files = std::env::var("COFOLD_BENCH_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(78_000);
    let root = tree(files);
    command_comparison(&root, scratch.path());
}
