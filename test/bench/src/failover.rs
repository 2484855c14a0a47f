//! `capkk-bench failover`: what the clients of an HA control plane see while the host holding its VIP is lost
//! (issue 41; the `ha` mode of `test/vm/real.sh`).
//!
//! `probe` samples three things from the machine, each on its own loop every `--interval-ms` and each request on
//! a fresh connection (what a new client sees, not a pooled connection to a dead host):
//! - `api`: `GET /readyz` through the cluster's endpoint, with the workload kubeconfig (its server is the VIP);
//! - `workload`: a workload URL (a NodePort Service of the workload) answering with the expected text;
//! - `vip`: which host answers for the VIP in the machine's neighbour table (`/proc/net/arp`: the MAC of the
//!   entry, named after the fleet's hosts): the VIP has moved for the clients on the bridge once that changes;
//! - `load`: the load average, once a second.
//!
//! Each sample is a line `EPOCH_SECONDS KIND ok|fail DETAIL` of its log. `report` reads a log and the time the
//! host was stopped and prints one row of the failover table: the VIP's new holder and when it took over, the
//! longest time between two answers of the API and of the workload, and how many samples went unanswered.

use std::{
    fmt::Write as _,
    io::Write as _,
    net::Ipv4Addr,
    path::PathBuf,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, bail};
use clap::Subcommand;
use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
    sync::mpsc,
};

/// Arguments of `capkk-bench failover`.
#[derive(clap::Args, Clone)]
pub struct FailoverArgs {
    #[command(subcommand)]
    cmd: FailoverCmd,
}

#[derive(Subcommand, Clone)]
enum FailoverCmd {
    /// Sample the API through the VIP, the workload and the VIP's holder into a log until stopped.
    Probe(ProbeArgs),
    /// One row of the failover table from a probe's log.
    Report(ReportArgs),
}

/// Arguments of `capkk-bench failover probe`.
#[derive(clap::Args, Clone)]
struct ProbeArgs {
    /// The workload cluster's kubeconfig: its server is the endpoint under test (the VIP).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// A URL of the workload (`http://ADDRESS:PORT/PATH`).
    #[arg(long)]
    workload: String,
    /// Text the workload's answer contains.
    #[arg(long, default_value = "hello from")]
    workload_expect: String,
    /// The VIP.
    #[arg(long)]
    vip: Ipv4Addr,
    /// A host that may hold the VIP, `NAME=MAC` (repeat).
    #[arg(long = "host", value_parser = parse_host)]
    hosts: Vec<(String, String)>,
    /// Milliseconds between two samples of one kind.
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
    /// Milliseconds a request may take before it counts as unanswered.
    #[arg(long, default_value_t = 1000)]
    timeout_ms: u64,
    /// The log (appended to).
    #[arg(long)]
    out: PathBuf,
    /// Stop after this many seconds (0: at SIGTERM or SIGINT).
    #[arg(long, default_value_t = 0)]
    duration_s: u64,
}

/// Arguments of `capkk-bench failover report`.
#[derive(clap::Args, Clone)]
struct ReportArgs {
    /// The probe's log.
    #[arg(long)]
    log: PathBuf,
    /// When the host holding the VIP was stopped (epoch seconds).
    #[arg(long)]
    since: f64,
    /// The row's label.
    #[arg(long, default_value = "failover")]
    label: String,
    /// Print the table's header first.
    #[arg(long)]
    header: bool,
    /// Fail (exit non-zero, naming why) unless the VIP moved and neither the API nor the workload went
    /// unanswered for longer than this many seconds.
    #[arg(long)]
    max_gap_s: Option<f64>,
    /// Print no row (with `--max-gap-s`: only the verdict's reason, when it fails).
    #[arg(long)]
    quiet: bool,
}

