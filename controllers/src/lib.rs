//! KKCluster, KKMachine and KKInstance reconcilers and the manager that runs them.
//!
//! - [`reconcile`]: the skeleton every kind runs (filter, owner, pause, finalizer, status once by
//!   server-side apply, one error policy with a per-object backoff).
//! - [`kkcluster`]: owner Cluster, pause, inventory validation, host probes, endpoint, provisioned.
//! - [`kkmachine`]: the InfraMachine contract; claims a host by creating its KKInstance (the apiserver's
//!   AlreadyExists makes a claim atomic across managers), mirrors progress, patches the Node's providerID.
//! - [`kkinstance`]: the host state machine (`classify`), host work as background tasks keyed by UID;
//!   release, reset and quarantine.
//! - [`context`]: what the reconcilers share (client, settings, caches, background-work registries).
//! - [`watches`]: one watch per kind shared by the controllers; each kind's own wiring is in its
//!   `watches` module.
//! - [`secrets`]: the metadata-only Secret watch that wakes the KKInstances reading a changed Secret.
//! - [`manager`]: flags, logging, metrics/health endpoints, leader election, graceful shutdown.

pub mod capi;
pub mod conditions;
pub mod context;
pub mod error;
#[cfg(test)]
mod fixtures;
pub mod hosts;
pub mod kkcluster;
pub mod kkinstance;
pub mod kkmachine;
pub mod manager;
pub mod metrics;
pub mod reconcile;
#[cfg(test)]
mod reconcile_tests;
pub mod secrets;
pub mod services;
pub mod watches;
pub mod workload;
pub mod workload_kubeconfig;

pub use error::{Error, Result};
