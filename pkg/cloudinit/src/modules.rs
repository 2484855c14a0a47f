//! One function per supported cloud-config module: a [`Value`] in, actions out.

use crate::{
    encoding::Encoding,
    error::{Error, Result},
    plan::{
        Action, Command, DiskSetup, FsSetup, Mount, Ntp, NtpClient, Partition, TableType, User, WriteFile,
    },
    value::{Fields, Value, as_bool, scalar_string, string_list},
};

fn list<'a>(path: &str, v: &'a Value) -> Result<&'a [Value]> {
    match v {
        Value::Null => Ok(&[]),
        Value::Seq(items) => Ok(items),
        other => Err(Error::invalid(
            path,
            format!("expected a list, found {}", other.kind()),
        )),
    }
}

/// True for a value with no control characters or blanks (owners, names, servers).
fn is_word(s: &str) -> bool {
    !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn word(path: &str, s: String) -> Result<String> {
    if is_word(&s) {
        Ok(s)
    } else {
        Err(Error::invalid(
            path,
            "must be non-empty without blanks or control characters",
        ))
    }
}

fn single_line(path: &str, s: String) -> Result<String> {
    if s.contains(['\n', '\r', '\0']) {
        Err(Error::invalid(path, "must be a single line"))
    } else {
        Ok(s)
    }
}

fn absolute_path(path: &str, s: String) -> Result<String> {
    if !s.starts_with('/') {
        return Err(Error::invalid(path, "must be an absolute path"));
    }
    if s.contains(['\0', '\n']) || s.split('/').any(|c| c == "..") {
        return Err(Error::invalid(path, "must not contain NUL, newlines or `..`"));
    }
    Ok(s)
}

/// `runcmd` / `bootcmd`: string items verbatim, list items quoted like cloud-init's `shellify`.
pub(crate) fn commands(key: &str, v: &Value) -> Result<Vec<Action>> {
    let mut out = Vec::new();
    for (i, item) in list(key, v)?.iter().enumerate() {
        let path = format!("{key}[{i}]");
        let script = match item {
            Value::Str(s) => s.clone(),
            Value::Seq(words) => words
                .iter()
                .enumerate()
                .map(|(j, w)| {
                    scalar_string(&format!("{path}[{j}]"), w)
                        .map(|w| format!("'{}'", w.replace('\'', "'\"'\"'")))
                })
                .collect::<Result<Vec<_>>>()?
                .join(" "),
            other => {
                return Err(Error::invalid(
                    path,
                    format!("expected a string or a list, found {}", other.kind()),
                ));
            }
        };
        out.push(Action::Command(Command { script }));
    }
    Ok(out)
}

/// cloud-init's `decode_perms`: integers as-is (YAML 1.1 `0644` is already octal), strings as octal.
fn permissions(path: &str, v: &Value) -> Result<u32> {
    let mode = match v {
        Value::Int(i) => u32::try_from(*i).ok(),
        Value::Float(f) if f.fract() == 0.0 && *f >= 0.0 && *f <= 65535.0 => Some(*f as u32),
        Value::Str(s) => {
            let t = s.trim();
            let t = t.strip_prefix("0o").or_else(|| t.strip_prefix("0O")).unwrap_or(t);
            let digits: String = t.chars().filter(|&c| c != '_').collect();
            if digits.is_empty() {
                None
            } else {
                u32::from_str_radix(&digits, 8).ok()
            }
        }
        _ => None,
    };
    match mode {
        Some(m) if m <= 0o7777 => Ok(m),
        _ => Err(Error::invalid(
            path,
            "expected an octal mode such as '0640' (at most 07777)",
        )),
    }
}

/// `write_files`.
pub(crate) fn write_files(v: &Value) -> Result<Vec<WriteFile>> {
    let mut out = Vec::new();
    // One budget for the whole payload, not per file.
    let mut budget = crate::MAX_DECODED_BYTES;
    for (i, item) in list("write_files", v)?.iter().enumerate() {
        let mut f = Fields::new(format!("write_files[{i}]"), item)?;
        let path = absolute_path(&f.path_of("path"), f.required_str("path")?)?;
        if f.get("source").is_some() {
            return Err(Error::invalid(
                f.path_of("source"),
                "downloading content from a source is not supported",
            ));
        }
        let encoding_text = f.str("encoding")?.unwrap_or_default();
        let encoding = Encoding::parse(&encoding_text).ok_or_else(|| {
            Error::invalid(
                f.path_of("encoding"),
                format!(
                    "unknown encoding {encoding_text:?} (use base64/b64, gzip/gz, gzip+base64/gz+b64/gzip+b64/gz+base64 \
                     or text/plain)"
                ),
            )
        })?;
        let content_path = f.path_of("content");
        let raw = match f.get("content") {
            None => Vec::new(),
            Some(Value::Bytes(b)) => b.clone(),
            Some(other) => scalar_string(&content_path, other)?.into_bytes(),
        };
        let content = encoding
            .decode_limited(&raw, budget)
            .map_err(|message| Error::DecodeContent {
                field: content_path.clone(),
                encoding: encoding_text.clone(),
                message,
            })?;
        budget -= content.len() as u64;
        let owner = match f.str("owner")? {
            None => "root:root".to_owned(),
            Some(o) => word(&f.path_of("owner"), o.trim().to_owned())?,
        };
        let mode = match f.get("permissions") {
            None => 0o644,
            Some(p) => permissions(&f.path_of("permissions"), p)?,
        };
        let append = f.bool("append")?.unwrap_or(false);
        let defer = f.bool("defer")?.unwrap_or(false);
        f.deny_unknown()?;
        out.push(WriteFile {
            path,
            content,
            mode,
            owner,
            append,
            defer,
        });
    }
    Ok(out)
}

/// `users`.
pub(crate) fn users(v: &Value) -> Result<Vec<Action>> {
    let mut out = Vec::new();
    for (i, item) in list("users", v)?.iter().enumerate() {
        let path = format!("users[{i}]");
        match item {
            Value::Str(s) if s.trim() == "default" => {
                return Err(Error::invalid(
                    path,
                    "the distribution's \"default\" user is not supported (it comes from the image's cloud.cfg); \
                     list the user explicitly",
                ));
            }
            Value::Str(s) => {
                for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                    let name = word(&path, name.to_owned())?;
                    out.push(Action::CreateUser(User {
                        name,
                        lock_passwd: true,
                        ..Default::default()
                    }));
                }
            }
            Value::Map(_) => out.push(Action::CreateUser(user(&path, item)?)),
            other => {
                return Err(Error::invalid(
                    path,
                    format!("expected a mapping or a name, found {}", other.kind()),
                ));
            }
        }
    }
    Ok(out)
}

