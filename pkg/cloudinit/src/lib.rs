//! Bootstrap data (cloud-config) to a typed, ordered plan. No I/O.

/// Why bootstrap data could not be turned into a plan.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Placeholder until the parser lands.
    #[error("invalid bootstrap data: {0}")]
    Invalid(String),
}
