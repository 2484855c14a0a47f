//! `vm`: build the image, boot, inspect and tear down the real test hosts (VMs or node containers) from make
//! targets and scripts. Every command but `image` and `up` reads the fleet's `state.json`, whichever source
//! made it.
//!
//! ```text
//! cargo run -p capkk-vm --bin vm -- image [--source containers] # build or find the cached image, print its dir
//! cargo run -p capkk-vm --bin vm -- up --name real --vm 2x3072 --vm 1x2048 [--source containers] [--guard-pid PID] [--no-wait]
//! cargo run -p capkk-vm --bin vm -- wait --name real
//! cargo run -p capkk-vm --bin vm -- status --name real
//! cargo run -p capkk-vm --bin vm -- ssh --name real --vm 1 -- systemctl is-system-running
//! cargo run -p capkk-vm --bin vm -- inside --name real --vm 1 -- cat /proc/sys/kernel/panic   # out of band
//! cargo run -p capkk-vm --bin vm -- restart --name real --vm 2   # a node container power-cycled
//! cargo run -p capkk-vm --bin vm -- power-off --name real --vm 1 # a host lost (every process killed at once)
//! cargo run -p capkk-vm --bin vm -- sysctls                    # the machine's watched kernel settings
//! cargo run -p capkk-vm --bin vm -- down --name real
//! cargo run -p capkk-vm --bin vm -- owned-paths               # what a reset host must no longer have
//! cargo run -p capkk-vm --bin vm -- readme-block install      # the README's block the README test runs
//! ```
//! `up` prints the state dir; its `state.json` describes bridge, addresses, host keys and the client key.
//! `--source` defaults to `CAPKK_HOSTS` (containers | vms), else vms.
//! With `--guard-pid` a watchdog tears the fleet down once that process exits (scripts pass their own `$$`).

use std::{os::unix::process::CommandExt, process::Command};

use anyhow::{Context, Result};
use capkk_vm::{Fleet, FleetConfig, ImageSpec, Source, VmSpec, containers, ensure_image, ssh_args};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "VM test hosts (Debian under QEMU)")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build the image unless the cache has it; print its dir and hash.
    Image {
        /// VMs or node containers (default: `CAPKK_HOSTS`, else vms).
        #[arg(long)]
        source: Option<Source>,
    },
    /// Boot a fleet (tearing down an earlier one of the same name first).
    Up {
        /// Fleet name.
        #[arg(long)]
        name: String,
        /// One per VM: CPUSxMIB (default one 2x3072).
        #[arg(long = "vm")]
        vms: Vec<VmSpec>,
        /// Tear the fleet down once this process exits (0: keep it until `down`).
        #[arg(long, default_value_t = 0)]
        guard_pid: u32,
        /// Return once QEMU runs, without waiting for SSH.
        #[arg(long)]
        no_wait: bool,
        /// VMs or node containers (default: `CAPKK_HOSTS`, else vms).
        #[arg(long)]
        source: Option<Source>,
    },
    /// Wait until every VM of a fleet is ready.
    Wait {
        /// Fleet name.
        #[arg(long)]
        name: String,
    },
    /// Print the state (no secrets).
    Status {
        /// Fleet name.
        #[arg(long)]
        name: String,
    },
    /// Run a command as root on a VM over SSH (its exit code is ours).
    Ssh {
        /// Fleet name.
        #[arg(long)]
        name: String,
        /// VM number, 1-based.
        #[arg(long)]
        vm: usize,
        /// The command.
        #[arg(trailing_var_arg = true, required = true)]
        command: Vec<String>,
    },
    /// Run a command as root inside a host out of band (node containers: `podman exec`; VMs: root SSH).
    Inside {
        /// Fleet name.
        #[arg(long)]
        name: String,
        /// Host number, 1-based.
        #[arg(long)]
        vm: usize,
        /// The command (one `sh -c` script).
        #[arg(trailing_var_arg = true, required = true)]
        command: Vec<String>,
    },
    /// Restart a node container like a power cycle (its disk survives) and wait for SSH again.
    Restart {
        /// Fleet name.
        #[arg(long)]
        name: String,
        /// Host number, 1-based.
        #[arg(long)]
        vm: usize,
    },
    /// Cut a host's power (node container: every process killed at once; VM: QEMU killed). `down` removes it.
    PowerOff {
        /// Fleet name.
        #[arg(long)]
        name: String,
        /// Host number, 1-based.
        #[arg(long)]
        vm: usize,
    },
    /// Print the machine's kernel settings a node container must not change (`name=value`, one a line).
    Sysctls,
    /// Tear a fleet down (idempotent).
    Down {
        /// Fleet name.
        #[arg(long)]
        name: String,
    },
    /// Print the paths the provider owns on a host, one a line (`capkk_service::bootstrap::OWNED_PATHS`,
    /// which its reset removes): scripts check a reset VM against the product's own list.
    OwnedPaths,
    /// Print the README's shell block marked `<!-- readme-test: NAME -->`, byte for byte (the README-install
    /// test runs it); fails naming what is wrong when the block is gone or changed shape.
    ReadmeBlock {
        /// The README.
        #[arg(long, default_value = "README.md")]
        file: std::path::PathBuf,
        /// The block's name (values, install, cluster, apply).
        name: String,
        /// Print the variables the block exports, one a line, instead of the block.
        #[arg(long)]
        exports: bool,
    },
}

