//! The `ahpd` binary: everything lives in the library (`src/lib.rs`), so the crate's tests can
//! depend on it with the `test-plugins` feature (see `Cargo.toml`).

// glibc's malloc keeps freed memory inside its arenas unless the top of a heap is free, so a
// daemon that streamed 100 answers at once went on holding most of that peak after the turns
// ended; mimalloc returns free pages to the system shortly after they empty.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(ahpd::run_command_line());
}
