//! Host scripts and units: every text that runs or lands on a host is a file under `pkg/service/host/`,
//! loaded with `include_str!`. Rust only prepends quoted variables ([`Vars`]): shell variables (`NAME='v'`),
//! positional arguments (`set -- 'a' 'b'`) and data functions printing base64-decoded bytes from a quoted
//! here-document. So "what runs on the host for step X" is one file to open, and an injection shows up as a
//! diff in a golden rendering (`pkg/service/tests/golden/`).
//!
//! Every step reports through one marker protocol, lines `@@capkk <verb> <args>` ([`MARK`]).

use capkk_executor::quote;

/// Prefix of every marker line printed by a host script.
pub const MARK: &str = "@@capkk ";

/// The host templates, by path under `pkg/service/host/` (also used by the golden and shellcheck tests).
pub(crate) mod tpl {
    macro_rules! host_files {
        ($($name:ident => $path:literal,)*) => {
            $(
                #[doc = concat!("`pkg/service/host/", $path, "`")]
                pub(crate) const $name: &str = include_str!(concat!("../host/", $path));
            )*
            /// Every host file: (path under `pkg/service/host/`, text).
            #[cfg(test)]
            pub(crate) const ALL: &[(&str, &str)] = &[$(($path, $name)),*];
        };
    }
    host_files! {
        PRELUDE => "lib/prelude.sh",
        STEP_OPEN => "lib/step-open.sh",
        STEP_CLOSE => "lib/step-close.sh",
        FILE_PROBE => "lib/file-probe.sh",
        FACTS_PROBE => "facts/probe.sh",
        HOSTNAME => "bootstrap/hostname.sh",
        ETC_HOSTS => "bootstrap/etc-hosts.sh",
        SWAP_OFF => "bootstrap/swap-off.sh",
        KERNEL_MODULES => "bootstrap/kernel-modules.sh",
        SYSCTL => "bootstrap/sysctl.sh",
        SELINUX => "bootstrap/selinux.sh",
        FIREWALL => "bootstrap/firewall.sh",
        DIRECTORIES => "bootstrap/directories.sh",
        STOP_PROVISIONING => "reset/stop-provisioning.sh",
        KUBEADM_RESET => "reset/kubeadm-reset.sh",
        STOP_SERVICES => "reset/stop-services.sh",
        NETWORK_CLEANUP => "reset/network-cleanup.sh",
        REMOVE_PATHS => "reset/remove-paths.sh",
        ART_PROBE => "binary/probe.sh",
        ART_DOWNLOAD => "binary/download.sh",
        ART_VERIFY => "binary/verify.sh",
        INSTALL_BINARY => "binary/install-binary.sh",
        INSTALL_ARCHIVE => "binary/install-archive.sh",
        KUBELET_SERVICE => "binary/kubelet-service.sh",
        KUBELET_PROBE => "binary/probe-kubelet.sh",
        KUBELET_UNIT => "units/kubelet.service",
        KUBELET_DROPIN => "units/10-kubeadm.conf",
        CONTAINERD_UNIT => "units/containerd.service",
        CONTAINERD_FOREIGN => "containermanager/probe-foreign.sh",
        CONTAINERD_PROBE => "containermanager/probe-service.sh",
        CONTAINERD_CONFIG => "containermanager/config.sh",
        CONTAINERD_SERVICE => "containermanager/service.sh",
        PKG_PROBE_APT => "repository/probe-apt.sh",
        PKG_PROBE_RPM => "repository/probe-rpm.sh",
        ISO_PROBE => "repository/probe-iso.sh",
        ISO_MOUNT => "repository/iso-mount.sh",
        INSTALL_APT => "repository/install-apt.sh",
        INSTALL_RPM => "repository/install-rpm.sh",
        PROV_LAUNCHER => "provisioning/launcher.sh",
        PROV_PRELUDE => "provisioning/prelude.sh",
        PROV_PROBE => "provisioning/probe.sh",
        PROV_COMMAND => "provisioning/command.sh",
        PROV_STEP => "provisioning/step.sh",
        PROV_END => "provisioning/end.sh",
        WRITE_FILE => "provisioning/write-file.sh",
        WRITE_FILE_KEPT => "provisioning/write-file-kept.sh",
        USER => "provisioning/user.sh",
        NTP => "provisioning/ntp.sh",
        PARTITION => "provisioning/partition.sh",
        MKFS => "provisioning/mkfs.sh",
        MOUNT => "provisioning/mount.sh",
        REMEDIATION_RESTART => "remediation/restart-services.sh",
        REMEDIATION_REBOOT => "remediation/reboot.sh",
        REMEDIATION_BOOT_ID => "remediation/boot-id.sh",
        UPGRADE_NODE => "upgrade/kubeadm-upgrade-node.sh",
        UPGRADE_RESTART_KUBELET => "upgrade/restart-kubelet.sh",
        IMAGE_PREPULL => "images/prepull.sh",
        LB_PROBE => "loadbalancer/probe.sh",
        LB_CONFIGURE => "loadbalancer/configure.sh",
        LB_REMOVE => "loadbalancer/remove.sh",
        LB_KEEPALIVED_CONF => "loadbalancer/keepalived.conf",
        LB_HAPROXY_CFG => "loadbalancer/haproxy.cfg",
        LB_CHECK => "loadbalancer/check-apiserver.sh",
    }
}

