//! Shell rendering of plan steps (pure; no I/O). Every interpolated word goes through
//! [`capkk_executor::quote`]; every content (file bytes, keys, sudo rules, password hashes, command text) is
//! embedded base64-encoded in a quoted here-document of a script that travels on stdin, never on a command
//! line.

use capkk_cloudinit::{Action, DiskSetup, FsSetup, Mount, Ntp, NtpClient, Step, TableType, User, WriteFile};
use capkk_executor::quote;

use super::{SENTINEL, STATE_DIR};

/// Bytes of each step's output sent back (then redacted).
pub(crate) const TAIL_BYTES: usize = 2048;

const DELIM: &str = "CAPKK_DATA";

/// `base64 -d` of `data` as a here-document: `base64 -d <<'CAPKK_DATA' ... CAPKK_DATA` (plus `redirect`).
fn decode_heredoc(data: &[u8], redirect: &str) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(data);
    let mut s = format!("base64 -d <<'{DELIM}' {redirect}\n");
    for chunk in b64.as_bytes().chunks(76) {
        s.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        s.push('\n');
    }
    s.push_str(DELIM);
    s.push('\n');
    s
}

/// The command line of every provisioning exec: saves the script from stdin into a 0600 file under the
/// 0700 state dir, checks it arrived whole (a cut connection must never run half a script), runs it from
/// `/` with stdin at `/dev/null`, removes it. Hang-ups are ignored and every step's output goes to a file,
/// so a dropped connection never interrupts a step: the host finishes it and journals it (the runner may then
/// die on a broken pipe when it reports, after the journal line and after removing its temporary files).
pub(crate) fn launcher(script_len: usize) -> String {
    format!(
        "trap '' HUP; umask 022; mkdir -p {parent} || exit 97; umask 077; D={dir}; mkdir -p \"$D\" && \
         chmod 700 \"$D\" && \
         f=$(mktemp \"$D/.run.XXXXXX\") || exit 97; cat > \"$f\"; \
         if [ $(wc -c < \"$f\") -eq {script_len} ]; then (cd / && sh \"$f\" < /dev/null); rc=$?; \
         else echo '@@capkk truncated'; rc=98; fi; rm -f \"$f\"; exit $rc",
        dir = quote(STATE_DIR),
        parent = quote(parent(STATE_DIR)),
    )
}

/// Shared definitions of every script.
fn prelude(plan_hash: &str, lock_wait_secs: u64) -> String {
    format!(
        r#"trap '' HUP
umask 077
D={dir}
J="$D/{plan_hash}.journal"
O="$D/{plan_hash}.out"
S={sentinel}
NL='
'
now_ms() {{ t=$(date +%s%N 2>/dev/null); case "$t" in *N|'') echo $(( $(date +%s) * 1000 ));; *) echo $(( t / 1000000 ));; esac; }}
done_rc() {{ sed -n "s/^$1 \([0-9][0-9]*\)\$/\1/p" "$J" 2>/dev/null | tail -n 1; }}
report() {{ t1=$(now_ms); if [ -s "$O" ]; then tl=$(tail -c {TAIL_BYTES} "$O" | base64 | tr -d '\n'); rm -f "$O"; else tl=; fi; echo "@@capkk step $1 $2 $(( t1 - $3 )) $tl"; T=$t1; }}
provisioned() {{ [ -e "$S" ] || case "$JD" in *"${{NL}}provisioned$NL"*) true;; *) false;; esac; }}
mark_sentinel() {{ if [ -e "$O" ]; then rm -f "$O"; fi; if [ -e "$S" ]; then case "$JD" in *"${{NL}}provisioned$NL"*) ;; *) echo provisioned >> "$J"; JD="$JD${{NL}}provisioned$NL";; esac; fi; if provisioned; then echo '@@capkk sentinel 1'; else echo '@@capkk sentinel 0'; fi; }}
if command -v flock >/dev/null 2>&1; then exec 9>>"$D/lock"; flock -w {lock_wait_secs} 9 || {{ echo '@@capkk busy'; exit 0; }}; fi
JD="$NL$(cat "$J" 2>/dev/null)$NL"
T=$(now_ms)
"#,
        dir = quote(STATE_DIR),
        sentinel = quote(SENTINEL),
    )
}

