//! [`NestedIndex`]: which machine holds each conversation of the daemon's nested agents. A
//! session opened in a machine is put here; after a restart the session store's records fill it,
//! so a past session's transcript and disposal still reach the machine.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use crate::store::sessionstore::SessionRecord;
use crate::util::path_of;

/// Where one conversation lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Placed {
    /// The machine's id.
    pub machine: String,
    /// The outer session's URI, as the machine's port knows it.
    pub session: String,
    /// The session's folder on this host.
    pub folder: Option<PathBuf>,
}

/// The machines of the conversations of a daemon's nested agents, by provider and backend id.
/// One is shared by every agent the daemon builds, since it builds them again when its agent
/// records change.
#[derive(Debug, Default)]
pub struct NestedIndex {
    by_id: Mutex<BTreeMap<(String, String), Placed>>,
}

impl NestedIndex {
    /// Learns the sessions of kept records that run in machines (those with a nested part).
    pub fn learn(&self, records: &[SessionRecord]) {
        let mut by_id = self.by_id.lock().unwrap_or_else(PoisonError::into_inner);
        for r in records {
            let Some(machine) = r.nested.as_ref().map(|n| n.machine.clone()) else {
                continue;
            };
            by_id.insert(
                (r.provider.clone(), r.backend_id.clone()),
                Placed {
                    machine,
                    session: r.uri.clone(),
                    folder: r.working_directories.first().and_then(|d| path_of(d)),
                },
            );
        }
    }

    /// The machine of a conversation, when it lives in one.
    pub fn machine(&self, provider: &str, backend_id: &str) -> Option<String> {
        self.get(provider, backend_id).map(|p| p.machine)
    }

    pub(crate) fn put(&self, provider: &str, backend_id: &str, place: Placed) {
        self.by_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((provider.to_owned(), backend_id.to_owned()), place);
    }

    pub(crate) fn get(&self, provider: &str, backend_id: &str) -> Option<Placed> {
        self.by_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&(provider.to_owned(), backend_id.to_owned()))
            .cloned()
    }

    pub(crate) fn take(&self, provider: &str, backend_id: &str) -> Option<Placed> {
        self.by_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&(provider.to_owned(), backend_id.to_owned()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::nested::machine::COMPUTER_KEY;
    use crate::store::sessionstore::NestedRecord;

    fn record(uri: &str, id: &str, computer: &str, nested: Option<&str>) -> SessionRecord {
        let mut config = ahp_types::common::JsonObject::new();
        config.insert(COMPUTER_KEY.into(), computer.into());
        SessionRecord {
            uri: uri.into(),
            provider: "echo".into(),
            backend_id: id.into(),
            created_at: "2026-01-01T00:00:00Z".into(),
            title: None,
            is_read: false,
            is_archived: false,
            config,
            working_directories: vec!["file:///srv/app".into()],
            nested: nested.map(|m| NestedRecord {
                machine: m.into(),
                inner_provider: "echo".into(),
                title: "t".into(),
                modified_at: "2026-01-01T00:00:00Z".into(),
            }),
        }
    }

    #[test]
    fn learns_machines_from_the_nested_part_only() {
        let index = NestedIndex::default();
        index.learn(&[
            record("echo:/a", "a", "computer://box", Some("box")),
            record("echo:/b", "b", "computer://old", None),
            record("echo:/c", "c", "", None),
            record("echo:/d", "d", "disposable:cofold", None),
        ]);
        assert_eq!(index.machine("echo", "a").as_deref(), Some("box"));
        // A record without its nested part is the agent's here, whatever its setting says.
        assert_eq!(index.machine("echo", "b"), None);
        assert_eq!(index.machine("echo", "c"), None);
        assert_eq!(index.machine("echo", "d"), None);
        assert_eq!(index.machine("other", "a"), None);
        let placed = index.take("echo", "a").unwrap();
        assert_eq!(placed.session, "echo:/a");
        assert_eq!(placed.folder, Some(PathBuf::from("/srv/app")));
        assert_eq!(index.machine("echo", "a"), None);
    }
}
