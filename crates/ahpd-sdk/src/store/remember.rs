//! The host's side of the session store: the remembered records in memory, kept in
//! step by the session tasks, and a writer that saves them at most once per second.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::store::sessionstore::{SessionRecord, SessionStore, SessionStoreError};

/// Shortest time between two saves the host starts on its own.
const MIN_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Records {
    /// Shared with a save in progress, which then needs no copy of each record.
    by_uri: BTreeMap<String, Arc<SessionRecord>>,
    /// Bumped on every change, so a save knows whether it is still needed.
    generation: u64,
    saved_generation: u64,
}

pub(crate) struct Remembered {
    port: Arc<dyn SessionStore>,
    records: Mutex<Records>,
    dirty: Notify,
    /// One save at a time, in order.
    saving: tokio::sync::Mutex<()>,
    writer_started: AtomicBool,
    /// The last failure logged, so a failing store warns once, not once a second.
    last_error: Mutex<Option<String>>,
    /// Cancelled when the host shuts down or is dropped: the writer saves once more and ends.
    stop: CancellationToken,
}

impl Remembered {
    /// Load the store. A failure is logged once; the host then starts with nothing remembered
    /// (the store itself makes sure nothing it could not read is lost).
    pub(crate) fn load(port: Arc<dyn SessionStore>, stop: CancellationToken) -> Arc<Self> {
        let loaded = match port.load() {
            Ok(records) => records,
            Err(e) => {
                tracing::warn!("{e}");
                Vec::new()
            }
        };
        let by_uri = loaded
            .into_iter()
            .map(|r| (r.uri.clone(), Arc::new(r)))
            .collect();
        Arc::new(Self {
            port,
            records: Mutex::new(Records {
                by_uri,
                ..Records::default()
            }),
            dirty: Notify::new(),
            saving: tokio::sync::Mutex::new(()),
            writer_started: AtomicBool::new(false),
            last_error: Mutex::new(None),
            stop,
        })
    }

    fn with<R>(&self, f: impl FnOnce(&mut Records) -> R) -> R {
        let mut g = self.records.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g)
    }

    /// The record of this exact spelling.
    pub(crate) fn get(&self, uri: &str) -> Option<SessionRecord> {
        self.with(|r| r.by_uri.get(uri).map(|x| SessionRecord::clone(x)))
    }

    /// The record of a conversation, under whatever spelling it was remembered.
    pub(crate) fn by_id(&self, provider: &str, backend_id: &str) -> Option<SessionRecord> {
        self.with(|r| {
            r.by_uri
                .values()
                .find(|x| x.provider == provider && x.backend_id == backend_id)
                .map(|x| SessionRecord::clone(x))
        })
    }

    pub(crate) fn all(&self) -> Vec<SessionRecord> {
        self.with(|r| r.by_uri.values().map(|x| SessionRecord::clone(x)).collect())
    }

    /// Remember a session's current facts; the spelling in `record.uri` replaces any other
    /// spelling of the same conversation. Schedules a save when something changed.
    pub(crate) fn put(self: &Arc<Self>, record: SessionRecord) {
        let changed = self.with(|r| {
            let before = r.by_uri.len();
            r.by_uri.retain(|uri, x| {
                *uri == record.uri
                    || !(x.provider == record.provider && x.backend_id == record.backend_id)
            });
            let respelled = r.by_uri.len() != before;
            let same = r.by_uri.get(&record.uri).map(|x| &**x) == Some(&record);
            if same && !respelled {
                return false;
            }
            r.by_uri.insert(record.uri.clone(), Arc::new(record));
            r.generation += 1;
            true
        });
        if changed {
            self.schedule();
        }
    }

    /// Forget a session (disposed, or no longer listed by its agent).
    pub(crate) fn forget(self: &Arc<Self>, uri: &str) {
        let changed = self.with(|r| {
            let gone = r.by_uri.remove(uri).is_some();
            if gone {
                r.generation += 1;
            }
            gone
        });
        if changed {
            self.schedule();
        }
    }

    /// Forget every spelling of a conversation.
    pub(crate) fn forget_id(self: &Arc<Self>, provider: &str, backend_id: &str) {
        let uris: Vec<String> = self.with(|r| {
            r.by_uri
                .values()
                .filter(|x| x.provider == provider && x.backend_id == backend_id)
                .map(|x| x.uri.clone())
                .collect()
        });
        for uri in uris {
            self.forget(&uri);
        }
    }

    fn schedule(self: &Arc<Self>) {
        self.dirty.notify_one();
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        if !self.writer_started.swap(true, Ordering::AcqRel) {
            tokio::spawn(writer(self.clone()));
        }
    }

    /// End the writer after one last save.
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    /// Save now if anything changed since the last save.
    pub(crate) async fn flush(&self) -> Result<(), SessionStoreError> {
        let _one = self.saving.lock().await;
        let (records, generation) = self.with(|r| {
            (r.generation != r.saved_generation)
                .then(|| (r.by_uri.values().cloned().collect::<Vec<_>>(), r.generation))
                .unzip()
        });
        let (Some(records), Some(generation)) = (records, generation) else {
            return Ok(());
        };
        let port = self.port.clone();
        let result = tokio::task::spawn_blocking(move || {
            let records: Vec<&SessionRecord> = records.iter().map(|r| &**r).collect();
            port.save(&records)
        })
        .await
        .unwrap_or_else(|e| Err(SessionStoreError::Other(e.to_string())));
        match &result {
            Ok(()) => {
                self.with(|r| r.saved_generation = r.saved_generation.max(generation));
                if let Ok(mut last) = self.last_error.lock() {
                    *last = None;
                }
            }
            Err(e) => {
                let text = e.to_string();
                let mut last = self.last_error.lock().unwrap_or_else(|p| p.into_inner());
                if last.as_deref() != Some(text.as_str()) {
                    tracing::warn!("{text}");
                    *last = Some(text);
                }
            }
        }
        result
    }
}