/// One exec's script: an optional probe section, then `steps` in order, then the sentinel state.
///
/// - Probe (`probe_ids` = every step id of the plan; first exec of a run only): print the journal and the kept
///   output tails; when the sentinel exists (or the journal says `provisioned`) and this plan's journal is
///   empty or complete, print `skipall` and stop.
/// - A step already in the journal is not run again (`already <id> <rc>`); this check runs on the host,
///   under the host-wide provisioning lock.
/// - Steps run with the lock's descriptor closed, so a daemon they start (`systemctl` without systemd,
///   `service ... restart`, a backgrounded process) cannot hold the lock after the run.
/// - Steps run with cloud-init's umask (022); the runner's own files (journal, scripts, output) are 0600.
/// - A non-command step runs under `set -e` and is journaled (`<id> 0`) only after it succeeded; a failure
///   stops the script.
/// - A command item is journaled `<id> start` before it runs and `<id> <exit code>` after it ran, whatever
///   the exit code (cloud-init semantics: a failed item still counts as run, and the next one runs). A
///   failed item's output tail is kept (`<plan-hash>.<id>.tail`, 0600) so later runs can still report it.
pub(crate) fn segment(
    plan_hash: &str,
    lock_wait_secs: u64,
    steps: &[&Step],
    probe_ids: Option<&[&str]>,
) -> String {
    let mut s = prelude(plan_hash, lock_wait_secs);
    if let Some(ids) = probe_ids {
        s.push_str(&format!(
            "echo '@@capkk journal'; cat \"$J\" 2>/dev/null; echo '@@capkk journal-end'\n\
             for f in \"$D/{plan_hash}\".*.tail; do [ -e \"$f\" ] || continue; i=${{f##*/}}; i=${{i#{plan_hash}.}}; \
             echo \"@@capkk tail ${{i%.tail}} $(cat \"$f\")\"; done\n\
             if provisioned; then\n\
             if [ ! -s \"$J\" ] || printf '%s\\n' {ids} | awk 'NR == FNR {{ want[$1] = 1; next }} \
             $2 ~ /^[0-9]+$/ {{ delete want[$1] }} END {{ for (k in want) exit 1 }}' - \"$J\"; then\n\
             echo '@@capkk sentinel 1'; echo '@@capkk skipall'; exit 0\nfi\nfi\n",
            ids = if ids.is_empty() {
                "''".to_owned()
            } else {
                ids.join(" ")
            },
        ));
    }
    for step in steps {
        let id = &step.id;
        s.push_str(&format!(
            "case \"$JD\" in *\"$NL{id} \"[0-9]*) r=$(done_rc {id});; *) r=;; esac\n\
             if [ -n \"$r\" ]; then echo \"@@capkk already {id} $r\"; else\n"
        ));
        match &step.action {
            Action::Command(c) => s.push_str(&format!(
                "F=\"$D/{plan_hash}.{id}.sh\"\n{write}echo '{id} start' >> \"$J\"\nt0=$T\n\
                 umask 022\nsh \"$F\" < /dev/null > \"$O\" 2>&1 9>&-\nrc=$?\numask 077\n\
                 if [ $rc -ne 0 ] && [ -s \"$O\" ]; then tail -c {TAIL_BYTES} \"$O\" | base64 | tr -d '\\n' > \"$D/{plan_hash}.{id}.tail\"; fi\n\
                 echo \"{id} $rc\" >> \"$J\"\nrm -f \"$F\"\n\
                 report {id} $rc $t0\n",
                write = decode_heredoc(c.script.as_bytes(), "> \"$F\""),
            )),
            other => s.push_str(&format!(
                "t0=$T\n(\nset -e\numask 022\n{body})> \"$O\" 2>&1 9>&-\nrc=$?\n\
                 if [ $rc -eq 0 ]; then echo '{id} 0' >> \"$J\"; fi\nreport {id} $rc $t0\n\
                 if [ $rc -ne 0 ]; then mark_sentinel; exit 0; fi\n",
                body = body(other),
            )),
        }
        s.push_str("fi\n");
    }
    s.push_str("mark_sentinel\n");
    s
}

/// The body of a non-command step, run under `set -e` with output captured.
pub(crate) fn body(action: &Action) -> String {
    match action {
        Action::Command(c) => decode_heredoc(c.script.as_bytes(), "| sh"),
        Action::WriteFile(f) => write_file(f),
        Action::PartitionDisk(d) => partition_disk(d),
        Action::MakeFilesystem(f) => make_filesystem(f),
        Action::Mount(m) => mount(m),
        Action::CreateUser(u) => user(u),
        Action::ConfigureNtp(n) => ntp(n),
    }
}

fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// Write (or append to) a file atomically: a temp file beside it, exact bytes, owner, then mode, then rename.
/// Parent directories are created 0755 like cloud-init's `ensure_dir`.
///
/// Few processes per file: the temp file is created by the shell with `O_EXCL` (noclobber; `mktemp` only
/// when the name is taken) under a umask that yields the mode directly when it has no execute or special
/// bits (otherwise `chmod`), and `chown` is skipped for `root:root` unless the directory is setgid.
fn write_file(f: &WriteFile) -> String {
    let path = quote(&f.path);
    let dir = quote(parent(&f.path));
    let simple_mode = f.mode & 0o7111 == 0;
    let umask = if simple_mode { 0o777 & !f.mode } else { 0o077 };
    let mut s = format!(
        "d={dir}\n[ -d \"$d\" ] || {{ umask 022; mkdir -p -- \"$d\"; }}\numask {umask:04o}\nt=\"$d/.capkk.$$\"\n\
         trap 'if [ -e \"$t\" ]; then rm -f \"$t\"; fi' EXIT\n\
         set -C\nif true 2>/dev/null > \"$t\"; then m=; else t=$(mktemp \"$d/.capkk.XXXXXX\"); m=1; fi\nset +C\n"
    );
    if f.append {
        s.push_str(&format!("if [ -e {path} ]; then cat -- {path} >> \"$t\"; fi\n"));
    }
    if !f.content.is_empty() {
        s.push_str(&decode_heredoc(&f.content, ">> \"$t\""));
    }
    match f.owner.as_str() {
        "root" => {}
        "root:root" => s.push_str("if [ -g \"$d\" ]; then chown -- root:root \"$t\"; fi\n"),
        owner => s.push_str(&format!("chown -- {} \"$t\"\n", quote(owner))),
    }
    if simple_mode {
        s.push_str(&format!(
            "if [ -n \"$m\" ]; then chmod {:04o} \"$t\"; fi\n",
            f.mode
        ));
    } else {
        s.push_str(&format!("chmod {:04o} \"$t\"\n", f.mode));
    }
    s.push_str(&format!("mv -f -- \"$t\" {path}\n"));
    s
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
    let name = quote(&u.name);
    let mut add = vec!["useradd".to_owned()];
    let mut opt = |flag: &str, v: &Option<String>| {
        if let Some(v) = v {
            add.push(flag.to_owned());
            add.push(quote(v));
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
        add.push(quote(&u.groups.join(",")));
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
    add.push(name.clone());
    let mut s = String::new();
    for g in &u.groups {
        let g = quote(g);
        s.push_str(&format!("getent group {g} >/dev/null || groupadd -- {g}\n"));
    }
    s.push_str(&format!(
        "if id -u -- {name} >/dev/null 2>&1; then\n  echo 'user exists: not re-created'\n"
    ));
    if !u.groups.is_empty() {
        s.push_str(&format!(
            "  usermod -a -G {} -- {name}\n",
            quote(&u.groups.join(","))
        ));
    }
    s.push_str(&format!("else\n  {}\nfi\n", add.join(" ")));
    if let Some(h) = &u.hashed_passwd {
        s.push_str(&decode_heredoc(
            format!("{}:{h}\n", u.name).as_bytes(),
            "| chpasswd -e",
        ));
    }
    if let Some(p) = &u.plain_text_passwd {
        s.push_str(&decode_heredoc(
            format!("{}:{p}\n", u.name).as_bytes(),
            "| chpasswd",
        ));
    }
    if u.lock_passwd {
        s.push_str(&format!("usermod --lock -- {name}\n"));
    }
    if !u.sudo.is_empty() {
        let rules: String = u.sudo.iter().map(|r| format!("{} {r}\n", u.name)).collect();
        let file = sudoers_file(&u.name);
        s.push_str(&format!(
            "umask 077\nst=$(mktemp /etc/sudoers.d/.capkk.XXXXXX)\ntrap 'rm -f \"$st\"' EXIT\n{write}\
             chmod 0440 \"$st\"\nif command -v visudo >/dev/null 2>&1; then visudo -cf \"$st\"; fi\n\
             mv -f -- \"$st\" {file}\n",
            write = decode_heredoc(rules.as_bytes(), "> \"$st\""),
            file = quote(&file),
        ));
    }
    if !u.ssh_authorized_keys.is_empty() {
        let keys: String = u.ssh_authorized_keys.iter().map(|k| format!("{k}\n")).collect();
        s.push_str(&format!(
            "h=$(getent passwd {name} | cut -d: -f6)\n[ -n \"$h\" ]\ng=$(id -gn -- {name})\n\
             mkdir -p -- \"$h/.ssh\"\nchmod 700 \"$h/.ssh\"\nchown -- {name}:\"$g\" \"$h/.ssh\"\n\
             ak=\"$h/.ssh/authorized_keys\"\ntouch \"$ak\"\n\
             {read}chmod 600 \"$ak\"\nchown -- {name}:\"$g\" \"$ak\"\n",
            read = decode_heredoc(
                keys.as_bytes(),
                "| while IFS= read -r k; do [ -z \"$k\" ] || grep -qxF -- \"$k\" \"$ak\" || \
                 printf '%s\\n' \"$k\" >> \"$ak\"; done"
            ),
        ));
    }
    s
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
    let chrony_ok = n.client != NtpClient::Timesyncd;
    let timesyncd_ok = n.client != NtpClient::Chrony;
    format!(
        "if {chrony_ok} && command -v chronyd >/dev/null 2>&1; then\n\
         if [ -d /etc/chrony ]; then f=/etc/chrony/chrony.conf; else f=/etc/chrony.conf; fi\n\
         umask 022\nt=$(mktemp \"$f.capkk.XXXXXX\")\n{chrony}chmod 0644 \"$t\"\nmv -f -- \"$t\" \"$f\"\n\
         echo \"configured chrony in $f\"\n\
         systemctl restart chrony 2>/dev/null || systemctl restart chronyd\n\
         elif {timesyncd_ok} && {{ [ -x /lib/systemd/systemd-timesyncd ] || [ -x /usr/lib/systemd/systemd-timesyncd ]; }}; then\n\
         umask 022\nmkdir -p /etc/systemd/timesyncd.conf.d\nf=/etc/systemd/timesyncd.conf.d/capkk.conf\n\
         t=$(mktemp \"$f.XXXXXX\")\n{timesyncd}chmod 0644 \"$t\"\nmv -f -- \"$t\" \"$f\"\n\
         echo \"configured systemd-timesyncd in $f\"\nsystemctl restart systemd-timesyncd\n\
         else\necho 'ntp: no supported time daemon found ({want})' >&2\nexit 1\nfi\n",
        chrony = decode_heredoc(chrony_conf(n).as_bytes(), "> \"$t\""),
        timesyncd = decode_heredoc(timesyncd_conf(n).as_bytes(), "> \"$t\""),
        want = match n.client {
            NtpClient::Auto => "chrony or systemd-timesyncd",
            NtpClient::Chrony => "chrony",
            NtpClient::Timesyncd => "systemd-timesyncd",
        },
    )
}

/// Partition a disk; a disk that already has a partition table or a file system signature is left alone
/// unless `overwrite` is set (then it is wiped first).
fn partition_disk(d: &DiskSetup) -> String {
    let dev = quote(&d.device);
    let mut s =
        format!("dev={dev}\n[ -b \"$dev\" ] || {{ echo \"$dev is not a block device\" >&2; exit 1; }}\n");
    if d.overwrite {
        s.push_str("wipefs -a -- \"$dev\"\n");
    } else {
        s.push_str(
            "pt=$(blkid -p -o value -s PTTYPE -- \"$dev\" 2>/dev/null || true)\n\
             fs=$(blkid -p -o value -s TYPE -- \"$dev\" 2>/dev/null || true)\n\
             if [ -n \"$pt$fs\" ]; then echo \"$dev already holds ${pt:-$fs}: not partitioned (overwrite is false)\"; exit 0; fi\n",
        );
    }
    s.push_str("total=$(blockdev --getsz \"$dev\")\n");
    let last = d.layout.len() - 1;
    let full: u32 = d.layout.iter().map(|p| u32::from(p.percent)).sum();
    match d.table_type {
        TableType::Mbr => {
            s.push_str("{\necho 'label: dos'\n");
            for (i, p) in d.layout.iter().enumerate() {
                let ty = p.type_code.as_deref().unwrap_or("83");
                if i == last && full == 100 {
                    s.push_str(&format!("echo ',,{ty}'\n"));
                } else {
                    s.push_str(&format!("echo \",$(( total * {} / 100 )),{ty}\"\n", p.percent));
                }
            }
            s.push_str("} | sfdisk --no-reread -- \"$dev\"\n");
        }
        TableType::Gpt => {
            let mut args = String::from("sgdisk");
            for (i, p) in d.layout.iter().enumerate() {
                let ty = p.type_code.as_deref().unwrap_or("8300");
                let n = i + 1;
                if i == last && full == 100 {
                    args.push_str(&format!(" -n {n}:0:0 -t {n}:{ty}"));
                } else {
                    args.push_str(&format!(
                        " -n \"{n}:0:+$(( total * {} / 100 / 2 ))K\" -t {n}:{ty}",
                        p.percent
                    ));
                }
            }
            s.push_str(&format!("{args} -- \"$dev\"\n"));
        }
    }
    s.push_str("partprobe \"$dev\" 2>/dev/null || blockdev --rereadpt \"$dev\" 2>/dev/null || true\nudevadm settle 2>/dev/null || true\n");
    s
}

/// Create a file system; an existing file system (or, on a whole disk, a partition table) is kept unless
/// `overwrite` is set or it is of the `replace_fs` type.
fn make_filesystem(f: &FsSetup) -> String {
    let dev = quote(&f.target());
    let mut s = format!(
        "dev={dev}\n[ -b \"$dev\" ] || {{ echo \"$dev is not a block device\" >&2; exit 1; }}\n\
         cur=$(blkid -p -o value -s TYPE -- \"$dev\" 2>/dev/null || true)\n"
    );
    if f.partition.is_none() {
        s.push_str("pt=$(blkid -p -o value -s PTTYPE -- \"$dev\" 2>/dev/null || true)\n");
    } else {
        s.push_str("pt=\n");
    }
    let replace = f.replace_fs.as_deref().map(quote).unwrap_or_else(|| "''".into());
    s.push_str(&format!(
        "if [ -n \"$cur$pt\" ] && [ {ow} = 0 ] && [ \"$cur\" != {replace} ]; then \
         echo \"$dev already holds ${{cur:-$pt}}: no file system created (overwrite is false)\"; exit 0; fi\n",
        ow = u8::from(f.overwrite),
    ));
    let fs = f.filesystem.as_str();
    let mut cmd = if fs == "swap" {
        vec!["mkswap".to_owned()]
    } else {
        vec![quote(&format!("mkfs.{fs}"))]
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
        cmd.push(quote(l));
    }
    cmd.extend(f.extra_opts.iter().map(|o| quote(o)));
    let force = match fs {
        "ext2" | "ext3" | "ext4" => Some("-F"),
        "xfs" | "btrfs" => Some("-f"),
        _ => None,
    };
    if let Some(force) = force {
        s.push_str(&format!(
            "force=\nif [ -n \"$cur$pt\" ]; then force={force}; fi\n"
        ));
        cmd.push("$force".into());
    }
    cmd.push("\"$dev\"".into());
    s.push_str(&cmd.join(" "));
    s.push('\n');
    s
}

/// Add an fstab entry (unless the mount point already has one) and mount it (or `swapon`).
fn mount(m: &Mount) -> String {
    let spec = quote(&m.spec);
    let mp = quote(&m.mountpoint);
    let options = format!("{},comment=capkk", m.options);
    let line = format!(
        "{}\t{}\t{}\t{}\t{}\t{}",
        m.spec, m.mountpoint, m.fstype, options, m.dump, m.pass
    );
    let mut s = format!(
        "touch /etc/fstab\nif awk -v s={spec} -v m={mp} '$1 == s && $2 == m {{ f = 1 }} END {{ exit !f }}' /etc/fstab; then \
         echo 'fstab entry exists'; else\n{append}fi\n",
        append = decode_heredoc(format!("{line}\n").as_bytes(), ">> /etc/fstab"),
    );
    if m.is_swap() {
        s.push_str(&format!(
            "if ! awk 'NR > 1 {{ print $1 }}' /proc/swaps | grep -qxF -- \"$(readlink -f {spec} 2>/dev/null || echo {spec})\"; then swapon {spec}; fi\n"
        ));
    } else {
        s.push_str(&format!(
            "umask 022\nmkdir -p -- {mp}\nif ! mountpoint -q {mp}; then mount {mp}; fi\n"
        ));
    }
    s
}
