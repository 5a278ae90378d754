//! What one store instance remembers between calls, each part bounded so a process that opens
//! thousands of sessions over its life does not keep something for each of them:
//!
//! - where a session's folder is ([`Folders`]): at most [`FOLDERS_KEPT`] sessions, the least
//!   recently used forgotten first (a forgotten one is looked up on disk again);
//! - the guard of read-modify-write steps on a session's records ([`Guards`]): only while a
//!   step holds or waits for it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::lock_map;

/// How many sessions' folders one instance remembers.
pub(crate) const FOLDERS_KEPT: usize = 1024;

/// Session id → its folder, with when it was last asked for.
#[derive(Debug, Default)]
pub(crate) struct Folders {
    map: HashMap<String, (PathBuf, u64)>,
    tick: u64,
}

impl Folders {
    pub(crate) fn get(&mut self, session_id: &str) -> Option<PathBuf> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(session_id).map(|(folder, used)| {
            *used = tick;
            folder.clone()
        })
    }

    /// Remembers a folder; past [`FOLDERS_KEPT`] the least recently used half is forgotten, so
    /// the sort this takes is paid once per `FOLDERS_KEPT / 2` new sessions.
    pub(crate) fn insert(&mut self, session_id: &str, folder: PathBuf) {
        self.tick += 1;
        self.map.insert(session_id.to_owned(), (folder, self.tick));
        if self.map.len() > FOLDERS_KEPT {
            let mut ticks: Vec<u64> = self.map.values().map(|(_, used)| *used).collect();
            ticks.sort_unstable();
            let cut = ticks[ticks.len() - FOLDERS_KEPT / 2];
            self.map.retain(|_, (_, used)| *used >= cut);
            self.map.shrink_to(FOLDERS_KEPT);
        }
    }

    pub(crate) fn remove(&mut self, session_id: &str) {
        self.map.remove(session_id);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

type Shared = Arc<Mutex<()>>;

/// Session folder → the guard of read-modify-write steps on its records, present only while
/// some step holds or waits for it.
#[derive(Debug, Default)]
pub(crate) struct Guards {
    map: Mutex<HashMap<PathBuf, Shared>>,
}

/// One step's share of a session's guard; lock it with `lock_map(&guard)`. The last share to
/// go takes the entry out of the map.
pub(crate) struct Guard<'a> {
    guards: &'a Guards,
    folder: PathBuf,
    shared: Shared,
}

impl Guards {
    pub(crate) fn take(&self, session_folder: &Path) -> Guard<'_> {
        let shared = Arc::clone(
            lock_map(&self.map)
                .entry(session_folder.to_path_buf())
                .or_default(),
        );
        Guard {
            guards: self,
            folder: session_folder.to_path_buf(),
            shared,
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock_map(&self.map).len()
    }
}

impl std::ops::Deref for Guard<'_> {
    type Target = Mutex<()>;

    fn deref(&self) -> &Mutex<()> {
        &self.shared
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let mut map = lock_map(&self.guards.map);
        // Only the map and this share hold it, and every other share is taken under the map's
        // lock: nobody can be waiting, so the entry goes.
        if Arc::strong_count(&self.shared) == 2 {
            map.remove(&self.folder);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn folders_keep_at_most_their_bound_and_the_most_recently_used() {
        let mut folders = Folders::default();
        folders.insert("kept", PathBuf::from("/s/kept"));
        for n in 0..FOLDERS_KEPT * 5 {
            folders.insert(&format!("s{n}"), PathBuf::from(format!("/s/{n}")));
            // Asked for all along, so it is never the least recently used.
            assert_eq!(folders.get("kept"), Some(PathBuf::from("/s/kept")));
            assert!(folders.len() <= FOLDERS_KEPT);
        }
        assert!(folders.get("s0").is_none());
        let last = FOLDERS_KEPT * 5 - 1;
        assert_eq!(
            folders.get(&format!("s{last}")),
            Some(PathBuf::from(format!("/s/{last}")))
        );
    }

    #[test]
    fn a_guard_is_shared_while_held_and_forgotten_after() {
        let guards = Guards::default();
        let a = Path::new("/s/a");
        {
            let first = guards.take(a);
            let second = guards.take(a);
            assert!(Arc::ptr_eq(&first.shared, &second.shared));
            let _held = lock_map(&first);
            assert!(second.try_lock().is_err(), "one guard for both steps");
            let _other = guards.take(Path::new("/s/b"));
            assert_eq!(guards.len(), 2);
        }
        assert_eq!(guards.len(), 0);
    }

    #[test]
    fn a_store_keeps_no_guard_once_its_steps_are_done() {
        use cofold_agents::id::Timestamp;
        use cofold_agents::message::Message;
        use cofold_agents::store::{NewSession, RunRecord, RunRef, RunStatus, RunUpdate};

        let dir = tempfile::tempdir().unwrap();
        let store =
            super::super::FileStore::open(dir.path(), super::super::FileStoreOptions::default())
                .unwrap();
        let inner = &store.inner;
        for n in 0..3 {
            let id = format!("s{n}");
            inner
                .create_session(NewSession {
                    session_id: id.clone(),
                    agent_id: "a".into(),
                    workspace: Some("/w".into()),
                })
                .unwrap();
            let now = Timestamp::now();
            inner
                .create_run(RunRecord {
                    run_id: "r".into(),
                    session_id: id.clone(),
                    agent_id: "a".into(),
                    model: None,
                    status: RunStatus::Running,
                    created_at: now.clone(),
                    updated_at: now,
                    pending_request_id: None,
                    usage: cofold_agents::usage::ZERO_USAGE,
                    cost: None,
                    steps: 0,
                    denials: Vec::new(),
                    input_message_id: None,
                    last_message_id: None,
                })
                .unwrap();
            assert!(inner.claim_writer(&id, "r").unwrap());
            let said = Message::user_text("hello").with_id("m1");
            inner.append_messages(&id, "r", &[said]).unwrap();
            let mut update = RunUpdate::new(RunRef::new(&id, "r"));
            update.status = Some(RunStatus::Completed);
            inner.update_run(&update).unwrap();
            inner.release_writer(&id, "r").unwrap();
            assert_eq!(inner.list_context_messages(&id).unwrap().len(), 1);
        }
        assert_eq!(inner.guards.len(), 0);
        assert_eq!(lock_map(&inner.folders).len(), 3);
        inner.delete_session("s0").unwrap();
        assert_eq!(inner.guards.len(), 0);
        assert_eq!(lock_map(&inner.folders).len(), 2);
    }
}
