//! Background jobs keyed by a name (one at a time per key), each with the outcome of its last run: work a
//! reconciler starts and looks at again on its next reconcile (the membership sync of a control-plane endpoint
//! the provider serves). Nothing here outlives the manager: what a job must know after a restart is read again
//! from the objects and the hosts.

use std::{collections::HashMap, sync::Mutex};

use tokio::task::JoinHandle;

/// Background jobs by key.
#[derive(Default)]
pub(crate) struct Jobs {
    entries: Mutex<HashMap<String, Entry>>,
}

#[derive(Default)]
struct Entry {
    handle: Option<JoinHandle<()>>,
    /// The last run's outcome: what it did, or why it failed.
    outcome: Option<Result<String, String>>,
}

impl Jobs {
    /// True while the job of `key` runs.
    pub(crate) fn running(&self, key: &str) -> bool {
        self.entries
            .lock()
            .ok()
            .and_then(|e| {
                e.get(key)
                    .and_then(|j| j.handle.as_ref().map(|h| !h.is_finished()))
            })
            .unwrap_or(false)
    }

    /// Start `job` for `key` unless one runs; false when one did. The last outcome stays until the new one.
    pub(crate) fn spawn<F>(&self, key: &str, job: F) -> bool
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let Ok(mut e) = self.entries.lock() else {
            return false;
        };
        let entry = e.entry(key.to_owned()).or_default();
        if entry.handle.as_ref().is_some_and(|h| !h.is_finished()) {
            return false;
        }
        entry.handle = Some(tokio::spawn(job));
        true
    }

    /// Record the outcome of `key`'s run (the job's last act).
    pub(crate) fn finish(&self, key: &str, outcome: Result<String, String>) {
        if let Ok(mut e) = self.entries.lock() {
            e.entry(key.to_owned()).or_default().outcome = Some(outcome);
        }
    }

    /// The outcome of `key`'s last finished run.
    pub(crate) fn outcome(&self, key: &str) -> Option<Result<String, String>> {
        self.entries
            .lock()
            .ok()
            .and_then(|e| e.get(key).and_then(|j| j.outcome.clone()))
    }

    /// Stop and forget the job of `key` (its object is gone).
    pub(crate) fn forget(&self, key: &str) {
        if let Ok(mut e) = self.entries.lock()
            && let Some(j) = e.remove(key)
            && let Some(h) = j.handle
        {
            h.abort();
        }
    }

    /// Abort every job (shutdown, lost leadership).
    pub(crate) fn abort_all(&self) {
        if let Ok(mut e) = self.entries.lock() {
            for (_, j) in e.drain() {
                if let Some(h) = j.handle {
                    h.abort();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_job_runs_per_key_and_its_outcome_stays_until_the_next() {
        let jobs = std::sync::Arc::new(Jobs::default());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let j = jobs.clone();
        assert!(jobs.spawn("k", async move {
            let _ = rx.await;
            j.finish("k", Ok("done".into()));
        }));
        assert!(jobs.running("k"));
        assert!(
            !jobs.spawn("k", async {}),
            "a second run of a running key is refused"
        );
        assert!(jobs.spawn("other", async {}), "another key runs beside it");
        tx.send(()).unwrap();
        for _ in 0..100 {
            if !jobs.running("k") {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(!jobs.running("k"));
        assert_eq!(jobs.outcome("k"), Some(Ok("done".into())));
        jobs.forget("k");
        assert_eq!(jobs.outcome("k"), None);
    }
}