/// The error's chain on one line, last: an anyhow error returned from `main` prints its backtrace after the
/// message when `RUST_BACKTRACE` is set (CI sets it), and a log's tail then showed only frames (a CI run's
/// `vm up` failed that way, its reason out of sight).
fn main() {
    if let Err(e) = run() {
        eprintln!("vm: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    match Cli::parse().command {
        Cmd::Image { source } => match source.map_or_else(Source::from_env, Ok)? {
            Source::Vms => {
                let img = ensure_image(&ImageSpec::default())?;
                println!(
                    "{} {} build_secs={:.0}",
                    img.dir.display(),
                    img.hash,
                    img.build_secs
                );
            }
            Source::Containers => {
                let img = containers::ensure_node_image()?;
                println!(
                    "{} {} build_secs={:.0}",
                    img.dir.display(),
                    img.reference,
                    img.build_secs
                );
            }
        },
        Cmd::Up {
            name,
            mut vms,
            guard_pid,
            no_wait,
            source,
        } => {
            if vms.is_empty() {
                vms.push(VmSpec::CONTROL_PLANE);
            }
            let mut cfg = FleetConfig::new(&name, vms);
            cfg.source = source.map_or_else(Source::from_env, Ok)?;
            let mut fleet = Fleet::start(&cfg, guard_pid)?;
            if !no_wait {
                fleet.wait_ready(cfg.ready_timeout)?;
            }
            println!("{}", fleet.state().dir.display());
        }
        Cmd::Wait { name } => {
            let mut fleet = Fleet::attach(&name)?;
            let cfg = FleetConfig::new(&name, Vec::new());
            fleet.wait_ready(cfg.ready_timeout)?;
            for vm in fleet.vms() {
                println!("{} {} ready after {:.0}s", vm.name, vm.address, vm.boot_secs);
            }
        }
        Cmd::Status { name } => {
            let fleet = Fleet::attach(&name)?;
            println!("{}", serde_json::to_string_pretty(fleet.state())?);
        }
        Cmd::Ssh { name, vm, command } => {
            let fleet = Fleet::attach(&name)?;
            let info = fleet
                .vms()
                .get(vm.checked_sub(1).context("VMs are numbered from 1")?)
                .with_context(|| format!("fleet {name} has no VM {vm}"))?;
            let err = Command::new("ssh")
                .args(ssh_args(fleet.state()))
                .arg(format!("root@{}", info.address))
                .arg(command.join(" "))
                .exec();
            return Err(err).context("exec ssh");
        }
        Cmd::Inside { name, vm, command } => {
            let fleet = Fleet::attach(&name)?;
            let i = vm.checked_sub(1).context("hosts are numbered from 1")?;
            anyhow::ensure!(i < fleet.vms().len(), "fleet {name} has no host {vm}");
            let out = fleet.inside(i, &command.join(" "))?;
            use std::io::Write;
            std::io::stdout().write_all(&out.stdout)?;
            std::io::stderr().write_all(&out.stderr)?;
            std::process::exit(out.status.code().unwrap_or(1));
        }
        Cmd::Restart { name, vm } => {
            let mut fleet = Fleet::attach(&name)?;
            let i = vm.checked_sub(1).context("hosts are numbered from 1")?;
            anyhow::ensure!(i < fleet.vms().len(), "fleet {name} has no host {vm}");
            fleet.restart(i)?;
        }
        Cmd::PowerOff { name, vm } => {
            let fleet = Fleet::attach(&name)?;
            let i = vm.checked_sub(1).context("hosts are numbered from 1")?;
            anyhow::ensure!(i < fleet.vms().len(), "fleet {name} has no host {vm}");
            fleet.power_off(i)?;
        }
        Cmd::ReadmeBlock { file, name, exports } => {
            let text =
                std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let block =
                capkk_vm::readme::block(&text, &name).with_context(|| format!("in {}", file.display()))?;
            if exports {
                for n in capkk_vm::readme::exports(&block) {
                    println!("{n}");
                }
            } else {
                print!("{block}");
            }
        }
        Cmd::Sysctls => {
            for (k, v) in containers::machine_sysctls() {
                println!("{k}={v}");
            }
        }
        Cmd::Down { name } => capkk_vm::down(&name)?,
        Cmd::OwnedPaths => {
            for p in capkk_service::bootstrap::OWNED_PATHS {
                println!("{p}");
            }
        }
    }
    Ok(())
}
