//! Bootstrap data (cloud-config) to a typed, ordered plan. No I/O.
//!
//! CAPI's kubeadm bootstrap provider (CABPK) hands every Machine a Secret with `value` (the payload) and
//! `format` (`cloud-config`, the default, or `ignition`). [`parse`] turns that payload into a [`Plan`]: the
//! steps cloud-init would have carried out on a cloud VM, in cloud-init's order, each with a stable id so the
//! executor (`capkk-service`'s `provisioning`) can journal and resume them.
//!
//! ```
//! let data = b"## template: jinja\n#cloud-config\nwrite_files:\n- path: /etc/hostname\n  content: \
//! {{ ds.meta_data.local_hostname }}\nruncmd:\n- echo hi\n";
//! let vars = capkk_cloudinit::TemplateVars::new().local_hostname("node-1");
//! let plan = capkk_cloudinit::parse(data, "cloud-config", &vars).unwrap();
//! assert_eq!(plan.steps.len(), 2);
//! assert_eq!(plan.steps[0].name(), "write_files /etc/hostname");
//! ```
//!
//! # Order
//! `bootcmd` → `disk_setup` → `fs_setup` → `mounts` → `write_files` → `users` → `ntp` →
//! `write_files` with `defer: true` → `runcmd`. Within a module, entries keep their order.
//!
//! # Modules
//! | key | what the plan does |
//! |---|---|
//! | `write_files` | path, content, `encoding` (every cloud-init spelling, see [`Encoding`]), `owner` (default `root:root`), `permissions` (octal string or YAML 1.1 integer, default `0644`), `append`, `defer`. Non-append writes replace the file. `source` is rejected. |
//! | `runcmd`, `bootcmd` | string items verbatim, list items quoted word by word like cloud-init |
//! | `users` | `name`, `gecos`, `homedir`, `primary_group`, `groups`, `shell`, `inactive`, `expiredate`, `uid`, `system`, `no_create_home`, `no_user_group`, `passwd`/`hashed_passwd`, `plain_text_passwd`, `lock_passwd` (default true), `sudo`, `ssh_authorized_keys`; the `default` user is rejected |
//! | `ntp` | `enabled`, `servers`, `pools`, `ntp_client` (`auto`, `chrony`, `systemd-timesyncd`) |
//! | `disk_setup` | per `/dev/` device: `table_type` (`mbr`, `gpt`), `layout` (true, or percentages / `[percent, type]`), `overwrite` |
//! | `fs_setup` | `device`, `partition` (number or `none`), `filesystem`, `label`, `overwrite`, `replace_fs`, `extra_opts` |
//! | `mounts`, `mount_default_fields` | fstab entries (defaults `auto`, `defaults,nofail`, `0`, `2`) |
//!
//! Every other top-level key is an [`Error::UnknownModule`] naming it, except the harmless keys in
//! [`IGNORED_KEYS`] (`output`, `final_message`, ...) and [`IGNORED_WHEN_FALSE`] (`package_update: false`, ...),
//! and `packages: []`. Unknown fields inside a module entry are errors too.
//!
//! # Jinja
//! A payload starting with `## template: jinja` is rendered first with [`TemplateVars`]; see that type for the
//! variables. Anything but a defined plain variable is an [`Error::RenderTemplate`].
//!
//! # Formats
//! `cloud-config` (or empty) is parsed; `ignition` is [`Error::UnsupportedFormat`]; so is anything else.
//!
//! # Secrets
//! Bootstrap data contains cluster CA keys and tokens. `Debug` of every plan type hides file contents,
//! commands and passwords, and no error message quotes content.

mod encoding;
mod error;
mod kubeadm;
mod modules;
mod plan;
mod template;
mod value;

pub use encoding::{Encoding, MAX_DECODED_BYTES};
pub use error::{Error, Result};
pub use kubeadm::{KubeadmIntent, KubeadmRole};
pub use plan::{
    Action, Command, DiskSetup, FsSetup, Module, Mount, Ntp, NtpClient, Partition, Plan, Step, TableType,
    User, WriteFile,
};
pub use template::TemplateVars;

use value::Value;

/// Top-level keys accepted and ignored because they cannot change the host's outcome: `output` (cloud-init's
/// log redirection), `final_message`, `merge_how`/`merge_type` (user-data merging hints) and
/// `preserve_hostname` (this provider never changes the hostname).
pub const IGNORED_KEYS: &[&str] = &[
    "output",
    "final_message",
    "merge_how",
    "merge_type",
    "preserve_hostname",
];

/// Top-level keys accepted only when false (they would install or upgrade packages, or reboot, otherwise).
pub const IGNORED_WHEN_FALSE: &[&str] = &["package_update", "package_upgrade", "package_reboot_if_required"];

/// The Secret `format` values: `cloud-config` (also empty) is supported.
pub const FORMAT_CLOUD_CONFIG: &str = "cloud-config";

