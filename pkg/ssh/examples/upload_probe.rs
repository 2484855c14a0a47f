//! Upload probe: how long the first uploads on a fresh pooled connection take against later ones, and what
//! they cost the host's sshd (docs/benchmarks.md, "Uploads on a fresh connection"). Not a test; needs root.
//!
//! ```sh
//! cargo run --release -p capkk-sandbox --bin sandbox -- up --name upload-probe --hosts 10
//! cargo run --release -p capkk-ssh --example upload_probe -- upload-probe 10 3   # <sandbox> <hosts> <rounds>
//! cargo run --release -p capkk-sandbox --bin sandbox -- down --name upload-probe
//! ```
//!
//! Each round uses a new pool: it connects every host at once (`true`), then uploads 2.0, 1.8 and 1.5 MiB of
//! incompressible bytes to each host's `/tmp`, one after the other, and prints the mean time of each step over
//! the hosts; the last line is the median over rounds. With `PROBE_SS=1`, host 1's connection is sampled with
//! `ss -tmi` at both ends every 20 ms during its first upload, and its sshd's minor page faults and CPU ticks
//! are printed for every upload (stderr).

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

use capkk_executor::{ExecRequest, PutRequest};
use capkk_sandbox::Sandbox;
use capkk_ssh::{Auth, HostKeyPolicy, HostTarget, PoolConfig, SshPool};

fn random_file(path: &Path, len: usize, seed: u64) {
    let mut x = seed | 1;
    let mut buf = Vec::with_capacity(len);
    while buf.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf.extend_from_slice(&x.to_le_bytes());
    }
    buf.truncate(len);
    std::fs::write(path, buf).unwrap();
}

fn ss(netns: Option<&str>, filter: &str) -> String {
    let mut cmd = match netns {
        Some(ns) => {
            let mut c = std::process::Command::new("ip");
            c.args(["netns", "exec", ns, "ss"]);
            c
        }
        None => std::process::Command::new("ss"),
    };
    let out = cmd
        .args(["-tmiHn", "state", "established"])
        .args(filter.split(' '))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let queues = text.split_whitespace().take(2).collect::<Vec<_>>().join("/");
    let rest = text
        .split_whitespace()
        .filter(|w| {
            [
                "skmem",
                "cwnd:",
                "rcv_space:",
                "rcv_wnd:",
                "snd_wnd:",
                "rtt:",
                "notsent:",
            ]
            .iter()
            .any(|p| w.starts_with(p))
        })
        .collect::<Vec<_>>()
        .join(" ");
    format!("q={queues} {rest}")
}

/// minflt, utime+stime (ticks) summed over the sshd processes of a netns (excluding the listener).
fn sshd_stats(ns: &str) -> (u64, u64) {
    let out = std::process::Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .unwrap();
    let (mut flt, mut cpu) = (0, 0);
    for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let cmd = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if !stat.contains("(sshd)") || cmd.contains("listener") {
            continue;
        }
        let rest: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
        // fields after comm: state=0 ... minflt=7 majflt=9 utime=11 stime=12
        flt += rest[7].parse::<u64>().unwrap();
        cpu += rest[11].parse::<u64>().unwrap() + rest[12].parse::<u64>().unwrap();
    }
    (flt, cpu)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let sb = Sandbox::attach(&args[1]).unwrap();
    let n: usize = args[2].parse().unwrap();
    let rounds: usize = args[3].parse().unwrap();
    let dir = std::env::temp_dir().join("capkk-upload-probe");
    std::fs::create_dir_all(&dir).unwrap();
    let sizes = [2 * 1024 * 1024, 1843 * 1024, 1536 * 1024];
    let files: Vec<PathBuf> = sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let p = dir.join(format!("f{i}"));
            random_file(&p, len, 0x9e37_79b9 + i as u64);
            p
        })
        .collect();
    let files = Arc::new(files);
    let key = sb.credentials().ed25519_key.clone();
    let sample = std::env::var("PROBE_SS").is_ok();
    let mut all: Vec<Vec<f64>> = vec![Vec::new(); 1 + sizes.len()];
    for round in 0..rounds {
        let pool = SshPool::new(PoolConfig::default());
        let mut set = tokio::task::JoinSet::new();
        for (i, h) in sb.hosts().into_iter().take(n).enumerate() {
            let t = HostTarget::new(h.address(), "root", Auth::key_file(&key))
                .host_key(HostKeyPolicy::pinned(h.fingerprint()));
            let ex = pool.executor(&t);
            let files = files.clone();
            let (addr, ns) = (h.address().to_owned(), h.info.netns.clone());
            set.spawn(async move {
                let mut times = Vec::new();
                let s = Instant::now();
                ex.exec(ExecRequest::new("true")).await.unwrap();
                times.push(s.elapsed().as_secs_f64());
                for (k, f) in files.iter().enumerate() {
                    let dest = format!("/tmp/probe-{k}");
                    let s = Instant::now();
                    let sampler = (sample && i == 0 && k == 0).then(|| {
                        let (addr, ns) = (addr.clone(), ns.clone());
                        tokio::task::spawn_blocking(move || {
                            let mut lines = Vec::new();
                            let s = Instant::now();
                            while s.elapsed() < Duration::from_millis(1500) {
                                lines.push(format!(
                                    "{:4}ms C {} | S {}",
                                    s.elapsed().as_millis(),
                                    ss(None, &format!("dst {addr}:22")),
                                    ss(Some(&ns), "sport = :22"),
                                ));
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            lines
                        })
                    });
                    let before = (sample && i == 0).then(|| sshd_stats(&ns));
                    ex.put(PutRequest::file(&dest, f, 0o600)).await.unwrap();
                    times.push(s.elapsed().as_secs_f64());
                    if let Some(b) = before {
                        let a = sshd_stats(&ns);
                        eprintln!("upload {k}: sshd minflt +{} cpu +{} ticks", a.0 - b.0, a.1 - b.1);
                    }
                    if let Some(j) = sampler {
                        for l in j.await.unwrap() {
                            eprintln!("{l}");
                        }
                    }
                }
                times
            });
        }
        let mut per: Vec<Vec<f64>> = vec![Vec::new(); 1 + sizes.len()];
        while let Some(r) = set.join_next().await {
            for (k, t) in r.unwrap().into_iter().enumerate() {
                per[k].push(t);
            }
        }
        let mean = |v: &Vec<f64>| v.iter().sum::<f64>() / v.len() as f64;
        println!(
            "round {round}: connect {:.3}  up1 {:.3}  up2 {:.3}  up3 {:.3}  (mean over {n} hosts, s)",
            mean(&per[0]),
            mean(&per[1]),
            mean(&per[2]),
            mean(&per[3])
        );
        for (k, v) in per.iter().enumerate() {
            all[k].push(mean(v));
        }
        pool.close_all().await;
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    println!(
        "median: connect {:.3}  up1 {:.3}  up2 {:.3}  up3 {:.3}",
        med(&mut all[0]),
        med(&mut all[1]),
        med(&mut all[2]),
        med(&mut all[3])
    );
}