fn user(path: &str, item: &Value) -> Result<User> {
    let mut f = Fields::new(path, item)?;
    let name = word(&f.path_of("name"), f.required_str("name")?)?;
    let opt_word = |f: &mut Fields<'_>, key: &str| -> Result<Option<String>> {
        let p = f.path_of(key);
        f.str(key)?.map(|s| word(&p, s)).transpose()
    };
    let opt_line = |f: &mut Fields<'_>, key: &str| -> Result<Option<String>> {
        let p = f.path_of(key);
        f.str(key)?.map(|s| single_line(&p, s)).transpose()
    };
    let gecos = opt_line(&mut f, "gecos")?;
    let homedir = f
        .str("homedir")?
        .map(|h| absolute_path(&f.path_of("homedir"), h))
        .transpose()?;
    let primary_group = opt_word(&mut f, "primary_group")?;
    let groups = match f.get("groups") {
        None => Vec::new(),
        Some(g) => string_list(&f.path_of("groups"), g, true)?
            .into_iter()
            .map(|g| word(&f.path_of("groups"), g))
            .collect::<Result<_>>()?,
    };
    let shell = f
        .str("shell")?
        .map(|s| absolute_path(&f.path_of("shell"), s))
        .transpose()?;
    // CABPK renders its boolean `inactive` as `inactive: true`; cloud-init passes only string values to
    // `useradd --inactive` and ignores booleans. So do we.
    let inactive = match f.get("inactive") {
        None | Some(Value::Bool(_)) => None,
        Some(v) => Some(word(
            &f.path_of("inactive"),
            scalar_string(&f.path_of("inactive"), v)?,
        )?),
    };
    let expiredate = opt_word(&mut f, "expiredate")?;
    let uid = match f.get("uid") {
        None => None,
        Some(Value::Int(n)) => {
            Some(u32::try_from(*n).map_err(|_| Error::invalid(f.path_of("uid"), "out of range"))?)
        }
        Some(Value::Str(s)) => Some(
            s.trim()
                .parse()
                .map_err(|_| Error::invalid(f.path_of("uid"), "not a number"))?,
        ),
        Some(other) => {
            return Err(Error::invalid(
                f.path_of("uid"),
                format!("expected a number, found {}", other.kind()),
            ));
        }
    };
    let system = f.bool("system")?.unwrap_or(false);
    let no_create_home = f.bool("no_create_home")?.unwrap_or(false);
    let no_user_group = f.bool("no_user_group")?.unwrap_or(false);
    let passwd = opt_line(&mut f, "passwd")?;
    let hashed = opt_line(&mut f, "hashed_passwd")?;
    if passwd.is_some() && hashed.is_some() {
        return Err(Error::invalid(
            f.path_of("hashed_passwd"),
            "give either passwd or hashed_passwd",
        ));
    }
    let hashed_passwd = hashed.or(passwd);
    let plain_text_passwd = opt_line(&mut f, "plain_text_passwd")?;
    let lock_passwd = f.bool("lock_passwd")?.unwrap_or(true);
    let sudo = match f.get("sudo") {
        None | Some(Value::Bool(false)) => Vec::new(),
        Some(Value::Bool(true)) => {
            return Err(Error::invalid(
                f.path_of("sudo"),
                "expected a sudo rule such as \"ALL=(ALL) NOPASSWD:ALL\"",
            ));
        }
        Some(s) => string_list(&f.path_of("sudo"), s, false)?
            .into_iter()
            .map(|r| single_line(&f.path_of("sudo"), r))
            .collect::<Result<_>>()?,
    };
    let ssh_authorized_keys = match f.get("ssh_authorized_keys") {
        None => Vec::new(),
        Some(k) => string_list(&f.path_of("ssh_authorized_keys"), k, false)?
            .into_iter()
            .map(|k| single_line(&f.path_of("ssh_authorized_keys"), k.trim().to_owned()))
            .collect::<Result<_>>()?,
    };
    f.deny_unknown()?;
    Ok(User {
        name,
        gecos,
        homedir,
        primary_group,
        groups,
        shell,
        inactive,
        expiredate,
        uid,
        system,
        no_create_home,
        no_user_group,
        hashed_passwd,
        plain_text_passwd,
        lock_passwd,
        sudo,
        ssh_authorized_keys,
    })
}

