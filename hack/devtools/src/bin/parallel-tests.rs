//! `parallel-tests`: builds a cargo test selection once and runs its test binaries several at a time, each
//! binary's output in its own file, printed whole when it ends; then a summary (binary, result, seconds). Exits
//! non-zero when any binary failed or could not run. What binaries share when they run at once and how that is
//! handled: `capkk_devtools::parallel`.
//!
//! ```sh
//! parallel-tests --jobs 3 --log-dir target/test-logs/integration -- $(hack/test-targets.sh integration)
//! ```
//! (what `make test-integration INTEGRATION_JOBS=3` runs).

use std::{
    collections::BTreeMap,
    fs::File,
    io::Write,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, Result, bail};
use capkk_devtools::parallel::{
    MUST_RUN_ALONE, Outcome, Step, TestBinary, executables, format_times, may_start, parse_times, plan,
    selected_tests, summary,
};
use clap::Parser;

/// Run the test binaries of a cargo test selection N at a time.
#[derive(Parser)]
#[command(name = "parallel-tests")]
struct Cli {
    /// How many binaries run at a time.
    #[arg(long, default_value_t = 2)]
    jobs: usize,
    /// Where each binary's output goes (`<binary>.log`), and the times of the last run (`times.tsv`).
    #[arg(long)]
    log_dir: PathBuf,
    /// The selection, as for `cargo test --workspace` (`--test NAME`...).
    #[arg(last = true, required = true)]
    selection: Vec<String>,
}

/// A line when nothing was printed for this long (no silent minute).
const HEARTBEAT: Duration = Duration::from_secs(30);

struct Running {
    name: String,
    child: Child,
    log: PathBuf,
    start: Instant,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let t0 = Instant::now();
    let built = build(&cli.selection)?;
    std::fs::create_dir_all(&cli.log_dir).with_context(|| format!("create {}", cli.log_dir.display()))?;
    let times_path = cli.log_dir.join("times.tsv");
    let mut times = parse_times(&std::fs::read_to_string(&times_path).unwrap_or_default());

    // Every selected test runs: one cargo built no executable for is a failure of its own.
    let wanted = selected_tests(&cli.selection);
    let mut outcomes: Vec<Outcome> = wanted
        .iter()
        .filter(|n| !built.iter().any(|b| &b.name == *n))
        .map(|n| Outcome {
            name: n.clone(),
            result: "FAILED (cannot run: cargo built no executable for it)".into(),
            secs: 0.0,
        })
        .collect();
    let binaries: BTreeMap<&str, &TestBinary> = built
        .iter()
        .filter(|b| wanted.is_empty() || wanted.contains(&b.name))
        .map(|b| (b.name.as_str(), b))
        .collect();
    let names: Vec<String> = binaries.keys().map(|n| n.to_string()).collect();
    let crd_dir = std::env::var_os("CAPKK_CRD_DIR").is_some();
    if crd_dir {
        eprintln!("parallel-tests: CAPKK_CRD_DIR is set (other CRDs for every binary): one binary at a time");
    }
    let alone: Vec<&str> = MUST_RUN_ALONE.iter().map(|(n, _)| *n).collect();
    for (n, why) in MUST_RUN_ALONE.iter().filter(|(n, _)| binaries.contains_key(n)) {
        eprintln!("parallel-tests: {n} runs alone: it {why}");
    }
    let mut queue: std::collections::VecDeque<Step> = plan(&names, &times, &alone, crd_dir).into();

