//! `sandbox`: build, inspect, fault and tear down sandbox SSH hosts from make targets.
//!
//! ```text
//! cargo run -p capkk-sandbox --bin sandbox -- up --name e2e --hosts 4 [--internal-hosts 1] [--user root]
//! cargo run -p capkk-sandbox --bin sandbox -- status --name e2e
//! cargo run -p capkk-sandbox --bin sandbox -- exec --name e2e --host e2e-1 -- cat /etc/hostname
//! cargo run -p capkk-sandbox --bin sandbox -- fault --name e2e --host e2e-1 link-down
//! cargo run -p capkk-sandbox --bin sandbox -- down --name e2e
//! ```
//! `up` prints the state dir; `state.json` and `inventory.yaml` there describe the hosts and credentials.

use std::io::Write;

use anyhow::{Context, bail};
use capkk_sandbox::{LoginUser, Sandbox, SandboxConfig};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(about = "Sandbox SSH test hosts (netns + overlay root + real sshd)")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build (or rebuild) a sandbox; it keeps running until `down`.
    Up {
        /// Sandbox name.
        #[arg(long)]
        name: String,
        /// Hosts on the main network.
        #[arg(long, default_value_t = 1)]
        hosts: usize,
        /// Hosts behind a bastion on a second network (adds the bastion).
        #[arg(long, default_value_t = 0)]
        internal_hosts: usize,
        /// Login user written to the inventory.
        #[arg(long, value_enum, default_value_t = LoginUser::Root)]
        user: LoginUser,
    },
    /// Tear a sandbox down (idempotent).
    Down {
        /// Sandbox name.
        #[arg(long)]
        name: String,
    },
    /// Print the state (hosts, addresses, fingerprints; no secrets).
    Status {
        /// Sandbox name.
        #[arg(long)]
        name: String,
    },
    /// Run a shell command inside a host, out of band (not over SSH).
    Exec {
        /// Sandbox name.
        #[arg(long)]
        name: String,
        /// Host name.
        #[arg(long)]
        host: String,
        /// The command (joined with spaces, run by sh -c).
        #[arg(trailing_var_arg = true, required = true)]
        command: Vec<String>,
    },
    /// Inject a fault into a host.
    Fault {
        /// Sandbox name.
        #[arg(long)]
        name: String,
        /// Host name.
        #[arg(long)]
        host: String,
        /// The fault.
        #[arg(value_enum)]
        fault: Fault,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Fault {
    LinkDown,
    LinkUp,
    KillSshd,
    StartSshd,
    RestartSshd,
    RotateHostKey,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Cmd::Up {
            name,
            hosts,
            internal_hosts,
            user,
        } => {
            if let Some(reason) = capkk_sandbox::unsupported_reason() {
                bail!("cannot build sandbox hosts here: {reason}");
            }
            let mut config = SandboxConfig::new(&name, hosts).with_internal_hosts(internal_hosts);
            config.user = user;
            let sb = Sandbox::up(&config).context("sandbox up")?;
            let state = sb.state().clone();
            // Keep it running: the CLI's sandbox is torn down by `down`, not on exit.
            std::mem::forget(sb);
            println!("state dir: {}", state.dir.display());
            println!("inventory: {}", state.dir.join("inventory.yaml").display());
            print_hosts(&state);
        }
        Cmd::Down { name } => capkk_sandbox::down(&name).context("sandbox down")?,
        Cmd::Status { name } => print_hosts(Sandbox::attach(&name)?.state()),
        Cmd::Exec { name, host, command } => {
            let sb = Sandbox::attach(&name)?;
            let out = sb.host(&host)?.run_inside(&command.join(" "))?;
            std::io::stdout().write_all(&out.stdout)?;
            std::io::stderr().write_all(&out.stderr)?;
            std::process::exit(out.status.code().unwrap_or(1));
        }
        Cmd::Fault { name, host, fault } => {
            let sb = Sandbox::attach(&name)?;
            let mut h = sb.host(&host)?;
            match fault {
                Fault::LinkDown => h.link_down()?,
                Fault::LinkUp => h.link_up()?,
                Fault::KillSshd => h.kill_sshd()?,
                Fault::StartSshd => h.start_sshd()?,
                Fault::RestartSshd => h.restart_sshd()?,
                Fault::RotateHostKey => println!("{}", h.rotate_host_key()?),
            }
        }
    }
    Ok(())
}

fn print_hosts(state: &capkk_sandbox::SandboxState) {
    println!(
        "sandbox {} (slot {}), login user {}",
        state.name,
        state.index,
        state.user.name()
    );
    for h in &state.hosts {
        println!(
            "  {:<20} {:<15} {:?}{} {}",
            h.name,
            h.address,
            h.network,
            h.bastion
                .as_ref()
                .map(|b| format!(" via {b}"))
                .unwrap_or_default(),
            h.host_key_fingerprint
        );
    }
}