/// `ntp`: `None` when disabled.
pub(crate) fn ntp(v: &Value) -> Result<Option<Action>> {
    if v.is_null() {
        return Ok(None);
    }
    let mut f = Fields::new("ntp", v)?;
    if !f.bool("enabled")?.unwrap_or(true) {
        // Still reject unknown fields so typos do not go unnoticed.
        let _ = (f.get("servers"), f.get("pools"), f.get("ntp_client"));
        f.deny_unknown()?;
        return Ok(None);
    }
    let names = |f: &mut Fields<'_>, key: &str| -> Result<Vec<String>> {
        match f.get(key) {
            None => Ok(Vec::new()),
            Some(v) => string_list(&f.path_of(key), v, false)?
                .into_iter()
                .map(|s| word(&f.path_of(key), s))
                .collect(),
        }
    };
    let servers = names(&mut f, "servers")?;
    let mut pools = names(&mut f, "pools")?;
    if servers.is_empty() && pools.is_empty() {
        pools = (0..4).map(|i| format!("{i}.pool.ntp.org")).collect();
    }
    let client = match f.str("ntp_client")?.as_deref().map(str::trim) {
        None | Some("auto") => NtpClient::Auto,
        Some("chrony") => NtpClient::Chrony,
        Some("systemd-timesyncd") => NtpClient::Timesyncd,
        Some(other) => {
            return Err(Error::invalid(
                "ntp.ntp_client",
                format!("{other:?} is not supported (auto, chrony, systemd-timesyncd)"),
            ));
        }
    };
    if f.get("config").is_some() {
        return Err(Error::invalid(
            "ntp.config",
            "custom ntp client templates are not supported",
        ));
    }
    f.deny_unknown()?;
    Ok(Some(Action::ConfigureNtp(Ntp {
        servers,
        pools,
        client,
    })))
}

fn device(path: &str, s: String) -> Result<String> {
    if !s.starts_with("/dev/") {
        return Err(Error::invalid(
            path,
            "must be a /dev/ path (cloud-init's metadata aliases such as ephemeral0 are not available)",
        ));
    }
    absolute_path(path, s).and_then(|s| word(path, s))
}

