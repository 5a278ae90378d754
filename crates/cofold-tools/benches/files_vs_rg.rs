//! search_files and list_files against ripgrep on one large tree.
//!
//! Run: `cargo bench -p cofold-tools --bench files_vs_rg`.
//!
//! The tree:
//! - by default a deterministic tree is generated in a temporary folder: `COFOLD_BENCH_FILES`
//!   text files (default 50 000) of 1–16 KiB in nested folders, 1 % binary files, a few files
//!   over 2 MiB, a `node_modules` and a `.git` folder;
//! - or `COFOLD_BENCH_TREE=<folder>` names an existing tree. ripgrep's own corpus is the Linux
//!   source: `apt-get install linux-source-6.1` puts a tarball under `/usr/src`; unpack it into a
//!   temporary folder (`tar xJf /usr/src/linux-source-6.1.tar.xz -C /tmp/tree`) and point the
//!   variable at the unpacked folder. `COFOLD_BENCH_LITERAL` and `COFOLD_BENCH_REGEX` change the
//!   two patterns (defaults suit the Linux tree; the generated tree plants its own).
//!
//! ripgrep comes from the distribution (`apt-get install ripgrep`). Without `rg` on the `PATH`,
//! or with a `COFOLD_BENCH_TREE` that does not exist, the ratios are skipped with a note.
//! `COFOLD_BENCH_ENFORCE=1` makes a ratio over 1.1 exit non-zero.
//!
//! The deep-page figure (P3) is the peak of the resident set over one read_file call, measured
//! through `/proc/self/clear_refs` and `VmHWM` (Linux), which needs no unsafe allocator hook.
//!
//! Each side gets one warm-up and then 5 interleaved runs; the ratio of medians is printed.
//! ripgrep's output is read through a pipe and discarded (it stops early when writing to
//! `/dev/null`). Before timing, both sides are checked to report the same set of matching lines
//! (or files).

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cofold_agents::capability::{Capability, CapabilityArgs};
use cofold_agents::store::MemoryStore;
use cofold_agents::tool::{AbortSignal, KvScopes, Resources, Tool, ToolContext};
use cofold_tools::files::{FilesOptions, ReadRecord, files};
use serde_json::{Value, json};

const RUNS: usize = 5;

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let scratch = tempfile::tempdir().expect("a temporary folder");

    deep_page(&runtime, scratch.path());
    write_and_edit(&runtime, scratch.path());

    let (root, literal, regex) = match std::env::var_os("COFOLD_BENCH_TREE") {
        Some(tree) => {
            let tree = PathBuf::from(tree);
            if !tree.is_dir() {
                println!(
                    "skipped: COFOLD_BENCH_TREE={} is not a folder; unpack a tree there (see the \
                     top of benches/files_vs_rg.rs)",
                    tree.display()
                );
                return;
            }
            let literal = env_or("COFOLD_BENCH_LITERAL", r"if \(!");
            let regex = env_or("COFOLD_BENCH_REGEX", r"spin_lock_irq\w*\(&");
            (tree, literal, regex)
        }
        None => {
            let count = std::env::var("COFOLD_BENCH_FILES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(50_000);
            let root = scratch.path().join("tree");
            let started = Instant::now();
            let bytes = generate(&root, count);
            println!(
                "generated tree: {count} text files, {:.0} MB, in {:.1} s",
                bytes as f64 / 1e6,
                started.elapsed().as_secs_f64()
            );
            (
                root,
                "cofoldneedle".to_owned(),
                r"needle_[a-z]+ \d".to_owned(),
            )
        }
    };
    let root = std::fs::canonicalize(&root).expect("a canonical tree path");
    println!("tree: {}", root.display());

    if Command::new("rg").arg("--version").output().is_err() {
        println!("skipped: rg is not installed (apt-get install ripgrep); no ratios printed");
        return;
    }
    let tools = runtime.block_on(tools_for(&root, FilesOptions::default()));
    let mut worst: f64 = 0.0;
    for (pattern, ignore_case) in [(literal.as_str(), false), (regex.as_str(), true)] {
        let ratio = compare_search(&runtime, &tools, &root, pattern, ignore_case);
        worst = worst.max(ratio);
    }
    worst = worst.max(compare_list(&runtime, &tools, &root));
    if std::env::var_os("COFOLD_BENCH_ENFORCE").is_some() && worst > 1.1 {
        eprintln!("a ratio is over 1.1: {worst:.2}");
        std::process::exit(1);
    }
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// A deterministic pseudo-random sequence (xorshift), so every run builds the same tree.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: [&str; 16] = [
    "alpha", "buffer", "const", "delta", "error", "future", "handle", "index", "jump", "kernel",
    "length", "module", "number", "option", "parse", "result",
];

