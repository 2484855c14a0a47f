//! `capkk-bench`: side-by-side provisioning benchmark (see docs/benchmarks.md).

fn main() {}
