//! Annotations the controllers keep on KKInstances. They live in metadata (not status) so they survive a
//! manager restart and `clusterctl move`.

/// Set by the KKMachine controller on its KKInstance when the Machine goes away: reset the host, then free it.
pub const RELEASE: &str = "kkinstance.infrastructure.cluster.x-k8s.io/release";
/// Comma-separated phases that finished on the host (bootstrap, repository, binary, containermanager,
/// provisioning). A restarted manager skips them.
pub const COMPLETED_PHASES: &str = "kkinstance.infrastructure.cluster.x-k8s.io/completed-phases";
/// Set once host work started (the host may be dirty and needs a reset before it is freed).
pub const TOUCHED: &str = "kkinstance.infrastructure.cluster.x-k8s.io/touched";
/// Set when the host was reset successfully.
pub const RESET_DONE: &str = "kkinstance.infrastructure.cluster.x-k8s.io/reset-done";
/// RFC 3339 time since which a release has failed to reach the host.
pub const UNREACHABLE_SINCE: &str = "kkinstance.infrastructure.cluster.x-k8s.io/unreachable-since";
/// The condition reason of a terminal host-work failure. Host work does not start again until the retry
/// annotation is set (`kkinstance.infrastructure.cluster.x-k8s.io/retry`), whatever else changes; for
/// `CredentialsUnavailable` the Secret watch sets it when a Secret the KKInstance reads changes
/// ([`crate::secrets`]).
pub const FAILED: &str = "kkinstance.infrastructure.cluster.x-k8s.io/failed";
