//! Background host probes per KKCluster UID and their latest results.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use capkk_api::HostProbe;
use tokio::task::JoinHandle;

/// Background host probes per KKCluster UID and their latest results.
#[derive(Default)]
pub(crate) struct ProbeRegistry {
    entries: Mutex<HashMap<String, ProbeEntry>>,
}

struct ProbeEntry {
    started: Instant,
    generation: Option<i64>,
    handle: JoinHandle<()>,
    result: Option<Vec<HostProbe>>,
}

impl ProbeRegistry {
    /// True when a probe of KKCluster `uid` should start: none runs, and it was never probed, its spec
    /// changed since, or the last probe is older than `interval`.
    pub(crate) fn due(&self, uid: &str, generation: Option<i64>, interval: Duration) -> bool {
        let Ok(e) = self.entries.lock() else {
            return false;
        };
        match e.get(uid) {
            None => true,
            Some(p) if !p.handle.is_finished() => false,
            Some(p) => p.generation != generation || p.started.elapsed() >= interval,
        }
    }

    /// Track a started probe (the previous result stays until the new one arrives).
    pub(crate) fn start(&self, uid: &str, generation: Option<i64>, handle: JoinHandle<()>) {
        if let Ok(mut e) = self.entries.lock() {
            let result = e.remove(uid).and_then(|p| p.result);
            e.insert(
                uid.to_owned(),
                ProbeEntry {
                    started: Instant::now(),
                    generation,
                    handle,
                    result,
                },
            );
        }
    }

    /// Store the result of the probe of `uid`.
    pub(crate) fn finish(&self, uid: &str, probes: Vec<HostProbe>) {
        if let Ok(mut e) = self.entries.lock()
            && let Some(p) = e.get_mut(uid)
        {
            p.result = Some(probes);
        }
    }

    /// The latest probe results of `uid`.
    pub(crate) fn latest(&self, uid: &str) -> Option<Vec<HostProbe>> {
        self.entries
            .lock()
            .ok()
            .and_then(|e| e.get(uid).and_then(|p| p.result.clone()))
    }

    /// Stop and forget the probes of a deleted KKCluster.
    pub(crate) fn forget(&self, uid: &str) {
        if let Ok(mut e) = self.entries.lock()
            && let Some(p) = e.remove(uid)
        {
            p.handle.abort();
        }
    }

    /// Abort every probe (shutdown).
    pub(crate) fn abort_all(&self) {
        if let Ok(mut e) = self.entries.lock() {
            for (_, p) in e.drain() {
                p.handle.abort();
            }
        }
    }
}