    let mut running: Vec<(Running, bool)> = Vec::new();
    let mut last_print = Instant::now();
    while !queue.is_empty() || !running.is_empty() {
        while let Some(next) = queue.front() {
            let running_alone = running.iter().any(|(_, a)| *a);
            if !may_start(next, running.len(), running_alone, cli.jobs) {
                break;
            }
            let step = queue.pop_front().expect("front exists");
            match start(binaries[step.name.as_str()], &cli.log_dir) {
                Ok(r) => running.push((r, step.alone)),
                Err(e) => {
                    println!("==== {}: cannot run: {e:#}", step.name);
                    outcomes.push(Outcome {
                        name: step.name,
                        result: format!("FAILED (cannot run: {e:#})"),
                        secs: 0.0,
                    });
                }
            }
        }
        std::thread::sleep(Duration::from_millis(200));
        let mut i = 0;
        while i < running.len() {
            let status = running[i].0.child.try_wait().context("wait for a test binary")?;
            let Some(status) = status else {
                i += 1;
                continue;
            };
            let (r, _) = running.remove(i);
            let secs = r.start.elapsed().as_secs_f64();
            let result = match (
                status.code(),
                std::os::unix::process::ExitStatusExt::signal(&status),
            ) {
                (Some(0), _) => "ok".to_owned(),
                (Some(c), _) => format!("FAILED (exit {c})"),
                (None, Some(s)) => format!("FAILED (signal {s})"),
                (None, None) => format!("FAILED ({status})"),
            };
            print_log(&r, &result, secs);
            last_print = Instant::now();
            times.insert(r.name.clone(), secs);
            outcomes.push(Outcome {
                name: r.name,
                result,
                secs,
            });
        }
        if last_print.elapsed() >= HEARTBEAT && !running.is_empty() {
            let now: Vec<String> = running
                .iter()
                .map(|(r, _)| format!("{} {:.0}s", r.name, r.start.elapsed().as_secs_f64()))
                .collect();
            let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
            let load: Vec<&str> = load.split_whitespace().take(3).collect();
            println!(
                "parallel-tests: still running: {}; {} waiting (load {})",
                now.join(", "),
                queue.len(),
                load.join(" ")
            );
            last_print = Instant::now();
        }
    }
    std::fs::write(&times_path, format_times(&times))
        .with_context(|| format!("write {}", times_path.display()))?;
    print!("{}", summary(&outcomes, cli.jobs, t0.elapsed().as_secs_f64()));
    if outcomes.iter().any(|o| !o.ok()) {
        std::process::exit(1);
    }
    Ok(())
}

/// `cargo test --workspace --no-run --message-format=json <selection>`: the executables it built. Cargo's
/// progress goes to our stderr as it comes.
fn build(selection: &[String]) -> Result<Vec<TestBinary>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(&cargo)
        .args([
            "test",
            "--workspace",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .args(selection)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("run {cargo} test --no-run"))?;
    if !out.status.success() {
        bail!("{cargo} test --no-run failed ({})", out.status);
    }
    Ok(executables(&String::from_utf8_lossy(&out.stdout)))
}

/// Starts `b` as cargo test would (in its package's directory), its output into `<log_dir>/<name>.log`.
fn start(b: &TestBinary, log_dir: &Path) -> Result<Running> {
    let log = log_dir.join(format!("{}.log", b.name));
    let f = File::create(&log).with_context(|| format!("create {}", log.display()))?;
    let child = Command::new(&b.path)
        .current_dir(&b.package_dir)
        .env("CARGO_MANIFEST_DIR", &b.package_dir)
        .stdin(Stdio::null())
        .stdout(f.try_clone()?)
        .stderr(f)
        .spawn()
        .with_context(|| format!("start {}", b.path.display()))?;
    println!("parallel-tests: started {} (output: {})", b.name, log.display());
    Ok(Running {
        name: b.name.clone(),
        child,
        log,
        start: Instant::now(),
    })
}

/// The binary's whole output, between a header and a footer naming it and how it ended.
fn print_log(r: &Running, result: &str, secs: f64) {
    let text =
        std::fs::read(&r.log).unwrap_or_else(|e| format!("(cannot read {}: {e})\n", r.log.display()).into());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "==== {} ({}) ====", r.name, r.log.display());
    let _ = out.write_all(&text);
    let _ = writeln!(out, "==== {}: {result} in {secs:.0} s ====", r.name);
    let _ = out.flush();
}
