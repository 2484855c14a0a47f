//! Tools the make targets and scripts run, with their logic here so that it is tested in Rust:
//!
//! - [`gaps`]: the longest silences of a run's output (`longest-gap`, issue 27's "no silent minute").

pub mod gaps;
