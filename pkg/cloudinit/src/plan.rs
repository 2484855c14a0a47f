//! The typed, ordered plan and its steps.

use std::fmt;

use sha2::{Digest, Sha256};

/// The cloud-init module a step comes from, in execution order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Module {
    /// `bootcmd`: commands run first.
    BootCmd,
    /// `disk_setup`: partition tables.
    DiskSetup,
    /// `fs_setup`: file systems.
    FsSetup,
    /// `mounts`: `/etc/fstab` entries, mounted.
    Mounts,
    /// `write_files` entries without `defer`.
    WriteFiles,
    /// `users`.
    Users,
    /// `ntp`.
    Ntp,
    /// `write_files` entries with `defer: true` (cloud-init's `write_files_deferred`, run in its final stage
    /// before the user scripts).
    WriteFilesDeferred,
    /// `runcmd`: commands run last.
    RunCmd,
}

impl Module {
    /// The cloud-config key.
    pub fn key(self) -> &'static str {
        match self {
            Module::BootCmd => "bootcmd",
            Module::DiskSetup => "disk_setup",
            Module::FsSetup => "fs_setup",
            Module::Mounts => "mounts",
            Module::WriteFiles | Module::WriteFilesDeferred => "write_files",
            Module::Users => "users",
            Module::Ntp => "ntp",
            Module::RunCmd => "runcmd",
        }
    }
}

/// A whole plan: every step in execution order, and a hash naming the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Hash of all step ids in order (16 hex digits). Names the host-side journal of this plan.
    pub hash: String,
    /// Steps in execution order.
    pub steps: Vec<Step>,
}

impl Plan {
    pub(crate) fn new(steps: Vec<(Module, Action)>) -> Self {
        let mut out = Vec::with_capacity(steps.len());
        let mut plan_hasher = Sha256::new();
        plan_hasher.update(b"capkk-plan-v1\0");
        let mut per_module: std::collections::BTreeMap<Module, usize> = Default::default();
        for (position, (module, action)) in steps.into_iter().enumerate() {
            let index = per_module.entry(module).or_default();
            let id = step_id(position, module, &action);
            plan_hasher.update(id.as_bytes());
            out.push(Step {
                id,
                module,
                index: *index,
                action,
            });
            *index += 1;
        }
        Plan {
            hash: hex::encode(&plan_hasher.finalize()[..8]),
            steps: out,
        }
    }

    /// True when the plan has nothing to do.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The step with this id.
    pub fn step(&self, id: &str) -> Option<&Step> {
        self.steps.iter().find(|s| s.id == id)
    }
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// Stable id: 16 hex digits of SHA-256 over the step's position, module and full content. The same
    /// bootstrap data (and template variables) always yields the same ids; any change changes them.
    pub id: String,
    /// The module it comes from.
    pub module: Module,
    /// 0-based index among the steps of the same module (`runcmd[3]`).
    pub index: usize,
    /// What to do.
    pub action: Action,
}

impl Step {
    /// A short, non-secret name: `runcmd[3]`, `write_files /etc/kubernetes/pki/ca.key`, `users alice`.
    pub fn name(&self) -> String {
        match &self.action {
            Action::Command(_) => format!("{}[{}]", self.module.key(), self.index),
            Action::WriteFile(f) => format!("write_files {}", f.path),
            Action::PartitionDisk(d) => format!("disk_setup {}", d.device),
            Action::MakeFilesystem(f) => format!("fs_setup {}", f.target()),
            Action::Mount(m) => format!("mounts {}", m.mountpoint),
            Action::CreateUser(u) => format!("users {}", u.name),
            Action::ConfigureNtp(_) => "ntp".to_owned(),
        }
    }
}

/// What a step does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Run a shell command (`bootcmd`, `runcmd` item).
    Command(Command),
    /// Write one file.
    WriteFile(WriteFile),
    /// Partition one disk (`disk_setup` device).
    PartitionDisk(DiskSetup),
    /// Create one file system (`fs_setup` entry).
    MakeFilesystem(FsSetup),
    /// Add one `/etc/fstab` entry and mount it (`mounts` entry).
    Mount(Mount),
    /// Create or update one user (`users` entry).
    CreateUser(User),
    /// Configure the time daemon (`ntp`).
    ConfigureNtp(Ntp),
}

/// A shell command, run by `sh` as root. String items are taken verbatim; list items are quoted word by
/// word exactly as cloud-init's `shellify` does.
#[derive(Clone, PartialEq, Eq)]
pub struct Command {
    /// The shell text (may contain secrets: never log it unredacted).
    pub script: String,
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Command(<{} bytes>)", self.script.len())
    }
}

