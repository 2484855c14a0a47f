//! `capkk-chaos`: seeded fault campaigns against the provider on real test hosts. A campaign drives a cluster
//! through its lifecycle (create, scale down, scale up, delete, in a loop) on the local management plane while
//! it injects real faults (the manager SIGKILLed, the API server frozen, a host's SSH cut or its sshd stopped,
//! a node container restarted) at moments drawn from a seed, and checks the invariants after each
//! ([`invariants`]). The decisions are pure and unit-tested here; the driver (`src/bin/capkk-chaos.rs`) does
//! the I/O. How to run it and a run's report: docs/reliability.md.

pub mod env;
pub mod invariants;
pub mod plan;
pub mod report;
pub mod rng;
