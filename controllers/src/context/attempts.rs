//! The KKRemediation reconciler's background attempts: which runs, which one started last, how each ended.
//! Kept here, beside the other background-work registries, so that the context names no reconciler's types
//! (the remediation decides with [`AttemptOutcome`]; this only stores it).

use std::{collections::HashMap, sync::Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::task::JoinHandle;

/// How an attempt ended on the host (kept in memory until the next attempt; a restarted manager does not know
/// it and waits out the attempt's timeout).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AttemptOutcome {
    /// The tier did what it does (services active, or the host back with a new boot ID).
    Succeeded(String),
    /// The tier failed; `reason` is the condition reason.
    Failed {
        /// Condition reason.
        reason: &'static str,
        /// What failed.
        message: String,
    },
}

/// Running attempts, the latest one started and the outcome of each KKRemediation's latest one.
#[derive(Default)]
pub(crate) struct Attempts {
    running: Mutex<HashMap<String, JoinHandle<()>>>,
    outcomes: Mutex<HashMap<String, (u32, AttemptOutcome)>>,
    started: Mutex<HashMap<String, (u32, Time)>>,
}

impl Attempts {
    /// True while an attempt of `uid` runs (a finished one is dropped).
    pub(crate) fn running(&self, uid: &str) -> bool {
        let Ok(mut r) = self.running.lock() else {
            return false;
        };
        match r.get(uid) {
            Some(h) if h.is_finished() => {
                r.remove(uid);
                false
            }
            Some(_) => true,
            None => false,
        }
    }

    /// Start `fut` as the attempt of `uid` unless one runs; false when one was running.
    pub(crate) fn spawn<F>(&self, uid: &str, fut: F) -> bool
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        if self.running(uid) {
            return false;
        }
        let handle = tokio::spawn(fut);
        if let Ok(mut r) = self.running.lock() {
            r.insert(uid.to_owned(), handle);
        }
        true
    }

    /// Remember that attempt `attempt` of `uid` started `at`.
    pub(crate) fn started(&self, uid: &str, attempt: u32, at: Time) {
        if let Ok(mut s) = self.started.lock() {
            s.insert(uid.to_owned(), (attempt, at));
        }
    }

    /// The latest attempt of `uid` this manager started, and when. A reconcile woken by a quick attempt's end
    /// may read the object from a cache that does not hold the status recording that attempt yet; this keeps
    /// it from starting the same attempt again.
    pub(crate) fn latest_started(&self, uid: &str) -> Option<(u32, Time)> {
        self.started.lock().ok()?.get(uid).cloned()
    }

    /// Record how attempt `attempt` of `uid` ended.
    pub(crate) fn record(&self, uid: &str, attempt: u32, outcome: AttemptOutcome) {
        if let Ok(mut o) = self.outcomes.lock() {
            o.insert(uid.to_owned(), (attempt, outcome));
        }
    }

    /// How attempt `attempt` of `uid` ended, if this manager saw it end.
    pub(crate) fn outcome(&self, uid: &str, attempt: u32) -> Option<AttemptOutcome> {
        self.outcomes
            .lock()
            .ok()?
            .get(uid)
            .filter(|(a, _)| *a == attempt)
            .map(|(_, o)| o.clone())
    }

    /// Stop the attempt of `uid` and forget it (the KKRemediation is gone).
    pub(crate) fn forget(&self, uid: &str) {
        if let Ok(mut r) = self.running.lock()
            && let Some(h) = r.remove(uid)
        {
            h.abort();
        }
        if let Ok(mut o) = self.outcomes.lock() {
            o.remove(uid);
        }
        if let Ok(mut s) = self.started.lock() {
            s.remove(uid);
        }
    }

    /// Abort every attempt (shutdown; a new manager waits out the attempt's timeout).
    pub(crate) fn abort_all(&self) {
        if let Ok(mut r) = self.running.lock() {
            for (_, h) in r.drain() {
                h.abort();
            }
        }
    }
}
