//! Lays out the release binary's startup code in one place.
//!
//! `link/startup.order` lists the functions that run while the daemon starts and idles (made by
//! `link/startup_order.py`). Handed to the linker, it puts them side by side at the start of the
//! text section, so the pages an idle daemon keeps mapped are few: 13.5 MB resident became 6.8 MB
//! with the cofold plugin. Only release builds get it, and only when the linker is the one rustc
//! uses by default on x86-64 Linux (LLD), since other linkers spell the option differently or lack
//! it. Names the build does not have are skipped, so a stale list costs memory, never a failure.

use std::env;
use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=link/startup.order");
    println!("cargo:rerun-if-changed=../../Cargo.lock");
    println!("cargo:rerun-if-changed=../../Cargo.toml");
    println!("cargo:rerun-if-env-changed=AHPD_LINK_MAP");
    println!("cargo:rerun-if-env-changed=AHPD_NO_STARTUP_ORDER");
    let var = |name: &str| env::var(name).unwrap_or_default();
    let release = var("PROFILE") == "release";
    // Rust has linked this target with its own LLD by default since 1.90; a linker chosen in the
    // configuration or the flags may be another one.
    let default_lld = var("TARGET") == "x86_64-unknown-linux-gnu"
        && env::var_os("RUSTC_LINKER").is_none()
        && !var("CARGO_ENCODED_RUSTFLAGS").contains("link");
    if !release || !default_lld || env::var_os("AHPD_NO_STARTUP_ORDER").is_some() {
        return;
    }
    let dir = var("CARGO_MANIFEST_DIR");
    let order = format!("{dir}/link/startup.order");
    if let Some(why) = stale(Path::new(&order), &Path::new(&dir).join("../..")) {
        println!(
            "cargo:warning=link/startup.order {why}: the daemon will idle with more memory \
             until `python3 crates/ahpd/link/startup_order.py` remakes it"
        );
    }
    println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={order}");
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    // startup_order.py reads the linker's map to learn where each function went.
    if let Ok(map) = env::var("AHPD_LINK_MAP") {
        println!("cargo:rustc-link-arg-bins=-Wl,-Map={map}");
    }
}

/// Why the list no longer fits this build, if it does not: its `# made-for:` line holds a hash of
/// what the symbol names depend on (the `Cargo.lock`, the compiler, the release and bench
/// profiles) as they were when it was made.
fn stale(order: &Path, workspace: &Path) -> Option<String> {
    let list = std::fs::read_to_string(order).ok()?;
    let made_for = list
        .lines()
        .find_map(|l| l.strip_prefix("# made-for: "))
        .map(str::trim);
    let lock = std::fs::read(workspace.join("Cargo.lock")).ok()?;
    let manifest = std::fs::read_to_string(workspace.join("Cargo.toml")).ok()?;
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let version = Command::new(rustc).arg("-V").output().ok()?.stdout;
    let profiles = release_profiles(&manifest);
    let now = fnv1a(&[
        &lock,
        b"\n",
        version.trim_ascii(),
        b"\n",
        profiles.as_bytes(),
    ]);
    match made_for {
        Some(then) if then == format!("{now:016x}") => None,
        Some(_) => Some("was made for another Cargo.lock, compiler or release profile".to_owned()),
        None => Some("has no made-for line".to_owned()),
    }
}

/// The `[profile.release]` and `[profile.bench]` tables of the workspace manifest, one trimmed
/// line each: the builds the list is made from.
fn release_profiles(manifest: &str) -> String {
    let mut keep = false;
    let mut out = String::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            keep = line.starts_with("[profile.release") || line.starts_with("[profile.bench");
        }
        if keep && !line.is_empty() && !line.starts_with('#') {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// FNV-1a, 64 bits: `startup_order.py` computes the same.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in parts.iter().flat_map(|p| p.iter()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}
