//! Tools the make targets and scripts run, with their logic here so that it is tested in Rust:
//!
//! - [`gaps`]: the longest silences of a run's output (`longest-gap`, issue 27's "no silent minute").
//! - [`sbom`]: the release's CycloneDX SBOM from `cargo metadata` and `Cargo.lock` (`cyclonedx-sbom`).
//! - [`parallel`]: test binaries run several at a time (`parallel-tests`, `make test-integration
//!   INTEGRATION_JOBS=N`).

pub mod gaps;
pub mod parallel;
pub mod sbom;

/// What the tools' logic can fail on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `cargo metadata`'s output lacks what an SBOM needs (the field is named).
    #[error("cargo metadata: {0}")]
    Metadata(String),
    /// The package to describe is not a member of the workspace.
    #[error("{0} is not a package of the workspace")]
    NotAMember(String),
    /// A dependency of the package has no entry in Cargo.lock (the lock file is stale).
    #[error("{0} is not in Cargo.lock (run cargo with --locked to see why)")]
    NotLocked(String),
}
