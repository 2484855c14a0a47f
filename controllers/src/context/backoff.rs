//! Consecutive reconcile failures per object, and the one exponential backoff of the crate.

use std::{
    collections::HashMap,
    hash::{DefaultHasher, Hash, Hasher},
    sync::Mutex,
    time::Duration,
};

/// The largest share by which [`jittered`] lengthens or shortens a delay. Failures that begin together (every
/// claimed host refusing connections, the API server restarting) would otherwise retry in lockstep, attempt
/// after attempt; this spreads them without making any wait much longer than the documented backoff.
const JITTER: f64 = 0.15;

/// Consecutive reconcile failures per object (`"{KIND}/{uid}"`), for [`crate::reconcile::error_policy`].
#[derive(Default)]
pub(crate) struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// Count a failure of `key`; returns how long to wait before the next attempt ([`jittered`]).
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
        jittered(key, n)
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

/// [`backoff`] of `attempt`, lengthened or shortened by up to [`JITTER`]. The share comes from a hash of `key`
/// (the object) and `attempt` rather than a random source: objects that fail together spread out, while one
/// object's waits are reproducible (a test, or a log read later, sees the same delay for the same attempt).
pub(crate) fn jittered(key: &str, attempt: u32) -> Duration {
    let mut h = DefaultHasher::new();
    (key, attempt).hash(&mut h);
    // The top 53 bits are exact in an f64: a fraction in [0, 1).
    let unit = (h.finish() >> 11) as f64 / (1u64 << 53) as f64;
    backoff(attempt).mul_f64(1.0 - JITTER + 2.0 * JITTER * unit)
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
    fn jitter_stays_within_its_bounds_and_spreads_objects_that_fail_together() {
        for attempt in [1, 2, 5, 30] {
            let base = backoff(attempt);
            let waits: Vec<Duration> = (0..200)
                .map(|i| jittered(&format!("KKInstance/uid-{i}"), attempt))
                .collect();
            for w in &waits {
                assert!(
                    *w >= base.mul_f64(1.0 - JITTER) && *w <= base.mul_f64(1.0 + JITTER),
                    "attempt {attempt}: {w:?} is outside {base:?} ± {JITTER}"
                );
            }
            let distinct: std::collections::BTreeSet<_> = waits.iter().collect();
            assert!(
                distinct.len() > 150,
                "attempt {attempt}: only {} distinct waits among 200 objects",
                distinct.len()
            );
            let (lo, hi) = (waits.iter().min().unwrap(), waits.iter().max().unwrap());
            assert!(
                *hi - *lo > base.mul_f64(JITTER),
                "attempt {attempt}: waits span only {lo:?}..{hi:?}, not both sides of {base:?}"
            );
        }
    }

    #[test]
    fn one_objects_jittered_wait_is_the_same_for_the_same_attempt() {
        assert_eq!(jittered("KKCluster/uid-3", 4), jittered("KKCluster/uid-3", 4));
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