/// `disk_setup`.
pub(crate) fn disk_setup(v: &Value) -> Result<Vec<Action>> {
    let entries = match v {
        Value::Null => return Ok(Vec::new()),
        Value::Map(entries) => entries,
        other => {
            return Err(Error::invalid(
                "disk_setup",
                format!("expected a mapping, found {}", other.kind()),
            ));
        }
    };
    let mut out = Vec::new();
    for (k, cfg) in entries {
        let name = k.key_text();
        let path = format!("disk_setup.{name}");
        let dev = device(&path, name)?;
        let mut f = Fields::new(path.clone(), cfg)?;
        let table_type = match f.str("table_type")?.as_deref().map(str::trim) {
            None | Some("mbr") => TableType::Mbr,
            Some("gpt") => TableType::Gpt,
            Some(other) => {
                return Err(Error::invalid(
                    f.path_of("table_type"),
                    format!("{other:?} is not mbr or gpt"),
                ));
            }
        };
        let layout_path = f.path_of("layout");
        let layout = match f.get("layout") {
            None | Some(Value::Bool(false)) => Vec::new(),
            Some(Value::Bool(true)) => vec![Partition {
                percent: 100,
                type_code: None,
            }],
            Some(Value::Seq(parts)) => {
                let mut out = Vec::new();
                for (j, p) in parts.iter().enumerate() {
                    let pp = format!("{layout_path}[{j}]");
                    let (pct, code) = match p {
                        Value::Seq(pair) if pair.len() == 2 => {
                            (&pair[0], Some(scalar_string(&pp, &pair[1])?))
                        }
                        other => (other, None),
                    };
                    let percent = match pct {
                        Value::Int(n) if (1..=100).contains(n) => *n as u8,
                        _ => {
                            return Err(Error::invalid(
                                pp,
                                "expected a percentage 1..100 or [percentage, type]",
                            ));
                        }
                    };
                    if let Some(c) = &code
                        && !c.chars().all(|c| c.is_ascii_hexdigit())
                    {
                        return Err(Error::invalid(
                            pp,
                            "partition type must be a hex code such as 83 or 8300",
                        ));
                    }
                    out.push(Partition {
                        percent,
                        type_code: code,
                    });
                }
                let total: u32 = out.iter().map(|p| u32::from(p.percent)).sum();
                if total > 100 {
                    return Err(Error::invalid(layout_path, "partitions add up to more than 100%"));
                }
                out
            }
            Some(other) => {
                return Err(Error::invalid(
                    layout_path,
                    format!("expected true, false or a list, found {}", other.kind()),
                ));
            }
        };
        let overwrite = f.bool("overwrite")?.unwrap_or(false);
        f.deny_unknown()?;
        if !layout.is_empty() {
            out.push(Action::PartitionDisk(DiskSetup {
                device: dev,
                table_type,
                layout,
                overwrite,
            }));
        }
    }
    Ok(out)
}

/// `fs_setup`.
pub(crate) fn fs_setup(v: &Value) -> Result<Vec<Action>> {
    let mut out = Vec::new();
    for (i, item) in list("fs_setup", v)?.iter().enumerate() {
        let mut f = Fields::new(format!("fs_setup[{i}]"), item)?;
        if f.get("cmd").is_some() {
            return Err(Error::invalid(
                f.path_of("cmd"),
                "custom mkfs commands are not supported",
            ));
        }
        let dev = device(&f.path_of("device"), f.required_str("device")?)?;
        let filesystem = word(&f.path_of("filesystem"), f.required_str("filesystem")?)?;
        if !filesystem.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(Error::invalid(
                f.path_of("filesystem"),
                "must be a file system name such as ext4",
            ));
        }
        let partition = match f.get("partition") {
            None => None,
            Some(Value::Int(n)) if (1..=128).contains(n) => Some(*n as u32),
            Some(Value::Str(s)) if s.trim() == "none" => None,
            Some(Value::Str(s)) if s.trim().parse::<u32>().is_ok_and(|n| (1..=128).contains(&n)) => {
                s.trim().parse().ok()
            }
            Some(_) => {
                return Err(Error::invalid(
                    f.path_of("partition"),
                    "expected a partition number or none (auto and any are not supported)",
                ));
            }
        };
        let label = f
            .str("label")?
            .map(|l| word(&f.path_of("label"), l))
            .transpose()?;
        let overwrite = f.bool("overwrite")?.unwrap_or(false);
        let replace_fs = f
            .str("replace_fs")?
            .map(|l| word(&f.path_of("replace_fs"), l))
            .transpose()?;
        let extra_opts = match f.get("extra_opts") {
            None => Vec::new(),
            Some(Value::Str(s)) => s.split_whitespace().map(str::to_owned).collect(),
            Some(o) => string_list(&f.path_of("extra_opts"), o, false)?,
        };
        f.deny_unknown()?;
        out.push(Action::MakeFilesystem(FsSetup {
            device: dev,
            partition,
            filesystem,
            label,
            overwrite,
            replace_fs,
            extra_opts,
        }));
    }
    Ok(out)
}