/// One `write_files` entry, decoded.
#[derive(Clone, PartialEq, Eq)]
pub struct WriteFile {
    /// Absolute destination path.
    pub path: String,
    /// Exact bytes to write (decoded from `encoding`). Secret.
    pub content: Vec<u8>,
    /// Permission bits (`permissions`, default `0o644`).
    pub mode: u32,
    /// `user:group` or `user` (`owner`, default `root:root`).
    pub owner: String,
    /// Append instead of replacing (`append`). A non-append write replaces the file (truncates).
    pub append: bool,
    /// Written in the deferred stage, after users and ntp (`defer`).
    pub defer: bool,
}

impl fmt::Debug for WriteFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteFile")
            .field("path", &self.path)
            .field("content", &format_args!("<{} bytes>", self.content.len()))
            .field("mode", &format_args!("{:#o}", self.mode))
            .field("owner", &self.owner)
            .field("append", &self.append)
            .field("defer", &self.defer)
            .finish()
    }
}

/// Partition table type for `disk_setup`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableType {
    /// MBR (msdos), written with `sfdisk`.
    Mbr,
    /// GPT, written with `sgdisk`.
    Gpt,
}

/// One partition of a `disk_setup` layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Partition {
    /// Share of the disk in percent (1..=100).
    pub percent: u8,
    /// Partition type code (`82`, `8300`), if given.
    pub type_code: Option<String>,
}

/// One `disk_setup` device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskSetup {
    /// Block device path (`/dev/sdb`).
    pub device: String,
    /// Table type (`table_type`, default `mbr`).
    pub table_type: TableType,
    /// Partitions (`layout: true` is one partition of 100 %).
    pub layout: Vec<Partition>,
    /// Re-partition a disk that already has a partition table or file system (`overwrite`, default false).
    pub overwrite: bool,
}

/// One `fs_setup` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FsSetup {
    /// Block device (`/dev/sdb`).
    pub device: String,
    /// Partition number on `device`, or `None` for the whole device (`partition: none` or absent).
    pub partition: Option<u32>,
    /// File system type for `mkfs.<type>` (`ext4`, `xfs`, `swap`, ...).
    pub filesystem: String,
    /// Label (`label`).
    pub label: Option<String>,
    /// Create even when a file system already exists (`overwrite`).
    pub overwrite: bool,
    /// Replace an existing file system of exactly this type (`replace_fs`).
    pub replace_fs: Option<String>,
    /// Extra `mkfs` arguments (`extra_opts`).
    pub extra_opts: Vec<String>,
}

impl FsSetup {
    /// The block device the file system goes on (`/dev/sdb1`, `/dev/nvme0n1p1`).
    pub fn target(&self) -> String {
        match self.partition {
            None => self.device.clone(),
            Some(n) if self.device.ends_with(|c: char| c.is_ascii_digit()) => format!("{}p{n}", self.device),
            Some(n) => format!("{}{n}", self.device),
        }
    }
}

/// One `mounts` entry, with `mount_default_fields` applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// What to mount (`/dev/sdb1`, `LABEL=data`, `server:/export`).
    pub spec: String,
    /// Where (`/data`, or `none` for swap).
    pub mountpoint: String,
    /// File system type (default `auto`).
    pub fstype: String,
    /// Options (default `defaults,nofail`).
    pub options: String,
    /// fstab dump field (default `0`).
    pub dump: String,
    /// fstab pass field (default `2`).
    pub pass: String,
}

impl Mount {
    /// True for a swap entry (`fstype: swap`).
    pub fn is_swap(&self) -> bool {
        self.fstype == "swap"
    }
}