/// Run `capkk-bench failover`.
pub fn run(a: &FailoverArgs) -> anyhow::Result<()> {
    match &a.cmd {
        FailoverCmd::Probe(p) => {
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            rt.block_on(probe(p))
        }
        FailoverCmd::Report(r) => {
            let text =
                std::fs::read_to_string(&r.log).with_context(|| format!("reading {}", r.log.display()))?;
            let samples: Vec<Sample> = text.lines().filter_map(Sample::parse).collect();
            let f = Failover::from_samples(&samples, r.since)?;
            if !r.quiet {
                if r.header {
                    println!("{}", Failover::HEADER);
                }
                println!("{}", f.row(&r.label));
            }
            if let Some(max) = r.max_gap_s
                && let Err(why) = f.verdict(max)
            {
                // A finding, not a program error: said in one line, no backtrace.
                eprintln!("failover: {why}");
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

fn parse_host(s: &str) -> Result<(String, String), String> {
    let (name, mac) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: NAME=MAC expected"))?;
    if name.is_empty() || mac.split(':').count() != 6 {
        return Err(format!("{s:?}: NAME=MAC expected (MAC as aa:bb:cc:dd:ee:ff)"));
    }
    Ok((name.to_owned(), mac.to_ascii_lowercase()))
}

fn epoch() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// The kinds of samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Api,
    Workload,
    Vip,
    Load,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Api => "api",
            Kind::Workload => "workload",
            Kind::Vip => "vip",
            Kind::Load => "load",
        }
    }
}

/// One line of the log.
#[derive(Clone, Debug, PartialEq)]
struct Sample {
    /// When the sample started (epoch seconds).
    t: f64,
    kind: Kind,
    ok: bool,
    /// How long it took (seconds): an answer counts when it arrived, `t + dur` (a connection attempt started
    /// during the outage may be answered after the VIP moved).
    dur: f64,
    detail: String,
}

impl Sample {
    fn line(&self) -> String {
        let detail: String = self
            .detail
            .chars()
            .map(|c| if c.is_whitespace() { '_' } else { c })
            .take(120)
            .collect();
        format!(
            "{:.3} {} {} {:.3} {}",
            self.t,
            self.kind.name(),
            if self.ok { "ok" } else { "fail" },
            self.dur,
            if detail.is_empty() { "-" } else { detail.as_str() }
        )
    }

    fn parse(line: &str) -> Option<Sample> {
        let mut w = line.split_whitespace();
        let t = w.next()?.parse().ok()?;
        let kind = match w.next()? {
            "api" => Kind::Api,
            "workload" => Kind::Workload,
            "vip" => Kind::Vip,
            "load" => Kind::Load,
            _ => return None,
        };
        let ok = match w.next()? {
            "ok" => true,
            "fail" => false,
            _ => return None,
        };
        let dur = w.next()?.parse().ok()?;
        Some(Sample {
            t,
            kind,
            ok,
            dur,
            detail: w.next().unwrap_or("-").to_owned(),
        })
    }

    /// When its answer arrived (epoch seconds).
    fn end(&self) -> f64 {
        self.t + self.dur
    }
}

/// The holder of `vip` in `/proc/net/arp` text: `Some(mac)` for a complete entry, `None` for none or an
/// incomplete one.
fn arp_holder(arp: &str, vip: Ipv4Addr) -> Option<String> {
    let vip = vip.to_string();
    arp.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // IP address, HW type, Flags, HW address, Mask, Device; flag 0x2: the entry is complete.
        let flags = u32::from_str_radix(f.get(2)?.trim_start_matches("0x"), 16).ok()?;
        (f.first() == Some(&vip.as_str()) && flags & 0x2 != 0).then(|| f[3].to_ascii_lowercase())
    })
}

/// `http://HOST:PORT/PATH` split into `HOST:PORT` and `/PATH`.
fn split_url(url: &str) -> anyhow::Result<(String, String)> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url}: an http:// URL expected"))?;
    let (hostport, path) = rest.split_once('/').unwrap_or((rest, ""));
    if !hostport.contains(':') {
        bail!("{url}: HOST:PORT expected");
    }
    Ok((hostport.to_owned(), format!("/{path}")))
}

/// One plain HTTP/1.0 GET on a fresh connection: `Ok(first line of the body)` when the status is 200 and the
/// body contains `expect`.
async fn http_get(hostport: &str, path: &str, expect: &str) -> anyhow::Result<String> {
    let mut s = TcpStream::connect(hostport).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {hostport}\r\n\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200") {
        bail!("{status}");
    }
    if !body.contains(expect) {
        bail!("answer without {expect:?}");
    }
    Ok(body.lines().next().unwrap_or_default().to_owned())
}

