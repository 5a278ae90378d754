//! Lays out the release binary's startup code in one place.
//!
//! `link/startup.order` lists the functions that run while the daemon starts and idles (made by
//! `link/startup_order.py`). Handed to the linker, it puts them side by side at the start of the
//! text section, so the pages an idle daemon keeps mapped are few: 13.5 MB resident became 6.8 MB
//! with the cofold plugin. Only release builds get it, and only when the linker is the one rustc
//! uses by default on x86-64 Linux (LLD), since other linkers spell the option differently or lack
//! it. Names the build does not have are skipped, so a stale list costs memory, never a failure.

use std::env;

fn main() {
    println!("cargo:rerun-if-changed=link/startup.order");
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
    let order = format!("{}/link/startup.order", var("CARGO_MANIFEST_DIR"));
    println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={order}");
    println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    // startup_order.py reads the linker's map to learn where each function went.
    if let Ok(map) = env::var("AHPD_LINK_MAP") {
        println!("cargo:rustc-link-arg-bins=-Wl,-Map={map}");
    }
}
