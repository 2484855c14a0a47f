//! KKCluster, KKMachine, KKInstance and KKRemediation reconcilers and the manager that runs them.
//!
//! - [`reconcile`]: the skeleton every kind runs (filter, owner, pause, finalizer, status once by
//!   server-side apply, one error policy with a per-object backoff).
//! - [`kkcluster`]: owner Cluster, pause, inventory validation, host probes, endpoint, provisioned.
//! - [`kkmachine`]: the InfraMachine contract; claims a host by creating its KKInstance (the apiserver's
//!   AlreadyExists makes a claim atomic across managers), mirrors progress, patches the Node's providerID.
//! - [`kkinstance`]: the host state machine (`classify`), host work as background tasks keyed by UID;
//!   release, reset and quarantine.
//! - [`kkremediation`]: CAPI's external remediation: restart the services, reboot, then hand the Machine to its
//!   owner for replacement.
//! - [`inplace`]: CAPI's in-place update hooks (Runtime Extension over HTTPS): a worker's version bump done
//!   over SSH on the same host.
//! - [`context`]: what the reconcilers share (client, settings, caches, background-work registries).
//! - [`watches`]: one watch per kind shared by the controllers; each kind's own wiring is in its
//!   `watches` module.
//! - [`host_claims`]: one host is one host across namespaces, KKClusters and managers (Leases keyed by the
//!   host key and the address reached, taken before anything runs on a host).
//! - [`secrets`]: the by-name Secret check that wakes the KKInstances reading a changed Secret.
//! - [`bounded_body`]: the size bound on workload API responses.
//! - [`object_name`]: names read from fields, checked before they become part of a request path.
//! - [`manager`]: flags, logging, metrics/health endpoints, leader election, graceful shutdown.

#![warn(unreachable_pub)]

pub(crate) mod bounded_body;
pub(crate) mod capi;
pub(crate) mod conditions;
pub(crate) mod context;
pub(crate) mod error;
#[cfg(test)]
mod fixtures;
pub mod host_claims;
pub(crate) mod hosts;
pub(crate) mod inplace;
pub(crate) mod kkcluster;
pub(crate) mod kkinstance;
pub(crate) mod kkmachine;
pub(crate) mod kkremediation;
pub(crate) mod machine_host;
pub mod manager;
pub(crate) mod metrics;
pub(crate) mod object_name;
pub(crate) mod reconcile;
#[cfg(test)]
mod reconcile_tests;
pub(crate) mod secrets;
pub(crate) mod services;
mod tls_listener;
pub(crate) mod watches;
pub(crate) mod workload;
pub(crate) mod workload_kubeconfig;

pub(crate) use error::{Error, Result};