async fn probe(a: &ProbeArgs) -> anyhow::Result<()> {
    let interval = Duration::from_millis(a.interval_ms);
    let timeout = Duration::from_millis(a.timeout_ms);
    let kubeconfig = Kubeconfig::read_from(&a.kubeconfig)
        .with_context(|| format!("reading {}", a.kubeconfig.display()))?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .context("the workload kubeconfig")?;
    config.connect_timeout = Some(timeout);
    config.read_timeout = Some(timeout);
    config.write_timeout = Some(timeout);
    let (hostport, path) = split_url(&a.workload)?;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.out)
        .with_context(|| format!("opening {}", a.out.display()))?;
    let (tx, mut rx) = mpsc::unbounded_channel::<Sample>();

    // Each request is a task of its own, started on the tick whether or not the last one has answered: a
    // request hanging for the whole timeout must not hold the next ones back (the gap's resolution is then
    // the interval, not the timeout).
    let api = {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            loop {
                tick.tick().await;
                if tx.is_closed() {
                    break;
                }
                let (tx, config) = (tx.clone(), config.clone());
                tokio::spawn(async move {
                    let t = epoch();
                    // A client of its own each time: a fresh connection through the VIP.
                    let r = tokio::time::timeout(timeout * 2, async {
                        let client = Client::try_from(config)?;
                        let req = http::Request::get("/readyz").body(Vec::new())?;
                        anyhow::Ok(client.request_text(req).await?)
                    })
                    .await;
                    let (ok, detail) = match r {
                        Ok(Ok(body)) => (body.trim() == "ok", body),
                        Ok(Err(e)) => (false, e.to_string()),
                        Err(_) => (false, "timeout".into()),
                    };
                    let dur = epoch() - t;
                    let _ = tx.send(Sample {
                        t,
                        kind: Kind::Api,
                        ok,
                        dur,
                        detail,
                    });
                });
            }
        })
    };
    let workload = {
        let tx = tx.clone();
        let expect = a.workload_expect.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            loop {
                tick.tick().await;
                if tx.is_closed() {
                    break;
                }
                let (tx, hostport, path, expect) =
                    (tx.clone(), hostport.clone(), path.clone(), expect.clone());
                tokio::spawn(async move {
                    let t = epoch();
                    let (ok, detail) =
                        match tokio::time::timeout(timeout, http_get(&hostport, &path, &expect)).await {
                            Ok(Ok(first)) => (true, first),
                            Ok(Err(e)) => (false, e.to_string()),
                            Err(_) => (false, "timeout".into()),
                        };
                    let dur = epoch() - t;
                    let _ = tx.send(Sample {
                        t,
                        kind: Kind::Workload,
                        ok,
                        dur,
                        detail,
                    });
                });
            }
        })
    };
    let vip = {
        let tx = tx.clone();
        let (vip, hosts) = (a.vip, a.hosts.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            loop {
                tick.tick().await;
                let t = epoch();
                let arp = tokio::fs::read_to_string("/proc/net/arp")
                    .await
                    .unwrap_or_default();
                let (ok, detail) = match arp_holder(&arp, vip) {
                    Some(mac) => match hosts.iter().find(|(_, m)| *m == mac) {
                        Some((name, _)) => (true, name.clone()),
                        None => (false, format!("unknown-mac-{mac}")),
                    },
                    None => (false, "no-entry".into()),
                };
                if tx
                    .send(Sample {
                        t,
                        kind: Kind::Vip,
                        ok,
                        dur: 0.0,
                        detail,
                    })
                    .is_err()
                {
                    break;
                }
            }
        })
    };
    let load = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let l = tokio::fs::read_to_string("/proc/loadavg")
                .await
                .unwrap_or_default();
            let one = l.split_whitespace().next().unwrap_or("?").to_owned();
            if tx
                .send(Sample {
                    t: epoch(),
                    kind: Kind::Load,
                    ok: true,
                    dur: 0.0,
                    detail: one,
                })
                .is_err()
            {
                break;
            }
        }
    });

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let deadline = async {
        if a.duration_s == 0 {
            std::future::pending::<()>().await;
        }
        tokio::time::sleep(Duration::from_secs(a.duration_s)).await;
    };
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            s = rx.recv() => match s {
                Some(s) => {
                    writeln!(file, "{}", s.line())?;
                    file.flush()?;
                }
                None => break,
            },
            _ = &mut deadline => break,
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    for h in [api, workload, vip, load] {
        h.abort();
    }
    while let Ok(s) = rx.try_recv() {
        writeln!(file, "{}", s.line())?;
    }
    file.flush()?;
    Ok(())
}

