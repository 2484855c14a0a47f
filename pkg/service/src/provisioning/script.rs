//! Shell rendering of plan steps (pure; no I/O). The scripts are the files under
//! `pkg/service/host/provisioning/`; Rust prepends their variables quoted with [`capkk_executor::quote`], and
//! every content (file bytes, keys, sudo rules, password hashes, command text) as a data function printing
//! base64 from a quoted here-document, in a script that travels on stdin, never on a command line.

use capkk_cloudinit::{
    Action, DiskSetup, FsSetup, Mount, Ntp, NtpClient, Plan, Step, TableType, User, WriteFile,
};

use super::{SENTINEL, STATE_DIR};
use crate::{
    host::{Vars, tpl},
    journal::TAIL_BYTES,
};

/// The command line of every provisioning exec (`pkg/service/host/provisioning/launcher.sh`): saves the
/// script from stdin into a 0600 file under the 0700 state dir, checks it arrived whole (a cut connection must
/// never run half a script), runs it from `/` with stdin at `/dev/null`, removes it. Hang-ups are ignored and
/// every step's output goes to a file, so a dropped connection never interrupts a step: the host finishes it
/// and journals it (the runner may then die on a broken pipe when it reports, after the journal line and after
/// removing its temporary files).
pub(crate) fn launcher(script_len: usize) -> String {
    Vars::new()
        .var("P", parent(STATE_DIR))
        .var("D", STATE_DIR)
        .var("N", script_len.to_string())
        .render(tpl::PROV_LAUNCHER)
}

/// One exec's script: `provisioning/prelude.sh`, an optional probe section, then `steps` in order, then the
/// sentinel state.
///
/// - Probe (first exec of a run only): print the journal and the kept output tails; when
///   the sentinel exists (or the journal says `provisioned`) and this plan's journal is empty or complete,
///   print `skipall` and stop. With `rerun_failed` (a retry) the probe first removes from the journal the
///   command items whose last run failed, so they run again. A kubeadm item ([`runs_kubeadm`]) the host's
///   death cut short is undone first (`kubeadm reset -f`, reported as `undo <id> <rc>`).
/// - A step already in the journal is not run again (`already <id> <rc>`); this check runs on the host,
///   under the host-wide provisioning lock.
/// - Steps run with the lock's descriptor closed, so a daemon they start (`systemctl` without systemd,
///   `service ... restart`, a backgrounded process) cannot hold the lock after the run.
/// - Steps run with cloud-init's umask (022); the runner's own files (journal, scripts, output) are 0600.
/// - A non-command step (`provisioning/step.sh`) runs under `set -e` and is journaled (`<id> 0`) only after
///   it succeeded; a failure stops the script. A `write_files` item the journal shows done runs again, not
///   journaled twice, when its file is gone (a reboot empties `/run`) or this run rewrote its path before it.
/// - A command item (`provisioning/command.sh`) is journaled `<id> start` before it runs and
///   `<id> <exit code>` after it ran, whatever the exit code (cloud-init semantics: a failed item still
///   counts as run, and the next one runs). A failed item's output tail is kept (`<plan-hash>.<id>.tail`,
///   0600) so later runs can still report it.
pub(crate) fn segment(
    plan: &Plan,
    lock_wait_secs: u64,
    steps: &[&Step],
    probe: bool,
    rerun_failed: bool,
) -> String {
    let mut s = Vars::new()
        .var("D", STATE_DIR)
        .var("PLAN", &plan.hash)
        .var("S", SENTINEL)
        .var("LOCK_WAIT", lock_wait_secs.to_string())
        .var("TAIL_BYTES", TAIL_BYTES.to_string())
        .render(tpl::PROV_PRELUDE);
    if probe {
        s.push_str("# capkk probe\n");
        let ids: Vec<&str> = plan.steps.iter().map(|st| st.id.as_str()).collect();
        let kubeadm_ids: Vec<&str> = plan
            .steps
            .iter()
            .filter(|st| matches!(&st.action, Action::Command(c) if runs_kubeadm(&c.script)))
            .map(|st| st.id.as_str())
            .collect();
        s.push_str(
            &Vars::new()
                .flag("RERUN_FAILED", rerun_failed)
                .var("KUBEADM_IDS", kubeadm_ids.join(" "))
                .args(&ids)
                .render(tpl::PROV_PROBE),
        );
    }
    for step in steps {
        let id = &step.id;
        match &step.action {
            Action::Command(c) => {
                s.push_str(&format!("# capkk step {id} command\n"));
                s.push_str(
                    &Vars::new()
                        .var("ID", id)
                        .data("step_data", c.script.as_bytes())
                        .render(tpl::PROV_COMMAND),
                );
            }
            other => {
                s.push_str(&format!("# capkk step {id}\n"));
                s.push_str(&format!("step_body() {{\n{}}}\n", body(other)));
                s.push_str(&format!("step_kept() {{\n{}}}\n", kept(other)));
                s.push_str(&Vars::new().var("ID", id).render(tpl::PROV_STEP));
            }
        }
    }
    s.push_str(tpl::PROV_END);
    s
}

