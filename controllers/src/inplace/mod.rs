//! In-place upgrades through CAPI's in-place update extension (CAPI v1.14, feature gates `InPlaceUpdates` and
//! `RuntimeSDK`): the manager serves the Runtime Extension hooks `CanUpdateMachine`, `CanUpdateMachineSet`
//! and `UpdateMachine` over HTTPS (`--runtime-extension-bind-address`, off by default), registered by the
//! `ExtensionConfig` in `config/runtime-extension/`. See docs/upgrades.md.
//!
//! - [`decide`]: what can be done in place (a worker's version bump of at most one minor), pure.
//! - [`update`]: `UpdateMachine` as a background task per Machine over SSH.
//! - [`server`]: discovery, routing, TLS.

pub(crate) mod decide;
pub(crate) mod server;
pub(crate) mod update;