/// Defaults for `mounts` fields 3..6 (`mount_default_fields`, cloud-init's defaults without its own unit).
pub(crate) fn mount_defaults(v: Option<&Value>) -> Result<[Option<String>; 6]> {
    let mut d = [
        None,
        None,
        Some("auto".into()),
        Some("defaults,nofail".into()),
        Some("0".into()),
        Some("2".into()),
    ];
    if let Some(v) = v {
        let items = list("mount_default_fields", v)?;
        if items.len() > 6 {
            return Err(Error::invalid("mount_default_fields", "has more than 6 fields"));
        }
        for (i, item) in items.iter().enumerate() {
            d[i] = if item.is_null() {
                None
            } else {
                Some(scalar_string(&format!("mount_default_fields[{i}]"), item)?)
            };
        }
    }
    Ok(d)
}

/// `mounts`.
pub(crate) fn mounts(v: &Value, defaults: &[Option<String>; 6]) -> Result<Vec<Action>> {
    let mut out = Vec::new();
    for (i, item) in list("mounts", v)?.iter().enumerate() {
        let path = format!("mounts[{i}]");
        let fields = list(&path, item)?;
        if fields.is_empty() || fields.len() > 6 {
            return Err(Error::invalid(path, "expected 1 to 6 fields"));
        }
        let mut f: [Option<String>; 6] = defaults.clone();
        for (j, v) in fields.iter().enumerate() {
            f[j] = if v.is_null() {
                None
            } else {
                Some(scalar_string(&format!("{path}[{j}]"), v)?)
            };
        }
        let mut spec = f[0]
            .clone()
            .ok_or_else(|| Error::invalid(format!("{path}[0]"), "device is required"))?;
        // Pseudo file systems (`tmpfs`, `none`, ...) are not devices; other bare names are (`sdb1` -> /dev/sdb1).
        let pseudo = matches!(
            spec.as_str(),
            "tmpfs" | "none" | "proc" | "sysfs" | "overlay" | "ramfs"
        );
        if !(pseudo || spec.starts_with('/') || spec.contains('=') || spec.contains(':')) {
            if spec.starts_with("ephemeral") || spec == "swap" {
                return Err(Error::invalid(
                    format!("{path}[0]"),
                    "metadata device aliases (ephemeral0, swap) are not available; give a /dev path",
                ));
            }
            spec = format!("/dev/{spec}");
        }
        let mountpoint = f[1].clone().ok_or_else(|| {
            Error::invalid(
                format!("{path}[1]"),
                "removing mounts (no mount point) is not supported",
            )
        })?;
        let fstype = f[2].clone().unwrap_or_else(|| "auto".into());
        if fstype != "swap" && mountpoint != "none" {
            absolute_path(&format!("{path}[1]"), mountpoint.clone())?;
        }
        let m = Mount {
            spec: word(&format!("{path}[0]"), spec)?,
            mountpoint: word(&format!("{path}[1]"), mountpoint)?,
            fstype: word(&format!("{path}[2]"), fstype)?,
            options: word(
                &format!("{path}[3]"),
                f[3].clone().unwrap_or_else(|| "defaults".into()),
            )?,
            dump: word(&format!("{path}[4]"), f[4].clone().unwrap_or_else(|| "0".into()))?,
            pass: word(&format!("{path}[5]"), f[5].clone().unwrap_or_else(|| "0".into()))?,
        };
        out.push(Action::Mount(m));
    }
    Ok(out)
}

/// A top-level boolean that is harmless only when false (`package_update: false`).
pub(crate) fn harmless_when_false(key: &str, v: &Value) -> Result<()> {
    if v.is_null() || !as_bool(key, v)? {
        Ok(())
    } else {
        Err(Error::UnknownModule {
            module: key.to_owned(),
            ignored: crate::IGNORED_KEYS.join(", "),
        })
    }
}