/// Whether a command item runs `kubeadm init` or `kubeadm join` (CABPK's kubeadm item: `kubeadm init --config
/// ... && echo success > ...`): such an item cut short by the host's death is undone before it runs again
/// (`provisioning/probe.sh`). A plain word match: `kubeadm` followed by `init` or `join`.
pub(crate) fn runs_kubeadm(script: &str) -> bool {
    let words: Vec<&str> = script.split_whitespace().collect();
    words
        .windows(2)
        .any(|w| w[0].rsplit('/').next() == Some("kubeadm") && matches!(w[1], "init" | "join"))
}

/// The body of a non-command step, run under `set -e` with output captured: the action's template with its
/// variables and data functions prepended.
pub(crate) fn body(action: &Action) -> String {
    match action {
        Action::Command(c) => Vars::new()
            .data("step_data", c.script.as_bytes())
            .render("step_data | sh\n"),
        Action::WriteFile(f) => write_file(f),
        Action::PartitionDisk(d) => partition_disk(d),
        Action::MakeFilesystem(f) => make_filesystem(f),
        Action::Mount(m) => mount(m),
        Action::CreateUser(u) => user(u),
        Action::ConfigureNtp(n) => ntp(n),
    }
}

/// The body of `step_kept` (step.sh): whether a non-command step the journal shows done still holds. A
/// written file must still be there ([`tpl::WRITE_FILE_KEPT`]); the other steps' results (users, mounts, file
/// systems, NTP configuration) live on persistent paths and are trusted.
fn kept(action: &Action) -> String {
    match action {
        Action::WriteFile(f) => Vars::new().var("P", &f.path).render(tpl::WRITE_FILE_KEPT),
        _ => "KEPT_PATH=\n".to_owned(),
    }
}

fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// Write (or append to) a file atomically: a `mktemp` file beside it (0600 while written), exact bytes,
/// owner, then mode, then rename. Parent directories are created 0755 like cloud-init's `ensure_dir`.
/// `chown` is skipped for `root:root` unless the directory is setgid.
fn write_file(f: &WriteFile) -> String {
    let mut v = Vars::new();
    if !f.content.is_empty() {
        v = v.data("step_data", &f.content);
    }
    v.var("P", &f.path)
        .var("DIR", parent(&f.path))
        .var("MODE", format!("{:04o}", f.mode))
        .flag("APPEND", f.append)
        .var("OWNER", &f.owner)
        .flag("CONTENT", !f.content.is_empty())
        .render(tpl::WRITE_FILE)
}

/// File name under `/etc/sudoers.d/` for a user (sudo ignores names containing `.` or ending in `~`).
pub(crate) fn sudoers_file(user: &str) -> String {
    let safe: String = user
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("/etc/sudoers.d/90-capkk-{safe}")
}

fn user(u: &User) -> String {
    let mut add: Vec<String> = Vec::new();
    let mut opt = |flag: &str, v: &Option<String>| {
        if let Some(v) = v {
            add.push(flag.to_owned());
            add.push(v.clone());
        }
    };
    opt("--comment", &u.gecos);
    opt("--home-dir", &u.homedir);
    opt("--gid", &u.primary_group);
    opt("--shell", &u.shell);
    opt("--inactive", &u.inactive);
    opt("--expiredate", &u.expiredate);
    opt("--uid", &u.uid.map(|n| n.to_string()));
    if !u.groups.is_empty() {
        add.push("--groups".into());
        add.push(u.groups.join(","));
    }
    if u.system {
        add.push("--system".into());
    }
    if u.no_user_group {
        add.push("--no-user-group".into());
    }
    if u.no_create_home || u.system {
        add.push("--no-create-home".into());
    } else {
        add.push("--create-home".into());
    }
    add.push("--".into());
    add.push(u.name.clone());
    let mut v = Vars::new();
    if let Some(h) = &u.hashed_passwd {
        v = v.data("data_hashed", format!("{}:{h}\n", u.name).as_bytes());
    }
    if let Some(p) = &u.plain_text_passwd {
        v = v.data("data_plain", format!("{}:{p}\n", u.name).as_bytes());
    }
    if !u.sudo.is_empty() {
        let rules: String = u.sudo.iter().map(|r| format!("{} {r}\n", u.name)).collect();
        v = v.data("data_sudo", rules.as_bytes());
    }
    if !u.ssh_authorized_keys.is_empty() {
        let keys: String = u.ssh_authorized_keys.iter().map(|k| format!("{k}\n")).collect();
        v = v.data("data_keys", keys.as_bytes());
    }
    v.var("NAME", &u.name)
        .var("UGROUPS", u.groups.join(","))
        .flag("HASHED", u.hashed_passwd.is_some())
        .flag("PLAIN", u.plain_text_passwd.is_some())
        .flag("LOCK", u.lock_passwd)
        .flag("SUDO", !u.sudo.is_empty())
        .var("SUDO_FILE", sudoers_file(&u.name))
        .flag("KEYS", !u.ssh_authorized_keys.is_empty())
        .args(add)
        .render(tpl::USER)
}

