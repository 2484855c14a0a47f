//! `longest-gap`: passes a run's output through and, at its end, reports the longest gaps between two lines.
//!
//! ```sh
//! make quickstart 2>&1 | target/debug/longest-gap --log quickstart.log   # live; the log keeps each line's time
//! target/debug/longest-gap --read quickstart.log                          # the report again, from the log
//! ```

use std::{
    fs::File,
    io::{BufRead, BufReader, BufWriter, Write},
    path::PathBuf,
    time::Instant,
};

use anyhow::{Context, Result};
use capkk_devtools::gaps::{Stamped, format_line, longest, parse_line, report};
use clap::Parser;

/// Pass standard input through line by line, stamping each line as it arrives; at its end print the longest
/// gaps between two lines to standard error.
#[derive(Parser)]
#[command(name = "longest-gap")]
struct Cli {
    /// Also write every line, stamped `[+SECONDS]`, to this file (read it back with --read).
    #[arg(long, conflicts_with = "read")]
    log: Option<PathBuf>,
    /// Report on a log written by --log instead of reading standard input.
    #[arg(long)]
    read: Option<PathBuf>,
    /// How many of the longest gaps to report.
    #[arg(long, default_value_t = 5)]
    top: usize,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let (lines, end) = match &cli.read {
        Some(path) => read_log(path)?,
        None => watch(cli.log.as_deref())?,
    };
    eprint!("{}", report(&lines, &longest(&lines, cli.top), end));
    Ok(())
}

fn read_log(path: &std::path::Path) -> Result<(Vec<Stamped>, f64)> {
    let f = File::open(path).with_context(|| format!("open {}", path.display()))?;
    let mut lines = Vec::new();
    for (n, l) in BufReader::new(f).lines().enumerate() {
        let l = l.with_context(|| format!("read {}", path.display()))?;
        lines.push(
            parse_line(&l)
                .with_context(|| format!("{}:{}: not a `[+SECONDS] TEXT` line", path.display(), n + 1))?,
        );
    }
    let end = lines.last().map_or(0.0, |l| l.at);
    Ok((lines, end))
}

fn watch(log: Option<&std::path::Path>) -> Result<(Vec<Stamped>, f64)> {
    let t0 = Instant::now();
    let mut log = match log {
        Some(p) => Some(BufWriter::new(
            File::create(p).with_context(|| format!("create {}", p.display()))?,
        )),
        None => None,
    };
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut out = std::io::stdout().lock();
    let mut lines = Vec::new();
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if input.read_until(b'\n', &mut buf).context("read standard input")? == 0 {
            break;
        }
        let at = t0.elapsed().as_secs_f64();
        // Passed through as it came, at once: a person watches the run through this pipe. A reader that went
        // away (e.g. `| head`) does not end the watch.
        let _ = out.write_all(&buf).and_then(|()| out.flush());
        let text = String::from_utf8_lossy(&buf)
            .trim_end_matches(['\n', '\r'])
            .to_string();
        let line = Stamped { at, text };
        if let Some(w) = log.as_mut() {
            writeln!(w, "{}", format_line(&line)).context("write the log")?;
            // Flushed per line: an interrupted run keeps its log up to the last line.
            w.flush().context("write the log")?;
        }
        lines.push(line);
    }
    Ok((lines, t0.elapsed().as_secs_f64()))
}