/// The answers of one kind around the failure.
#[derive(Clone, Debug, PartialEq)]
struct Gap {
    /// The longest time between two answers' arrivals, from the last answer before the failure on (seconds);
    /// to the log's end when no answer came back.
    longest_s: f64,
    /// Whether an answer came after the failure.
    back: bool,
    /// Samples from the failure on that went unanswered.
    unanswered: usize,
    /// Samples from the failure on.
    samples: usize,
}

impl Gap {
    fn of(samples: &[Sample], kind: Kind, since: f64) -> anyhow::Result<Gap> {
        let all: Vec<&Sample> = samples.iter().filter(|s| s.kind == kind).collect();
        // Answers by the time they arrived, from the last one before the failure on.
        let mut arrived: Vec<f64> = all.iter().filter(|s| s.ok).map(|s| s.end()).collect();
        arrived.sort_by(f64::total_cmp);
        let Some(first) = arrived.iter().rposition(|t| *t < since) else {
            bail!(
                "no answered {} sample before the failure at {since:.3}",
                kind.name()
            );
        };
        let arrived = &arrived[first..];
        let back = arrived.iter().any(|t| *t >= since);
        let mut longest = arrived.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
        if !back {
            let end = all.iter().map(|s| s.end()).fold(since, f64::max);
            longest = longest.max(end - arrived[arrived.len() - 1]);
        }
        let after: Vec<&&Sample> = all.iter().filter(|s| s.t >= since).collect();
        Ok(Gap {
            longest_s: longest,
            back,
            unanswered: after.iter().filter(|s| !s.ok).count(),
            samples: after.len(),
        })
    }

    fn cell(&self) -> String {
        format!(
            "{:.1}{}",
            self.longest_s,
            if self.back { "" } else { " (not back)" }
        )
    }
}

/// One failover, from a probe's log.
#[derive(Clone, Debug, PartialEq)]
struct Failover {
    holder_before: String,
    holder_after: Option<String>,
    /// Seconds from the failure to the first sample naming another holder.
    vip_moved_s: Option<f64>,
    api: Gap,
    workload: Gap,
    /// The load average's range over the window.
    load: (f64, f64),
}

impl Failover {
    const HEADER: &'static str = "| run | VIP holder | VIP moved after (s) | API longest gap (s) | API unanswered | workload longest gap (s) | workload unanswered | load |\n|---|---|---|---|---|---|---|---|";

    fn from_samples(samples: &[Sample], since: f64) -> anyhow::Result<Failover> {
        let holder_before = samples
            .iter()
            .rev()
            .find(|s| s.kind == Kind::Vip && s.ok && s.t < since)
            .map(|s| s.detail.clone())
            .context("no VIP holder seen before the failure")?;
        let moved = samples
            .iter()
            .find(|s| s.kind == Kind::Vip && s.ok && s.t >= since && s.detail != holder_before);
        let loads: Vec<f64> = samples
            .iter()
            .filter(|s| s.kind == Kind::Load && s.t >= since - 5.0)
            .filter_map(|s| s.detail.parse().ok())
            .collect();
        Ok(Failover {
            holder_after: moved.map(|s| s.detail.clone()),
            vip_moved_s: moved.map(|s| s.t - since),
            api: Gap::of(samples, Kind::Api, since)?,
            workload: Gap::of(samples, Kind::Workload, since)?,
            load: (
                loads.iter().copied().fold(f64::INFINITY, f64::min),
                loads.iter().copied().fold(0.0, f64::max),
            ),
            holder_before,
        })
    }