/// One `users` entry.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct User {
    /// Login name.
    pub name: String,
    /// `gecos` (comment).
    pub gecos: Option<String>,
    /// `homedir`.
    pub homedir: Option<String>,
    /// `primary_group`.
    pub primary_group: Option<String>,
    /// Supplementary `groups` (created when missing).
    pub groups: Vec<String>,
    /// Login `shell`.
    pub shell: Option<String>,
    /// `inactive` days.
    pub inactive: Option<String>,
    /// `expiredate`.
    pub expiredate: Option<String>,
    /// `uid`.
    pub uid: Option<u32>,
    /// `system` account.
    pub system: bool,
    /// `no_create_home`.
    pub no_create_home: bool,
    /// `no_user_group`.
    pub no_user_group: bool,
    /// `passwd` / `hashed_passwd`: a crypt hash. Secret.
    pub hashed_passwd: Option<String>,
    /// `plain_text_passwd`. Secret.
    pub plain_text_passwd: Option<String>,
    /// `lock_passwd` (cloud-init's default: true).
    pub lock_passwd: bool,
    /// `sudo` rules (`ALL=(ALL) NOPASSWD:ALL`), written to `/etc/sudoers.d/`.
    pub sudo: Vec<String>,
    /// `ssh_authorized_keys`, added to `~/.ssh/authorized_keys`.
    pub ssh_authorized_keys: Vec<String>,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .field("groups", &self.groups)
            .field("shell", &self.shell)
            .field(
                "has_password",
                &(self.hashed_passwd.is_some() || self.plain_text_passwd.is_some()),
            )
            .field("lock_passwd", &self.lock_passwd)
            .field("sudo", &self.sudo.len())
            .field("ssh_authorized_keys", &self.ssh_authorized_keys.len())
            .finish_non_exhaustive()
    }
}

/// Which time daemon `ntp` configures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NtpClient {
    /// Whatever the host has: chrony first, then systemd-timesyncd (`ntp_client: auto` or absent).
    Auto,
    /// chrony.
    Chrony,
    /// systemd-timesyncd.
    Timesyncd,
}

/// The `ntp` module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ntp {
    /// `servers`.
    pub servers: Vec<String>,
    /// `pools` (cloud-init's defaults `0..3.pool.ntp.org` when both lists are empty).
    pub pools: Vec<String>,
    /// `ntp_client`.
    pub client: NtpClient,
}

/// Length-prefixed canonical encoding of a step, hashed into its id.
fn step_id(position: usize, module: Module, action: &Action) -> String {
    let mut h = Sha256::new();
    let mut field = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    field(b"capkk-step-v1");
    field(position.to_string().as_bytes());
    field(format!("{module:?}").as_bytes());
    let flag = |b: bool| if b { b"1" as &[u8] } else { b"0" };
    match action {
        Action::Command(c) => field(c.script.as_bytes()),
        Action::WriteFile(w) => {
            field(w.path.as_bytes());
            field(&w.content);
            field(w.mode.to_string().as_bytes());
            field(w.owner.as_bytes());
            field(flag(w.append));
            field(flag(w.defer));
        }
        Action::PartitionDisk(d) => {
            field(d.device.as_bytes());
            field(format!("{:?}", d.table_type).as_bytes());
            for p in &d.layout {
                field(p.percent.to_string().as_bytes());
                field(p.type_code.as_deref().unwrap_or("").as_bytes());
            }
            field(flag(d.overwrite));
        }
        Action::MakeFilesystem(f) => {
            field(f.target().as_bytes());
            field(f.filesystem.as_bytes());
            field(f.label.as_deref().unwrap_or("").as_bytes());
            field(flag(f.overwrite));
            field(f.replace_fs.as_deref().unwrap_or("").as_bytes());
            for o in &f.extra_opts {
                field(o.as_bytes());
            }
        }
        Action::Mount(m) => {
            for s in [&m.spec, &m.mountpoint, &m.fstype, &m.options, &m.dump, &m.pass] {
                field(s.as_bytes());
            }
        }
        Action::CreateUser(u) => {
            field(u.name.as_bytes());
            for s in [
                &u.gecos,
                &u.homedir,
                &u.primary_group,
                &u.shell,
                &u.inactive,
                &u.expiredate,
            ] {
                field(s.as_deref().unwrap_or("").as_bytes());
            }
            field(u.uid.map(|u| u.to_string()).unwrap_or_default().as_bytes());
            field(flag(u.system));
            field(flag(u.no_create_home));
            field(flag(u.no_user_group));
            field(u.hashed_passwd.as_deref().unwrap_or("").as_bytes());
            field(u.plain_text_passwd.as_deref().unwrap_or("").as_bytes());
            field(flag(u.lock_passwd));
            for list in [&u.groups, &u.sudo, &u.ssh_authorized_keys] {
                field(list.len().to_string().as_bytes());
                for s in list {
                    field(s.as_bytes());
                }
            }
        }
        Action::ConfigureNtp(n) => {
            for list in [&n.servers, &n.pools] {
                field(list.len().to_string().as_bytes());
                for s in list {
                    field(s.as_bytes());
                }
            }
            field(format!("{:?}", n.client).as_bytes());
        }
    }
    hex::encode(&h.finalize()[..8])
}