/// chrony configuration written by the ntp step.
pub(crate) fn chrony_conf(n: &Ntp) -> String {
    let mut s = String::from("# Written by capkk from the bootstrap data's ntp module.\n");
    for server in &n.servers {
        s.push_str(&format!("server {server} iburst\n"));
    }
    for pool in &n.pools {
        s.push_str(&format!("pool {pool} iburst\n"));
    }
    s.push_str("driftfile /var/lib/chrony/chrony.drift\nmakestep 1.0 3\nrtcsync\n");
    s
}

/// systemd-timesyncd drop-in written by the ntp step.
pub(crate) fn timesyncd_conf(n: &Ntp) -> String {
    let all: Vec<&str> = n.servers.iter().chain(&n.pools).map(String::as_str).collect();
    format!(
        "# Written by capkk from the bootstrap data's ntp module.\n[Time]\nNTP={}\n",
        all.join(" ")
    )
}

/// Detect the host's time daemon in the same script: chrony first, then systemd-timesyncd.
fn ntp(n: &Ntp) -> String {
    Vars::new()
        .data("data_chrony", chrony_conf(n).as_bytes())
        .data("data_timesyncd", timesyncd_conf(n).as_bytes())
        .flag("CHRONY_OK", n.client != NtpClient::Timesyncd)
        .flag("TIMESYNCD_OK", n.client != NtpClient::Chrony)
        .var(
            "WANT",
            match n.client {
                NtpClient::Auto => "chrony or systemd-timesyncd",
                NtpClient::Chrony => "chrony",
                NtpClient::Timesyncd => "systemd-timesyncd",
            },
        )
        .render(tpl::NTP)
}

/// Partition a disk; a disk that already has a partition table or a file system signature is left alone
/// unless `overwrite` is set (then it is wiped first).
fn partition_disk(d: &DiskSetup) -> String {
    let full: u32 = d.layout.iter().map(|p| u32::from(p.percent)).sum();
    let (table, default_type) = match d.table_type {
        TableType::Mbr => ("mbr", "83"),
        TableType::Gpt => ("gpt", "8300"),
    };
    let args = d.layout.iter().flat_map(|p| {
        [
            p.percent.to_string(),
            p.type_code.clone().unwrap_or_else(|| default_type.to_owned()),
        ]
    });
    Vars::new()
        .var("DEV", &d.device)
        .flag("OVERWRITE", d.overwrite)
        .var("TABLE", table)
        .flag("FULL", full == 100)
        .args(args)
        .render(tpl::PARTITION)
}

/// Create a file system; an existing file system (or, on a whole disk, a partition table) is kept unless
/// `overwrite` is set or it is of the `replace_fs` type.
fn make_filesystem(f: &FsSetup) -> String {
    let fs = f.filesystem.as_str();
    let mut cmd = if fs == "swap" {
        vec!["mkswap".to_owned()]
    } else {
        vec![format!("mkfs.{fs}")]
    };
    if let Some(l) = &f.label {
        cmd.push(
            if matches!(fs, "vfat" | "fat" | "msdos") {
                "-n"
            } else {
                "-L"
            }
            .into(),
        );
        cmd.push(l.clone());
    }
    cmd.extend(f.extra_opts.iter().cloned());
    let force = match fs {
        "ext2" | "ext3" | "ext4" => "-F",
        "xfs" | "btrfs" => "-f",
        _ => "",
    };
    Vars::new()
        .var("DEV", f.target())
        .flag("WHOLE", f.partition.is_none())
        .flag("OVERWRITE", f.overwrite)
        .var("REPLACE", f.replace_fs.as_deref().unwrap_or_default())
        .var("FORCE", force)
        .args(cmd)
        .render(tpl::MKFS)
}

/// Add an fstab entry (unless the mount point already has one) and mount it (or `swapon`).
fn mount(m: &Mount) -> String {
    let options = format!("{},comment=capkk", m.options);
    let line = format!(
        "{}\t{}\t{}\t{}\t{}\t{}\n",
        m.spec, m.mountpoint, m.fstype, options, m.dump, m.pass
    );
    Vars::new()
        .data("step_data", line.as_bytes())
        .var("SPEC", &m.spec)
        .var("MP", &m.mountpoint)
        .flag("SWAP", m.is_swap())
        .render(tpl::MOUNT)
}