/// Writes the generated tree; returns the bytes of text written.
fn generate(root: &Path, count: usize) -> u64 {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut total = 0u64;
    let mut line = String::new();
    for i in 0..count {
        let dir = root.join(format!(
            "d{:02}/e{:02}/f{:02}",
            i % 23,
            (i / 23) % 17,
            (i / 391) % 11
        ));
        std::fs::create_dir_all(&dir).expect("folders");
        let size = 1024 + rng.below(15 * 1024) as usize;
        let mut text = String::with_capacity(size + 128);
        while text.len() < size {
            line.clear();
            for _ in 0..(4 + rng.below(10)) {
                line.push_str(WORDS[rng.below(16) as usize]);
                line.push(' ');
            }
            match rng.below(100) {
                0 => line.push_str("cofoldneedle found"),
                1 => line.push_str(&format!("Needle_x {}", rng.below(10))),
                _ => line.push_str("end"),
            }
            text.push_str(&line);
            text.push('\n');
        }
        total += text.len() as u64;
        std::fs::write(dir.join(format!("file{i}.txt")), &text).expect("write");
        if i % 100 == 0 {
            let mut binary = text.clone().into_bytes();
            binary[10] = 0;
            std::fs::write(dir.join(format!("blob{i}.bin")), binary).expect("write");
        }
    }
    let big = "cofoldneedle in a big file\n".repeat(3 * 1024 * 1024 / 27);
    for name in ["big1.log", "d01/big2.log", "d02/big3.log"] {
        std::fs::write(root.join(name), &big).expect("write");
    }
    for dir in ["node_modules/pkg", ".git/objects"] {
        std::fs::create_dir_all(root.join(dir)).expect("folders");
        std::fs::write(root.join(dir).join("x.txt"), "cofoldneedle hidden\n").expect("write");
    }
    total
}

async fn tools_for(workspace: &Path, options: FilesOptions) -> Vec<Tool> {
    let args = CapabilityArgs {
        agent_id: "bench".into(),
        session_id: "bench".into(),
        run_id: "run".into(),
        workspace: Some(workspace.to_string_lossy().into_owned()),
        kv: KvScopes::new(Arc::new(MemoryStore::new()), "bench", "bench", None),
        signal: AbortSignal::never(),
    };
    files(options).tools(&args).await.expect("the files tools")
}

fn call(runtime: &tokio::runtime::Runtime, tools: &[Tool], name: &str, input: Value) -> String {
    let tool = tools.iter().find(|t| t.name() == name).expect("the tool");
    let ctx = ToolContext {
        agent_id: "bench".into(),
        session_id: "bench".into(),
        run_id: "run".into(),
        call_id: "call".into(),
        invocation_id: "inv".into(),
        workspace: None,
        signal: AbortSignal::never(),
        kv: KvScopes::new(Arc::new(MemoryStore::new()), "bench", "bench", None),
        resources: Resources::new(),
    };
    match runtime.block_on(tool.execute(input, ctx)) {
        Ok(output) => output.content,
        Err(error) => format!("refused: {error}"),
    }
}

/// Runs `rg` with `args`, reading its output through a pipe; returns the bytes it printed.
fn rg(args: &[&str]) -> Vec<u8> {
    let mut child = Command::new("rg")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("rg starts");
    let mut out = Vec::new();
    if let Some(mut stdout) = child.stdout.take() {
        stdout.read_to_end(&mut out).expect("rg output");
    }
    let _ = child.wait();
    out
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// One warm-up each, then interleaved runs; returns the two medians.
fn interleaved(mut ours: impl FnMut(), mut theirs: impl FnMut()) -> (Duration, Duration) {
    ours();
    theirs();
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let started = Instant::now();
        ours();
        a.push(started.elapsed());
        let started = Instant::now();
        theirs();
        b.push(started.elapsed());
    }
    (median(a), median(b))
}