/// Here-document delimiter of data functions; never a line of base64 (it has `_`).
const DELIM: &str = "CAPKK_DATA";

/// What Rust prepends to a template: quoted variables, positional arguments and data functions.
#[derive(Clone, Debug, Default)]
pub(crate) struct Vars(String);

impl Vars {
    /// Nothing yet.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// `NAME='value'` (quoted; `name` is a constant identifier of ours).
    pub(crate) fn var(mut self, name: &str, value: impl AsRef<str>) -> Self {
        debug_assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        self.0.push_str(name);
        self.0.push('=');
        self.0.push_str(&quote(value.as_ref()));
        self.0.push('\n');
        self
    }

    /// `NAME=1` or `NAME=0`.
    pub(crate) fn flag(self, name: &str, on: bool) -> Self {
        self.var(name, if on { "1" } else { "0" })
    }

    /// `set -- 'a' 'b' ...` (the template reads them as `"$@"`).
    pub(crate) fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.0.push_str("set --");
        for a in args {
            self.0.push(' ');
            self.0.push_str(&quote(a.as_ref()));
        }
        self.0.push('\n');
        self
    }

    /// A function `name` printing `data` (base64 in a quoted here-document: no expansion, any bytes).
    pub(crate) fn data(mut self, name: &str, data: &[u8]) -> Self {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(data);
        self.0.push_str(&format!("{name}() {{\nbase64 -d <<'{DELIM}'\n"));
        for chunk in b64.as_bytes().chunks(76) {
            self.0.push_str(std::str::from_utf8(chunk).unwrap_or_default());
            self.0.push('\n');
        }
        self.0.push_str(DELIM);
        self.0.push_str("\n}\n");
        self
    }

    /// Raw text of ours (a `put_file` call, built from quoted words).
    pub(crate) fn raw(mut self, text: &str) -> Self {
        self.0.push_str(text);
        self
    }

    /// The prepended text followed by `template`.
    pub(crate) fn render(mut self, template: &str) -> String {
        self.0.push_str(template);
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepended_values_reach_the_template_unchanged_whatever_their_bytes() {
        let nasty = "a'b\"c $(touch /tmp/capkk-x) `id` \\ ; \n*";
        let script = Vars::new()
            .var("V", nasty)
            .var("E", "")
            .args([nasty, "", "x y"])
            .data("d", nasty.as_bytes())
            .render("printf '%s|' \"$V\" \"$E\" \"$#\" \"$1\" \"$2\" \"$3\"; d\n");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{nasty}||3|{nasty}||x y|{nasty}")
        );
    }
}
