//! `cyclonedx-sbom`: the CycloneDX 1.5 SBOM (JSON) of one workspace package, from `cargo metadata` and Cargo.lock
//! (see `capkk_devtools::sbom`). `make release` writes the manager crate's with it:
//!
//! ```sh
//! cyclonedx-sbom --manifest-path Cargo.toml --package capkk-controllers --output capkk-manager.cdx.json
//! ```

use std::{path::PathBuf, process::Command};

use anyhow::{Context, Result, bail};
use capkk_devtools::sbom::{Tool, parse_lock, sbom};
use clap::Parser;

/// Write the CycloneDX SBOM of a workspace package: the crates it links on one platform.
#[derive(Parser)]
#[command(name = "cyclonedx-sbom")]
struct Cli {
    /// The workspace's (or a member's) Cargo.toml.
    #[arg(long, default_value = "Cargo.toml")]
    manifest_path: PathBuf,
    /// The workspace package to describe.
    #[arg(long)]
    package: String,
    /// The platform whose dependencies count (default: rustc's host).
    #[arg(long)]
    target: Option<String>,
    /// Where to write the SBOM.
    #[arg(long)]
    output: PathBuf,
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn host_triple() -> Result<String> {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .context("run rustc -vV")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .context("rustc -vV names no host")
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let target = match cli.target {
        Some(t) => t,
        None => host_triple()?,
    };
    // --locked: the SBOM describes Cargo.lock as committed, never a freshly resolved graph.
    let out = Command::new(cargo())
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--filter-platform",
            &target,
            "--manifest-path",
        ])
        .arg(&cli.manifest_path)
        .output()
        .context("run cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).context("cargo metadata's JSON")?;
    let root = metadata["workspace_root"]
        .as_str()
        .context("cargo metadata names no workspace_root")?;
    let lock_path = PathBuf::from(root).join("Cargo.lock");
    let lock =
        std::fs::read_to_string(&lock_path).with_context(|| format!("read {}", lock_path.display()))?;
    // SOURCE_DATE_EPOCH (reproducible builds' convention) or now.
    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => s
            .trim()
            .parse()
            .with_context(|| format!("SOURCE_DATE_EPOCH {s:?}"))?,
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs(),
    };
    let tool = Tool {
        name: "capkk-devtools cyclonedx-sbom",
        version: env!("CARGO_PKG_VERSION"),
    };
    let bom = sbom(&metadata, &parse_lock(&lock), &cli.package, epoch, tool)?;
    let mut text = serde_json::to_string_pretty(&bom)?;
    text.push('\n');
    std::fs::write(&cli.output, text).with_context(|| format!("write {}", cli.output.display()))?;
    Ok(())
}
