//! Claim reservations: which hosts this manager's KKMachine reconciles are claiming right now.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// How long a claim reservation steers the host choice: long enough for the KKInstance cache to show the
/// claim (it then excludes the host itself), short enough that a claim deleted at once frees its host soon.
pub(crate) const RESERVATION_TTL: Duration = Duration::from_secs(30);

/// Hosts this manager is claiming (or just claimed) that its KKInstance cache may not show yet.
///
/// Concurrent KKMachine reconciles choose from the same cache. Without reservations they all tried the first
/// free host: one create won, the others failed and tried the next host, so n concurrent claims cost O(n²)
/// creates against the API server. A reservation only steers
/// the choice inside this process; creating the KKInstance is still the lock (another manager does not see
/// this process's reservations and still loses on the create).
pub(crate) struct Reservations {
    held: Mutex<HashMap<String, Instant>>,
    ttl: Duration,
}

impl Default for Reservations {
    fn default() -> Self {
        Self::with_ttl(RESERVATION_TTL)
    }
}

impl Reservations {
    /// Reservations that expire after `ttl`.
    pub(crate) fn with_ttl(ttl: Duration) -> Self {
        Self {
            held: Mutex::new(HashMap::new()),
            ttl,
        }
    }

    /// Reserve `key` (`<namespace>/<KKInstance name>`) unless a live reservation holds it. True when this
    /// call reserved it.
    pub(crate) fn reserve(&self, key: &str) -> bool {
        let Ok(mut h) = self.held.lock() else {
            return true;
        };
        let ttl = self.ttl;
        h.retain(|_, at| at.elapsed() < ttl);
        if h.contains_key(key) {
            return false;
        }
        h.insert(key.to_owned(), Instant::now());
        true
    }

    /// Drop the reservation of `key` (the claim failed: the host is free for another KKMachine).
    pub(crate) fn release(&self, key: &str) {
        if let Ok(mut h) = self.held.lock() {
            h.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserved_host_is_not_reserved_again_until_released_or_expired() {
        let r = Reservations::default();
        assert!(r.reserve("ns/c.node1"));
        assert!(
            !r.reserve("ns/c.node1"),
            "a second claim of the same host is steered elsewhere"
        );
        assert!(r.reserve("ns/c.node2"));
        assert!(r.reserve("other/c.node1"), "keys are per namespace");
        r.release("ns/c.node1");
        assert!(
            r.reserve("ns/c.node1"),
            "a failed claim frees the host for the next KKMachine"
        );
        let expired = Reservations::with_ttl(Duration::ZERO);
        assert!(expired.reserve("ns/c.node1"));
        assert!(
            expired.reserve("ns/c.node1"),
            "an expired reservation does not hold the host"
        );
    }
}
