//! The store conformance suite against the file store; the second handle is a fresh instance over
//! the same folder, so nothing passes through one instance's caches.

use std::sync::Arc;

use cofold_agents::store::Store;
use cofold_agents::store::conformance::StoreFixture;
use cofold_store_file::{FileStore, FileStoreOptions};

fn fixture() -> StoreFixture {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let root = dir.path().to_path_buf();
    let open = move || -> Arc<dyn Store> {
        Arc::new(FileStore::open(&root, FileStoreOptions::default()).expect("open the store"))
    };
    let first = open();
    StoreFixture::with_reopen(first, open, dir)
}

cofold_agents::store_conformance_tests!(fixture);