    /// `Ok` when the VIP moved and the API and the workload each answered again within `max_gap_s`.
    fn verdict(&self, max_gap_s: f64) -> Result<(), String> {
        let mut why = Vec::new();
        if self.vip_moved_s.is_none() {
            why.push(format!("the VIP never left {}", self.holder_before));
        }
        for (what, g) in [("the API", &self.api), ("the workload", &self.workload)] {
            if !g.back {
                why.push(format!("{what} never answered again"));
            } else if g.longest_s > max_gap_s {
                why.push(format!(
                    "{what} went unanswered for {:.1} s (at most {max_gap_s} s allowed)",
                    g.longest_s
                ));
            }
        }
        if why.is_empty() {
            Ok(())
        } else {
            Err(why.join("; "))
        }
    }

    fn row(&self, label: &str) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "| {label} | {} → {} | {} | {} | {}/{} | {} | {}/{} | {} |",
            self.holder_before,
            self.holder_after.as_deref().unwrap_or("(none)"),
            self.vip_moved_s
                .map_or_else(|| "not moved".to_owned(), |t| format!("{t:.1}")),
            self.api.cell(),
            self.api.unanswered,
            self.api.samples,
            self.workload.cell(),
            self.workload.unanswered,
            self.workload.samples,
            if self.load.0.is_finite() {
                format!("{:.1}-{:.1}", self.load.0, self.load.1)
            } else {
                "?".to_owned()
            }
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(t: f64, kind: Kind, ok: bool, detail: &str) -> Sample {
        Sample {
            t,
            kind,
            ok,
            dur: 0.0,
            detail: detail.into(),
        }
    }

    /// A failover at t=100: cp-1 held the VIP, cp-2 takes it at 103.2; the API is unanswered from 100.0 to
    /// 103.4; the workload never misses.
    fn log() -> Vec<Sample> {
        let mut v = Vec::new();
        for i in 0..100 {
            // Tenths of a second from 95.0; by index, so that no float edge decides a sample's side.
            let t = 95.0 + f64::from(i) / 10.0;
            v.push(s(t, Kind::Vip, true, if i < 82 { "cp-1" } else { "cp-2" }));
            v.push(s(t, Kind::Api, !(50..84).contains(&i), "ok"));
            v.push(s(t, Kind::Workload, true, "hello"));
            if i % 10 == 0 {
                v.push(s(t, Kind::Load, true, "2.5"));
            }
        }
        v
    }

    #[test]
    fn a_sample_survives_its_own_line() {
        let x = s(
            1796619648.41,
            Kind::Api,
            false,
            "connection refused (os error 111)",
        );
        let y = Sample::parse(&x.line()).unwrap();
        assert_eq!(y.kind, Kind::Api);
        assert!(!y.ok);
        assert_eq!(y.detail, "connection_refused_(os_error_111)");
        assert!((y.t - x.t).abs() < 0.001);
        assert_eq!(Sample::parse("garbage line"), None);
        let mut z = x.clone();
        z.dur = 1.25;
        assert!((Sample::parse(&z.line()).unwrap().end() - (x.t + 1.25)).abs() < 0.001);
    }

    #[test]
    fn the_report_names_the_new_holder_and_the_longest_gaps() {
        let f = Failover::from_samples(&log(), 100.0).unwrap();
        assert_eq!(f.holder_before, "cp-1");
        assert_eq!(f.holder_after.as_deref(), Some("cp-2"));
        assert!((f.vip_moved_s.unwrap() - 3.2).abs() < 0.06, "{f:?}");
        // Last answer at 99.9, next at 103.4.
        assert!((f.api.longest_s - 3.5).abs() < 0.06, "{f:?}");
        assert!(f.api.back);
        assert_eq!(f.api.unanswered, 34);
        assert!((f.workload.longest_s - 0.1).abs() < 0.01);
        assert_eq!(f.workload.unanswered, 0);
        let row = f.row("containers 1");
        assert!(
            row.starts_with("| containers 1 | cp-1 → cp-2 | 3.2 | 3.5 | 34/"),
            "{row}"
        );
    }