/// Parse bootstrap data into a plan.
///
/// - `value`: the Secret's `value` bytes.
/// - `format`: the Secret's `format` (`cloud-config`, empty, or `ignition`).
/// - `vars`: variables for `## template: jinja` payloads.
///
/// Errors name the offending field or module and never quote content.
pub fn parse(value: &[u8], format: &str, vars: &TemplateVars) -> Result<Plan> {
    match format.trim() {
        "" | FORMAT_CLOUD_CONFIG => {}
        "ignition" => {
            return Err(Error::UnsupportedFormat {
                format: "ignition".into(),
                reason:
                    "Ignition configs are applied by Ignition at first boot and cannot be replayed over SSH; \
                         set the KubeadmConfig's spec.format to cloud-config"
                        .into(),
            });
        }
        other => {
            return Err(Error::UnsupportedFormat {
                format: other.chars().take(40).collect(),
                reason: "CABPK emits cloud-config or ignition; only cloud-config is executed".into(),
            });
        }
    }
    let text = payload_text(value)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
    // YAML is parsed with the header lines kept as comments, so parser line numbers match the payload.
    let doc = if template::has_jinja_header(first)? {
        let rendered = format!("#\n{}", template::render(rest, vars, 2)?);
        let second = rendered.lines().nth(1).unwrap_or("");
        check_cloud_config_header(second)?;
        value::parse_yaml(&rendered)?
    } else {
        check_cloud_config_header(first)?;
        value::parse_yaml(text)?
    };
    plan_from(&doc)
}

fn payload_text(value: &[u8]) -> Result<&str> {
    if value.starts_with(&[0x1f, 0x8b]) {
        return Err(Error::ReadPayload {
            message: "gzip-compressed user-data is not supported".into(),
        });
    }
    let text = std::str::from_utf8(value).map_err(|e| Error::ReadPayload {
        message: format!("payload is not UTF-8 text (byte {})", e.valid_up_to()),
    })?;
    if text.trim().is_empty() {
        return Err(Error::ReadPayload {
            message: "payload is empty".into(),
        });
    }
    Ok(text)
}

fn check_cloud_config_header(first: &str) -> Result<()> {
    let first = first.trim_end();
    if first == "#cloud-config" {
        return Ok(());
    }
    let kind = if first.starts_with("#!") {
        "a shell script (#!)"
    } else if first.to_ascii_lowercase().starts_with("content-type:") || first.starts_with("MIME-Version") {
        "MIME multi-part user-data"
    } else if first.starts_with("#include") {
        "an #include list"
    } else if first.starts_with("#cloud-boothook") {
        "a cloud-boothook"
    } else {
        "not a #cloud-config document"
    };
    Err(Error::ReadPayload {
        message: format!("expected a first line of #cloud-config, the payload is {kind}"),
    })
}

fn plan_from(doc: &Value) -> Result<Plan> {
    let entries: &[(Value, Value)] = match doc {
        Value::Null => &[],
        Value::Map(entries) => entries,
        other => {
            return Err(Error::ParseYaml {
                message: format!("expected a mapping at the top level, found {}", other.kind()),
            });
        }
    };
    let mut modules: std::collections::BTreeMap<&str, &Value> = Default::default();
    for (k, v) in entries {
        let key = match k {
            Value::Str(s) => s.as_str(),
            other => {
                return Err(Error::UnknownModule {
                    module: other.key_text(),
                    ignored: IGNORED_KEYS.join(", "),
                });
            }
        };
        match key {
            "write_files"
            | "runcmd"
            | "bootcmd"
            | "users"
            | "ntp"
            | "disk_setup"
            | "fs_setup"
            | "mounts"
            | "mount_default_fields" => {
                modules.insert(key, v);
            }
            k if IGNORED_KEYS.contains(&k) => {}
            k if IGNORED_WHEN_FALSE.contains(&k) => modules::harmless_when_false(k, v)?,
            "packages" if matches!(v, Value::Null) || matches!(v, Value::Seq(s) if s.is_empty()) => {}
            other => {
                return Err(Error::UnknownModule {
                    module: other.to_owned(),
                    ignored: format!(
                        "{}; {} when false; packages when empty",
                        IGNORED_KEYS.join(", "),
                        IGNORED_WHEN_FALSE.join(", ")
                    ),
                });
            }
        }
    }
    let get = |k: &str| modules.get(k).copied().unwrap_or(&Value::Null);
    let mut steps: Vec<(Module, Action)> = Vec::new();
    steps.extend(
        modules::commands("bootcmd", get("bootcmd"))?
            .into_iter()
            .map(|a| (Module::BootCmd, a)),
    );
    steps.extend(
        modules::disk_setup(get("disk_setup"))?
            .into_iter()
            .map(|a| (Module::DiskSetup, a)),
    );
    steps.extend(
        modules::fs_setup(get("fs_setup"))?
            .into_iter()
            .map(|a| (Module::FsSetup, a)),
    );
    let defaults = modules::mount_defaults(modules.get("mount_default_fields").copied())?;
    steps.extend(
        modules::mounts(get("mounts"), &defaults)?
            .into_iter()
            .map(|a| (Module::Mounts, a)),
    );
    let (deferred, now): (Vec<_>, Vec<_>) = modules::write_files(get("write_files"))?
        .into_iter()
        .partition(|f| f.defer);
    steps.extend(
        now.into_iter()
            .map(|f| (Module::WriteFiles, Action::WriteFile(f))),
    );
    steps.extend(
        modules::users(get("users"))?
            .into_iter()
            .map(|a| (Module::Users, a)),
    );
    steps.extend(modules::ntp(get("ntp"))?.into_iter().map(|a| (Module::Ntp, a)));
    steps.extend(
        deferred
            .into_iter()
            .map(|f| (Module::WriteFilesDeferred, Action::WriteFile(f))),
    );
    steps.extend(
        modules::commands("runcmd", get("runcmd"))?
            .into_iter()
            .map(|a| (Module::RunCmd, a)),
    );
    Ok(Plan::new(steps))
}
