//! The status each reconciler last wrote, per object, for a few seconds.
//!
//! A reconcile often runs before the watch has brought its object's last status write back: another object
//! woke it (a KKMachine is woken by every change of its KKInstance). Starting from the cached, older status,
//! it found the conditions it had set missing, set them again with a new `lastTransitionTime`, and wrote a
//! status that differed from the one in the API only in those times: a write for nothing, which woke the
//! KKMachine again and CAPI's Machine controller (a third of a KKMachine's status writes on the way to
//! `provisioned` were such writes). The skeleton compares with the status it last wrote instead, while the
//! cache does not show it yet.
//!
//! The entry is kept only for [`KEEP`]: the cache catches up within it, and a status someone else changed
//! meanwhile is then seen again (these are the reconciler's own fields; nothing else should write them).

use std::{
    any::Any,
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// How long a written status is remembered.
pub(crate) const KEEP: Duration = Duration::from_secs(10);

type Entry = (Instant, Arc<dyn Any + Send + Sync>);

/// The last status written per object key (`"{KIND}/{uid}"`).
#[derive(Default)]
pub(crate) struct Written {
    entries: Mutex<HashMap<String, Entry>>,
}

impl Written {
    /// The status last written for `key`, if it was written less than [`KEEP`] ago.
    pub(crate) fn get<S: Clone + Send + Sync + 'static>(&self, key: &str) -> Option<S> {
        let entries = self.entries.lock().ok()?;
        let (at, status) = entries.get(key)?;
        if at.elapsed() >= KEEP {
            return None;
        }
        status.downcast_ref::<S>().cloned()
    }

    /// Remember `status` as written for `key` now (and forget entries past [`KEEP`]).
    pub(crate) fn put<S: Send + Sync + 'static>(&self, key: &str, status: S) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.retain(|_, (at, _)| at.elapsed() < KEEP);
            entries.insert(key.to_owned(), (Instant::now(), Arc::new(status)));
        }
    }

    /// Forget `key` (the cache shows its last write).
    pub(crate) fn forget(&self, key: &str) {
        if let Ok(mut entries) = self.entries.lock() {
            entries.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_status_is_returned_for_its_key_and_type_only() {
        let w = Written::default();
        w.put("KKMachine/u1", "written".to_owned());
        assert_eq!(w.get::<String>("KKMachine/u1").as_deref(), Some("written"));
        assert_eq!(w.get::<String>("KKMachine/u2"), None);
        assert_eq!(
            w.get::<u32>("KKMachine/u1"),
            None,
            "another type is not this status"
        );
        w.forget("KKMachine/u1");
        assert_eq!(w.get::<String>("KKMachine/u1"), None);
    }
}