/// Saves after each change, at most once per `MIN_INTERVAL`; once more when stopped.
async fn writer(me: Arc<Remembered>) {
    let mut last_save: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = me.dirty.notified() => {}
            _ = me.stop.cancelled() => break,
        }
        if let Some(at) = last_save {
            tokio::select! {
                _ = tokio::time::sleep_until(at + MIN_INTERVAL) => {}
                _ = me.stop.cancelled() => break,
            }
        }
        let _ = me.flush().await;
        last_save = Some(tokio::time::Instant::now());
    }
    let _ = me.flush().await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Counts saves and records the (paused) clock at each.
    #[derive(Default)]
    struct Counting {
        saves: Mutex<Vec<(tokio::time::Instant, usize)>>,
        saved: Notify,
    }

    impl SessionStore for Counting {
        fn load(&self) -> Result<Vec<SessionRecord>, SessionStoreError> {
            Ok(Vec::new())
        }
        fn save(&self, records: &[&SessionRecord]) -> Result<(), SessionStoreError> {
            self.saves
                .lock()
                .unwrap()
                .push((tokio::time::Instant::now(), records.len()));
            self.saved.notify_one();
            Ok(())
        }
    }

    fn record(uri: &str, id: &str) -> SessionRecord {
        SessionRecord {
            uri: uri.into(),
            provider: "mock".into(),
            backend_id: id.into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            title: None,
            is_read: false,
            is_archived: false,
            config: Default::default(),
            working_directories: Vec::new(),
            nested: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn saves_at_most_once_a_second_and_never_loses_the_last_change() {
        let port = Arc::new(Counting::default());
        let stop = CancellationToken::new();
        let store = Remembered::load(port.clone(), stop.clone());
        store.put(record("mock:/a", "a"));
        port.saved.notified().await;
        // A burst of changes right after a save: one more save, a second later, holding all.
        for i in 0..5 {
            store.put(record(&format!("mock:/b{i}"), &format!("b{i}")));
        }
        port.saved.notified().await;
        let saves = port.saves.lock().unwrap().clone();
        assert_eq!(saves.len(), 2, "{saves:?}");
        assert_eq!(saves[1].1, 6, "the second save holds every change");
        assert!(saves[1].0 - saves[0].0 >= MIN_INTERVAL);
        // An unchanged record schedules nothing; a shutdown saves what is pending.
        store.put(record("mock:/a", "a"));
        store.put(record("ahp-session:/a", "a"));
        stop.cancel();
        port.saved.notified().await;
        let saves = port.saves.lock().unwrap().clone();
        assert_eq!(saves.len(), 3);
        assert_eq!(saves[2].1, 6, "the new spelling replaced the old one");
        assert!(store.get("mock:/a").is_none());
        assert_eq!(store.by_id("mock", "a").unwrap().uri, "ahp-session:/a");
    }
}