fn compare_search(
    runtime: &tokio::runtime::Runtime,
    tools: &[Tool],
    root: &Path,
    pattern: &str,
    ignore_case: bool,
) -> f64 {
    let root_text = root.to_string_lossy().into_owned();
    let mut args = vec!["-n", "--glob", "!node_modules", "--max-filesize", "2M"];
    if ignore_case {
        args.push("-i");
    }
    args.extend(["-e", pattern, root_text.as_str()]);

    // The same set of matching lines, checked once with no row limit.
    let all = call(
        runtime,
        tools,
        "search_files",
        json!({"pattern": pattern, "ignoreCase": ignore_case, "limit": 1_000_000_000u64}),
    );
    let ours: BTreeSet<(String, u64)> = all.lines().filter_map(row_key).collect();
    let prefix = format!("{root_text}/");
    let theirs: BTreeSet<(String, u64)> = String::from_utf8_lossy(&rg(&args))
        .lines()
        .filter_map(|l| row_key(l.strip_prefix(&prefix).unwrap_or(l)))
        .collect();
    report_sets("search_files", &ours, &theirs);

    let input = json!({"pattern": pattern, "ignoreCase": ignore_case});
    let (a, b) = interleaved(
        || {
            call(runtime, tools, "search_files", input.clone());
        },
        || {
            rg(&args);
        },
    );
    let ratio = a.as_secs_f64() / b.as_secs_f64();
    println!(
        "search_files /{pattern}/{}: {:.1} ms, rg -n: {:.1} ms; search_files / rg: {ratio:.2}",
        if ignore_case { "i" } else { "" },
        a.as_secs_f64() * 1e3,
        b.as_secs_f64() * 1e3,
    );
    ratio
}

/// `path:line:text` to `(path, line)`.
fn row_key(row: &str) -> Option<(String, u64)> {
    let mut parts = row.splitn(3, ':');
    let path = parts.next()?;
    let line = parts.next()?.parse().ok()?;
    Some((path.to_owned(), line))
}

fn report_sets<T: Ord + std::fmt::Debug>(what: &str, ours: &BTreeSet<T>, theirs: &BTreeSet<T>) {
    let only_ours = ours.difference(theirs).count();
    let only_theirs = theirs.difference(ours).count();
    if only_ours == 0 && only_theirs == 0 {
        println!("{what}: same set as rg ({} entries)", ours.len());
    } else {
        println!(
            "{what}: sets differ: {} ours, {} rg's, {only_ours} only ours, {only_theirs} only rg's; \
             e.g. {:?} / {:?}",
            ours.len(),
            theirs.len(),
            ours.difference(theirs).next(),
            theirs.difference(ours).next()
        );
    }
}

