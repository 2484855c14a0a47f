//! Benchmark results as data. Every benchmark writes its numbers to a JSON file in `--out` (beside its markdown
//! table) together with the conditions they were measured under, so that the tables in docs/benchmarks.md and
//! the plots of `make bench-plots` (hack/bench-plots.py, reading the copies kept in docs/bench/) come from the
//! same numbers.

use std::{collections::BTreeMap, path::Path, process::Command, time::SystemTime};

use serde::Serialize;
use serde_json::{Value, json};

use crate::controller::pct;

/// The format of the results files; bumped when a field changes meaning.
pub const SCHEMA: u32 = 1;

/// What every results file starts with.
#[derive(Clone, Debug, Serialize)]
pub struct Meta {
    /// Which benchmark: `ssh`, `claim`, `provision`, `real-vm` or `node-ready`.
    pub bench: &'static str,
    /// [`SCHEMA`].
    pub schema: u32,
    /// When the measurement started, Unix epoch seconds.
    pub started_epoch_s: f64,
    /// `git describe --always --dirty` of the working tree the bench ran from (empty outside a checkout).
    pub commit: String,
    /// Cores, CPU model, memory and kernel.
    pub machine: String,
    /// Load average (1, 5, 15 minutes) when the measurement started.
    pub load_start: String,
    /// Load average when it ended.
    pub load_end: String,
}

impl Meta {
    /// The conditions of a measurement of `bench` that started at `started` under `load_start`; the end load
    /// is read now.
    pub fn new(bench: &'static str, started: SystemTime, load_start: &str) -> Self {
        Self {
            bench,
            schema: SCHEMA,
            started_epoch_s: epoch(started),
            commit: commit(),
            machine: crate::machine(),
            load_start: load_start.to_owned(),
            load_end: crate::load_average(),
        }
    }
}

/// Seconds since the Unix epoch.
pub fn epoch(t: SystemTime) -> f64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

fn commit() -> String {
    Command::new("git")
        .args(["describe", "--always", "--dirty"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// Percentiles of per-machine values, and the values themselves.
pub fn distribution(values: &BTreeMap<String, f64>) -> Value {
    let finite: BTreeMap<String, f64> = values
        .iter()
        .filter(|(_, v)| v.is_finite())
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    let mean = if finite.is_empty() {
        None
    } else {
        Some(finite.values().sum::<f64>() / finite.len() as f64)
    };
    let p = |q: f64| Some(pct(&finite, q)).filter(|v| v.is_finite());
    json!({
        "count": finite.len(),
        "p50": p(0.5),
        "p90": p(0.9),
        "max": p(1.0),
        "mean": mean,
        "values": finite,
    })
}

/// `{"meta": meta, ...body}` pretty-printed to `path`.
pub fn write(path: &Path, meta: &Meta, body: Value) -> anyhow::Result<()> {
    let mut doc = serde_json::Map::new();
    doc.insert("meta".into(), serde_json::to_value(meta)?);
    if let Value::Object(fields) = body {
        doc.extend(fields);
    }
    crate::hosts::write(path, &serde_json::to_vec_pretty(&Value::Object(doc))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_distribution_gives_percentiles_and_keeps_the_values_but_not_the_missing_ones() {
        let v: BTreeMap<String, f64> = [("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", f64::NAN)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let d = distribution(&v);
        assert_eq!(d["count"], 3);
        assert_eq!(d["mean"], 2.0);
        assert_eq!(d["values"]["b"], 2.0);
        assert!(d["values"].get("d").is_none());
    }

    #[test]
    fn no_values_give_no_percentiles() {
        let d = distribution(&BTreeMap::new());
        assert_eq!(d["count"], 0);
        assert!(d["p50"].is_null() && d["mean"].is_null());
    }
}
