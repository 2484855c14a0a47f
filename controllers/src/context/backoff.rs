//! Consecutive reconcile failures per object, and the one exponential backoff of the crate.

use std::{collections::HashMap, sync::Mutex, time::Duration};

/// Consecutive reconcile failures per object (`"{KIND}/{uid}"`), for [`crate::reconcile::error_policy`].
#[derive(Default)]
pub(crate) struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// Count a failure of `key`; returns how long to wait before the next attempt.
    pub(crate) fn failed(&self, key: &str) -> Duration {
        let n = self
            .failures
            .lock()
            .map(|mut f| {
                let e = f.entry(key.to_owned()).or_insert(0);
                *e += 1;
                *e
            })
            .unwrap_or(1);
        backoff(n)
    }

    /// Forget `key` (a successful reconcile).
    pub(crate) fn reset(&self, key: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }
}

/// Exponential backoff from 5 s, doubling, capped at 5 minutes (built with backon's builder).
pub(crate) fn backoff(attempt: u32) -> Duration {
    use backon::BackoffBuilder;
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_secs(5))
        .with_max_delay(Duration::from_secs(300))
        .with_factor(2.0)
        .with_max_times(usize::MAX)
        .build()
        .nth(attempt.saturating_sub(1) as usize)
        .unwrap_or(Duration::from_secs(300))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_caps() {
        assert!(backoff(1) >= Duration::from_secs(5));
        assert!(backoff(2) > backoff(1));
        assert!(backoff(30) <= Duration::from_secs(300));
    }

    #[test]
    fn a_success_resets_the_backoff_so_the_next_failure_waits_the_minimum() {
        let b = Backoff::default();
        let key = "KKInstance/uid-1";
        let first = b.failed(key);
        for _ in 0..4 {
            b.failed(key);
        }
        assert!(b.failed(key) > first, "failures lengthen the backoff");
        crate::reconcile::settle(&b, key, &Ok(kube::runtime::controller::Action::await_change()));
        assert!(
            b.failures.lock().unwrap().is_empty(),
            "the key is dropped, not kept at zero"
        );
        assert_eq!(b.failed(key), first);
    }

    #[test]
    fn a_failed_reconcile_keeps_the_backoff() {
        let b = Backoff::default();
        let key = "KKCluster/uid-2";
        b.failed(key);
        let err = crate::Error::ResolveCredentials("x".into());
        crate::reconcile::settle(&b, key, &Err(err));
        assert_eq!(b.failures.lock().unwrap().get(key), Some(&1));
    }
}
