//! `capkk-mirror`: serve a directory over HTTP on one address, one log line per request on stderr: the file
//! mirror of the e2e (stand-in release artifacts) and of the real-node tiers (node binaries, checksum files and
//! the Debian repository of test/vm/artifacts, started by its serve.sh).
//!
//! ```text
//! capkk-mirror --listen 198.18.N.1:0 --dir DIR [--addr-file FILE]
//! ```
//! Each request logs `time peer method target status bytes duration`; a path leaving `DIR` is refused (400).

use std::path::PathBuf;

use anyhow::Context;
use capkk_sandbox::mirror::Mirror;
use clap::Parser;

#[derive(Parser)]
#[command(about = "Serve a directory over HTTP (GET, HEAD), logging each request")]
struct Cli {
    /// Address to listen on (`ip:port`; port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Directory to serve.
    #[arg(long)]
    dir: PathBuf,
    /// Write the bound address (`ip:port`) here once listening.
    #[arg(long)]
    addr_file: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let mirror = Mirror::serve_dir(&cli.listen, &cli.dir)
        .with_context(|| format!("serve {} on {}", cli.dir.display(), cli.listen))?;
    let addr = mirror.base.trim_start_matches("http://");
    if let Some(f) = &cli.addr_file {
        // Renamed into place: a script polling for a non-empty file never reads half an address.
        let tmp = f.with_extension("tmp");
        std::fs::write(&tmp, format!("{addr}\n")).with_context(|| format!("write {}", tmp.display()))?;
        std::fs::rename(&tmp, f).with_context(|| format!("rename {} to {}", tmp.display(), f.display()))?;
    }
    eprintln!("serving {} on {}", cli.dir.display(), mirror.base);
    loop {
        std::thread::park();
    }
}