    #[test]
    fn an_answer_counts_when_it_arrived_not_when_it_was_asked() {
        // The workload's samples from 100.0 to 101.9 hang; the one asked at 100.2 is answered 1.8 s later (a
        // connection attempt answered once the VIP moved): the workload went 2.1 s without an answer (99.9 ->
        // 102.0), not 0.3 s.
        let v: Vec<Sample> = log()
            .into_iter()
            .filter(|x| {
                !(x.kind == Kind::Workload && x.t >= 100.0 && x.t < 102.0 && (x.t - 100.2).abs() > 0.01)
            })
            .map(|mut x| {
                if x.kind == Kind::Workload && (x.t - 100.2).abs() < 0.01 {
                    x.dur = 1.8;
                }
                x
            })
            .collect();
        let f = Failover::from_samples(&v, 100.0).unwrap();
        assert!((f.workload.longest_s - 2.1).abs() < 0.01, "{f:?}");
        assert!(f.workload.back);
    }

    #[test]
    fn the_verdict_passes_a_short_failover_and_names_every_gap_too_long() {
        let f = Failover::from_samples(&log(), 100.0).unwrap();
        assert_eq!(f.verdict(5.0), Ok(()));
        let e = f.verdict(3.0).unwrap_err();
        assert!(e.contains("the API went unanswered for 3.5 s"), "{e}");
        assert!(!e.contains("workload"), "{e}");
    }

    #[test]
    fn an_api_that_never_answers_again_is_reported_as_not_back() {
        let v: Vec<Sample> = log()
            .into_iter()
            .map(|mut x| {
                if x.kind == Kind::Api && x.t >= 100.0 {
                    x.ok = false;
                }
                x
            })
            .collect();
        let f = Failover::from_samples(&v, 100.0).unwrap();
        assert!(!f.api.back);
        assert!(f.api.longest_s > 4.9, "{f:?}");
        assert!(f.row("x").contains("(not back)"));
        assert!(
            f.verdict(60.0)
                .unwrap_err()
                .contains("the API never answered again")
        );
    }

    #[test]
    fn a_vip_that_stays_put_is_reported_as_not_moved() {
        let v: Vec<Sample> = log()
            .into_iter()
            .filter(|x| !(x.kind == Kind::Vip && x.detail == "cp-2"))
            .collect();
        let f = Failover::from_samples(&v, 100.0).unwrap();
        assert_eq!(f.vip_moved_s, None);
        assert!(f.row("x").contains("| not moved |"));
        assert!(f.verdict(60.0).unwrap_err().contains("the VIP never left cp-1"));
    }

    #[test]
    fn a_log_without_answers_before_the_failure_is_an_error_not_a_row() {
        let v: Vec<Sample> = log().into_iter().filter(|x| x.t >= 100.0).collect();
        assert!(Failover::from_samples(&v, 100.0).is_err());
    }

    #[test]
    fn the_vips_holder_is_read_from_a_complete_neighbour_entry_only() {
        let arp = "IP address       HW type     Flags       HW address            Mask     Device\n\
                   198.18.7.250     0x1         0x2         52:54:00:AB:CD:01     *        kkbr7\n\
                   198.18.7.11      0x1         0x0         00:00:00:00:00:00     *        kkbr7\n";
        assert_eq!(
            arp_holder(arp, "198.18.7.250".parse().unwrap()).as_deref(),
            Some("52:54:00:ab:cd:01")
        );
        assert_eq!(arp_holder(arp, "198.18.7.11".parse().unwrap()), None);
        assert_eq!(arp_holder(arp, "198.18.7.12".parse().unwrap()), None);
    }

    #[test]
    fn urls_and_hosts_are_checked_before_the_probe_starts() {
        assert_eq!(
            split_url("http://198.18.7.14:30080/").unwrap(),
            ("198.18.7.14:30080".into(), "/".into())
        );
        assert_eq!(split_url("http://198.18.7.14:30080").unwrap().1, "/".to_owned());
        assert!(split_url("https://x:1/").is_err());
        assert!(split_url("http://x/").is_err());
        assert_eq!(
            parse_host("cp-1=52:54:00:AB:CD:01").unwrap(),
            ("cp-1".into(), "52:54:00:ab:cd:01".into())
        );
        assert!(parse_host("cp-1").is_err());
        assert!(parse_host("cp-1=52:54").is_err());
    }
}
