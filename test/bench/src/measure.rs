//! Controller-side cost: CPU seconds (self + every descendant, including daemonized ssh masters) and peak RSS.
//!
//! A driver process becomes a child subreaper, so `ControlPersist` masters that fork into the background are
//! re-parented to it; at the end it stops its remaining descendants (its own processes) and reaps them, after
//! which `RUSAGE_SELF + RUSAGE_CHILDREN` covers everything the method ran on the controller. Peak RSS is the
//! sum of `VmRSS` over the driver's process tree, sampled every 20 ms from the parent (so the sampling itself
//! costs the measured process nothing).

use std::{
    path::Path,
    process::{Child, ExitStatus},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    thread,
    time::{Duration, Instant},
};

use nix::{
    errno::Errno,
    sys::{
        resource::{UsageWho, getrusage},
        signal::{Signal, kill},
        wait::{WaitPidFlag, WaitStatus, waitpid},
    },
    unistd::Pid,
};
use serde::{Deserialize, Serialize};

/// CPU and memory of the calling process and its reaped descendants.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Usage {
    /// User CPU seconds.
    pub user_s: f64,
    /// System CPU seconds.
    pub sys_s: f64,
    /// Largest single-process max RSS (KiB) among self and reaped descendants.
    pub max_rss_kib: u64,
}

impl Usage {
    /// Total CPU seconds.
    pub fn cpu_s(&self) -> f64 {
        self.user_s + self.sys_s
    }
}

fn secs(tv: nix::sys::time::TimeVal) -> f64 {
    tv.tv_sec() as f64 + tv.tv_usec() as f64 / 1e6
}

/// `RUSAGE_SELF + RUSAGE_CHILDREN` now.
pub fn usage() -> Usage {
    let mut u = Usage::default();
    for who in [UsageWho::RUSAGE_SELF, UsageWho::RUSAGE_CHILDREN] {
        if let Ok(r) = getrusage(who) {
            u.user_s += secs(r.user_time());
            u.sys_s += secs(r.system_time());
            u.max_rss_kib = u.max_rss_kib.max(r.max_rss() as u64);
        }
    }
    u
}

/// Make this process the reaper of its orphaned descendants.
pub fn become_subreaper() -> anyhow::Result<()> {
    nix::sys::prctl::set_child_subreaper(true)?;
    Ok(())
}

/// Direct children of `pid` (all threads).
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        if let Ok(s) = std::fs::read_to_string(t.path().join("children")) {
            out.extend(s.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    out
}

/// Stop this process's remaining children (SIGTERM, then SIGKILL after `grace`) and reap every descendant
/// that has been re-parented here. Returns how many were reaped.
pub fn reap_all(grace: Duration) -> usize {
    let me = std::process::id();
    let deadline = Instant::now() + grace;
    let mut killed = false;
    let mut reaped = 0;
    for c in children_of(me) {
        let _ = kill(Pid::from_raw(c as i32), Signal::SIGTERM);
    }
    loop {
        match waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {
                if !killed && Instant::now() > deadline {
                    for c in children_of(me) {
                        let _ = kill(Pid::from_raw(c as i32), Signal::SIGKILL);
                    }
                    killed = true;
                }
                thread::sleep(Duration::from_millis(10));
            }
            Ok(_) => reaped += 1,
            Err(Errno::ECHILD) => return reaped,
            Err(Errno::EINTR) => {}
            Err(_) => return reaped,
        }
    }
}

fn vm_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Sum of VmRSS over `root` and all its descendants, in KiB.
pub fn tree_rss_kib(root: u32) -> u64 {
    let mut total = 0;
    let mut stack = vec![root];
    let mut seen = 0;
    while let Some(p) = stack.pop() {
        seen += 1;
        if seen > 100_000 {
            break;
        }
        total += vm_rss_kib(p);
        stack.extend(children_of(p));
    }
    total
}

/// CPU seconds (user + system, including reaped children) of `root` and every live descendant: everything
/// the tree has spent that has not been handed to a reaper outside it. Used for the hosts' side (sshd and
/// what it ran), read before and after a run.
pub fn tree_cpu_s(root: u32) -> f64 {
    let tck = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let mut ticks = 0u64;
    let mut stack = vec![root];
    let mut seen = 0;
    while let Some(p) = stack.pop() {
        seen += 1;
        if seen > 100_000 {
            break;
        }
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat"))
            && let Some((_, rest)) = stat.rsplit_once(')')
        {
            let f: Vec<&str> = rest.split_whitespace().collect();
            // After the command: state(3) ... utime(14) stime(15) cutime(16) cstime(17).
            ticks += f
                .get(11..15)
                .map_or(0, |v| v.iter().filter_map(|x| x.parse::<u64>().ok()).sum());
        }
        stack.extend(children_of(p));
    }
    ticks as f64 / tck
}

/// Samples the process tree of a PID until stopped; keeps the peak.
pub struct PeakSampler {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    handle: Option<thread::JoinHandle<()>>,
}

impl PeakSampler {
    /// Start sampling `root`'s tree every `every`.
    pub fn start(root: u32, every: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let (s, p) = (stop.clone(), peak.clone());
        let handle = thread::spawn(move || {
            while !s.load(Ordering::Relaxed) && Path::new(&format!("/proc/{root}")).exists() {
                p.fetch_max(tree_rss_kib(root), Ordering::Relaxed);
                thread::sleep(every);
            }
        });
        Self {
            stop,
            peak,
            handle: Some(handle),
        }
    }

    /// Stop and return the peak in KiB.
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.peak.load(Ordering::Relaxed)
    }
}

/// Median of a non-empty slice (mean of the two middle values for an even count).
pub fn median(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Wait for `child` until `deadline`, polling every 20 ms (the drivers' measurements read their own clocks);
/// past it, kill and reap the child. `None`: it did not finish in time.
pub fn wait_until(child: &mut Child, deadline: Instant) -> std::io::Result<Option<ExitStatus>> {
    loop {
        if let Some(s) = child.try_wait()? {
            return Ok(Some(s));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_unsorted() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn tree_cpu_grows_with_work_of_a_reaped_child() {
        let me = std::process::id();
        let before = tree_cpu_s(me);
        let status = std::process::Command::new("sh")
            .arg("-c")
            .arg("i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done")
            .status()
            .unwrap();
        assert!(status.success());
        let after = tree_cpu_s(me);
        assert!(after > before, "before {before} after {after}");
    }

    #[test]
    fn tree_rss_counts_a_child() {
        let mut child = std::process::Command::new("sleep").arg("5").spawn().unwrap();
        let me = std::process::id();
        let mine = vm_rss_kib(me);
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut tree = 0;
        while Instant::now() < deadline {
            tree = tree_rss_kib(me);
            if tree > mine {
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(mine > 0);
        assert!(
            tree > mine,
            "tree {tree} KiB should exceed self {mine} KiB while a child lives"
        );
    }
}