fn compare_list(runtime: &tokio::runtime::Runtime, tools: &[Tool], root: &Path) -> f64 {
    let root_text = root.to_string_lossy().into_owned();
    let args = ["--glob", "!node_modules", "--files", root_text.as_str()];
    let prefix = format!("{root_text}/");
    let theirs: BTreeSet<String> = String::from_utf8_lossy(&rg(&args))
        .lines()
        .map(|l| l.strip_prefix(&prefix).unwrap_or(l).to_owned())
        .collect();
    let ours: BTreeSet<String> = cofold_tools::walk::matching_entries(root, "**/*")
        .expect("the glob compiles")
        .into_iter()
        // rg --files lists regular files; list_files also lists folders and links.
        .filter(|(path, is_dir)| {
            !is_dir
                && !path
                    .symlink_metadata()
                    .is_ok_and(|m| m.file_type().is_symlink())
        })
        .map(|(path, _)| {
            path.strip_prefix(root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    report_sets("list_files", &ours, &theirs);
    let (a, b) = interleaved(
        || {
            call(runtime, tools, "list_files", json!({"pattern": "**/*"}));
        },
        || {
            rg(&args);
        },
    );
    let ratio = a.as_secs_f64() / b.as_secs_f64();
    println!(
        "list_files **/*: {:.1} ms, rg --files: {:.1} ms; list_files / rg: {ratio:.2}",
        a.as_secs_f64() * 1e3,
        b.as_secs_f64() * 1e3,
    );
    ratio
}

/// P3: a page near the end of a 100 MB file, with the heap's peak above its level before.
fn deep_page(runtime: &tokio::runtime::Runtime, scratch: &Path) {
    let dir = scratch.join("deep");
    std::fs::create_dir_all(&dir).expect("folder");
    let line = format!("{}\n", "x".repeat(99));
    let lines = 1_000_000u64;
    {
        use std::io::Write;
        let file = std::fs::File::create(dir.join("big.txt")).expect("create");
        let mut out = std::io::BufWriter::new(file);
        for _ in 0..lines {
            out.write_all(line.as_bytes()).expect("write");
        }
    }
    let tools = runtime.block_on(tools_for(
        &dir,
        FilesOptions {
            read_record: Some(Arc::new(ReadRecord::new())),
            ..FilesOptions::default()
        },
    ));
    let input = json!({"path": "big.txt", "offset": lines - 2500});
    // A first, one-line call starts the blocking pool's thread, so the measured call pays for no
    // setup, while none of the big page's memory is made resident in advance.
    call(
        runtime,
        &tools,
        "read_file",
        json!({"path": "big.txt", "limit": 1}),
    );
    // Linux resets the resident-set peak on request; the peak over the call is then its own.
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let before = proc_status_kib("VmRSS");
    let started = Instant::now();
    let page = call(runtime, &tools, "read_file", input);
    let elapsed = started.elapsed();
    let peak = proc_status_kib("VmHWM");
    let bound = 4 * page.len() + (1 << 20);
    match (reset, before, peak) {
        (true, Some(before), Some(peak)) => {
            let extra = peak.saturating_sub(before) * 1024;
            println!(
                "read_file deep page of a 100 MB file: page {} bytes, peak extra resident memory \
                 {extra} bytes, bound 4 x page + 1 MiB = {bound} bytes ({}), {:.1} ms",
                page.len(),
                if extra <= bound { "within" } else { "OVER" },
                elapsed.as_secs_f64() * 1e3
            );
        }
        _ => println!(
            "read_file deep page of a 100 MB file: page {} bytes in {:.1} ms (no /proc here to \
             measure the peak)",
            page.len(),
            elapsed.as_secs_f64() * 1e3
        ),
    }
}

/// A `kB` field of `/proc/self/status`.
fn proc_status_kib(field: &str) -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// P4: write_file and edit_file on a 10 MB file.
fn write_and_edit(runtime: &tokio::runtime::Runtime, scratch: &Path) {
    let dir = scratch.join("edit");
    std::fs::create_dir_all(&dir).expect("folder");
    let mut text = "some text on a line\n".repeat(500_000);
    text.push_str("the unique marker\n");
    std::fs::write(dir.join("ten.txt"), &text).expect("write");
    let tools = runtime.block_on(tools_for(
        &dir,
        FilesOptions {
            read_record: Some(Arc::new(ReadRecord::new())),
            ..FilesOptions::default()
        },
    ));
    call(
        runtime,
        &tools,
        "read_file",
        json!({"path": "ten.txt", "limit": 1}),
    );
    let started = Instant::now();
    let wrote = call(
        runtime,
        &tools,
        "write_file",
        json!({"path": "ten.txt", "content": text}),
    );
    let write_ms = started.elapsed().as_secs_f64() * 1e3;
    let started = Instant::now();
    let edited = call(
        runtime,
        &tools,
        "edit_file",
        json!({"path": "ten.txt", "old": "unique marker", "new": "changed marker"}),
    );
    let edit_ms = started.elapsed().as_secs_f64() * 1e3;
    println!(
        "write_file 10 MB: {write_ms:.1} ms ({wrote}); edit_file 10 MB: {edit_ms:.1} ms ({edited})"
    );
}
