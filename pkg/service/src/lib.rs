//! Host services: everything the provider does *on a host*, through [`capkk_executor::Executor`] only.
//!
//! Order on create: [`bootstrap`] → [`binary`] → [`containermanager`] → [`repository`] (alongside it, the
//! [`images`] pre-pull) → [`provisioning`];
//! on a control-plane host of a cluster whose endpoint the provider serves, before provisioning:
//! [`loadbalancer`]; on delete: [`bootstrap::reset`](bootstrap) and [`loadbalancer::remove`]; on an unhealthy Node: [`remediation`]; on a version change done in
//! place: [`upgrade`]. Each service reports
//! every step to a [`journal::Progress`] sink (name, exit code, duration, redacted output tail). This crate
//! never talks to Kubernetes.

pub mod binary;
pub mod bootstrap;
pub mod components;
pub mod containermanager;
pub mod error;
pub mod facts;
#[cfg(test)]
mod golden;
pub mod host;
pub mod images;
pub mod journal;
pub mod loadbalancer;
#[cfg(test)]
mod prop_render;
pub mod provisioning;
pub mod remediation;
pub mod repository;
#[cfg(test)]
mod stand_ins;
pub mod upgrade;

pub use error::{Error, Result};
