//! Golden renderings of every host script and unit (`pkg/service/tests/golden/`), checked with `sh -n` and
//! `shellcheck`. Regenerate with `CAPKK_UPDATE_GOLDEN=1 cargo test -p capkk-service --lib golden`.
//!
//! The renderings use fixed inputs that reach every template, including values with shell metacharacters
//! where a field allows them: an injection shows up as a diff here.

use std::path::PathBuf;

use capkk_cloudinit::TemplateVars;

use crate::{
    binary::{self, ArtifactRequest, BinaryConfig, ComponentSource, DownloadOn, catalogue},
    bootstrap::{self, HostIdentity, ResetOptions},
    containermanager::{self, ContainerdConfig, RegistryAuth},
    facts::{self, PackageManager, script::Script},
    host::tpl,
    images, loadbalancer,
    provisioning::script as prov,
    remediation, repository, upgrade,
};

/// A script (checked with `sh -n` and shellcheck) or a unit/config file.
pub(crate) enum Kind {
    Script,
    Unit,
}

fn facts() -> facts::HostFacts {
    facts::parse("@@os-release\nID=debian\nVERSION_ID=12\n@@end\nmachine=x86_64\npm=apt-get\nsystemctl=/x\n")
        .unwrap()
}

/// Provisioning input reaching every action template (plus the CABPK worker fixture).
const ALL_MODULES: &str = r##"#cloud-config
write_files:
- {path: "/etc/we ird/it's $HOME.conf", content: "a: '$(id)'\n", permissions: '0600', owner: 'nobody:nogroup'}
- {path: /usr/local/bin/tool, content: "#!/bin/sh\necho hi\n", permissions: '0755', append: true}
- {path: /etc/empty, content: ""}
users:
- name: ops
  groups: [adm, "wheel"]
  homedir: /srv/ops
  uid: 1500
  hashed_passwd: "$6$salt$hash"
  plain_text_passwd: "pl'ain"
  sudo: ["ALL=(ALL) NOPASSWD:ALL"]
  ssh_authorized_keys: ["ssh-ed25519 AAAA ops@example"]
ntp: {enabled: true, ntp_client: chrony, pools: [pool.example]}
disk_setup:
  /dev/vdc: {table_type: mbr, layout: [50, [50, 82]], overwrite: true}
  /dev/vdd: {table_type: gpt, layout: [30, 70], overwrite: false}
fs_setup:
- {device: /dev/vdc, partition: 2, filesystem: swap}
- {device: /dev/vdd, filesystem: xfs, label: big, replace_fs: ntfs, extra_opts: ["-m", "crc=1"]}
mounts:
- [/dev/vdc2, none, swap, sw, "0", "0"]
- ["LABEL=big", /srv/big, xfs, "defaults,nofail"]
runcmd:
- [sh, -c, "echo 'quoted' $HOME"]
- "kubeadm init --config /run/kubeadm/kubeadm.yaml && echo success > /run/cluster-api/bootstrap-success.complete"
"##;

fn artifacts() -> Vec<binary::Artifact> {
    let source = ComponentSource::default();
    ["kubeadm", "kubelet", "kubectl"]
        .iter()
        .map(|id| ArtifactRequest::new(id, "v1.32.0", "amd64"))
        .chain([ArtifactRequest::new(
            "cni",
            catalogue::DEFAULT_CNI_VERSION,
            "amd64",
        )])
        .map(|r| binary::resolve(&r, &source).unwrap())
        .collect()
}

/// Every rendering: (golden file name, kind, text).
pub(crate) fn renderings() -> Vec<(String, Kind, String)> {
    let mut out = Vec::new();
    let mut add = |name: &str, kind: Kind, text: String| out.push((name.to_owned(), kind, text));
    add("facts-probe.sh", Kind::Script, facts::PROBE.to_owned());
    let id = HostIdentity {
        hostname: "node-1".into(),
        internal_address: "198.18.0.11".into(),
        hosts_entries: vec![(
            "198.18.0.11".into(),
            vec!["node-1".into(), "node-1.cluster".into()],
        )],
    };
    add(
        "bootstrap-prepare.sh",
        Kind::Script,
        bootstrap::prepare_script(&id, &facts()).unwrap().render(),
    );
    add(
        "bootstrap-reset.sh",
        Kind::Script,
        bootstrap::reset_script(&ResetOptions {
            cri_socket: Some("unix:///run/containerd/containerd.sock".into()),
        })
        .render(),
    );
    let arts = artifacts();
    add(
        "binary-probe.sh",
        Kind::Script,
        binary::probe_script(&arts, tpl::KUBELET_PROBE),
    );
    let cfg = BinaryConfig {
        kubernetes_version: "v1.32.0".into(),
        arch: "amd64".into(),
        node_ip: Some("198.18.0.11".into()),
        node_name: Some("node-1".into()),
        ..Default::default()
    };
    for (name, on) in [
        ("binary-install-controller.sh", DownloadOn::Controller),
        ("binary-install-host.sh", DownloadOn::Host),
    ] {
        let shas: Vec<String> = (0..arts.len()).map(|i| format!("{i:064x}")).collect();
        let needed: Vec<(&binary::Artifact, &str)> =
            arts.iter().zip(shas.iter().map(String::as_str)).collect();
        let mut s = Script::new();
        binary::install_steps(&mut s, &needed, on);
        s.step("kubelet-unit", binary::kubelet_unit_step(&cfg));
        add(name, Kind::Script, s.render());
    }
    add("kubelet.service", Kind::Unit, binary::kubelet_unit());
    add(
        "10-kubeadm.conf",
        Kind::Unit,
        binary::kubelet_dropin(Some("198.18.0.11"), Some("node-1")),
    );
    add(
        "containerd.service",
        Kind::Unit,
        containermanager::containerd_unit(),
    );
    let ccfg = ContainerdConfig {
        registry_mirrors: vec!["https://mirror.example".into()],
        insecure_registries: vec!["198.18.0.9:5000".into()],
        private_registry: Some("registry.local".into()),
        registry_auth: Some(RegistryAuth {
            username: Some("u".into()),
            password: Some("p".into()),
            ..Default::default()
        }),
        arch: "amd64".into(),
        ..Default::default()
    };
    let hosts = containermanager::hosts_tomls(&ccfg).unwrap();
    let mut s = Script::new();
    containermanager::config_steps(&mut s, &ccfg, &hosts, true);
    add("containermanager-config.sh", Kind::Script, s.render());
    add(
        "containermanager-probe.sh",
        Kind::Script,
        containermanager::probe_script(&ccfg, &hosts),
    );
    let pkgs = vec!["socat".to_owned(), "conntrack".to_owned()];
    add(
        "repository-probe-apt.sh",
        Kind::Script,
        repository::probe_command(PackageManager::Apt, &pkgs),
    );
    add(
        "repository-probe-rpm.sh",
        Kind::Script,
        repository::probe_command(PackageManager::Dnf, &pkgs),
    );
    add(
        "repository-install-apt.sh",
        Kind::Script,
        repository::install_script(PackageManager::Apt, &pkgs, true, None).render(),
    );
    add(
        "repository-install-apt-iso.sh",
        Kind::Script,
        repository::install_script(PackageManager::Apt, &pkgs, false, Some("debian12-debs-amd64.iso"))
            .render(),
    );
    add(
        "repository-install-dnf-iso.sh",
        Kind::Script,
        repository::install_script(PackageManager::Dnf, &pkgs, false, Some("centos9-rpms-amd64.iso"))
            .render(),
    );
    add(
        "repository-probe-iso.sh",
        Kind::Script,
        repository::iso_probe_command("/var/lib/capkk/repository/x.iso"),
    );
    add("provisioning-launcher.sh", Kind::Script, prov::launcher(12345));
    add(
        "images-prepull.sh",
        Kind::Script,
        images::prepull_script(&images::PrepullConfig {
            kubernetes_version: "v1.32.0".into(),
            image_repository: Some("registry.local:5000/k8s".into()),
            images: images::ImageSet::Worker,
            sandbox_image: Some("registry.local:5000/pause:3.10".into()),
            pull_timeout: std::time::Duration::from_secs(120),
            timeout: std::time::Duration::from_secs(300),
        })
        .render(),
    );
    add(
        "remediation-restart-services.sh",
        Kind::Script,
        remediation::restart_script(&remediation::RestartOptions::default()).render(),
    );
    add(
        "remediation-reboot.sh",
        Kind::Script,
        remediation::reboot_script(&remediation::RebootOptions::default()).render(),
    );
    add(
        "remediation-boot-id.sh",
        Kind::Script,
        tpl::REMEDIATION_BOOT_ID.to_owned(),
    );
    add(
        "upgrade-node.sh",
        Kind::Script,
        upgrade::upgrade_script("v1.36.3", &upgrade::UpgradeOptions::default()).render(),
    );
    // Three control planes; the names and addresses are what the validation lets through (a hostile value is
    // refused before rendering: loadbalancer's tests).
    let lb = loadbalancer::LoadBalancerConfig {
        cluster: "default/ha".into(),
        vip: "198.18.5.200".into(),
        port: 8443,
        api_server_port: 6443,
        interface: None,
        virtual_router_id: 51,
        this: loadbalancer::Member {
            name: "cp-1".into(),
            address: "198.18.5.11".into(),
        },
        members: ["cp-1", "cp-2", "cp-3"]
            .iter()
            .enumerate()
            .map(|(i, n)| loadbalancer::Member {
                name: (*n).into(),
                address: format!("198.18.5.{}", 11 + i),
            })
            .collect(),
    };
    add(
        "loadbalancer-keepalived.conf",
        Kind::Unit,
        loadbalancer::keepalived_conf(&lb, "eth0").unwrap(),
    );
    let lone = loadbalancer::LoadBalancerConfig {
        members: vec![lb.this.clone()],
        interface: Some("enp0s1.100".into()),
        ..lb.clone()
    };
    add(
        "loadbalancer-keepalived-lone.conf",
        Kind::Unit,
        loadbalancer::keepalived_conf(&lone, "enp0s1.100").unwrap(),
    );
    add(
        "loadbalancer-haproxy.cfg",
        Kind::Unit,
        loadbalancer::haproxy_cfg(&lb).unwrap(),
    );
    add(
        "loadbalancer-check-apiserver.sh",
        Kind::Script,
        loadbalancer::check_script(&lb),
    );
    add(
        "loadbalancer-probe.sh",
        Kind::Script,
        loadbalancer::probe_command("198.18.5.11", None, "198.18.5.200"),
    );
    add(
        "loadbalancer-configure.sh",
        Kind::Script,
        loadbalancer::configure_script(&lb, "eth0", &["keepalived".into(), "haproxy".into()])
            .unwrap()
            .render(),
    );
    add(
        "loadbalancer-remove.sh",
        Kind::Script,
        loadbalancer::remove_script().render(),
    );
    let vars = TemplateVars::new()
        .local_hostname("node-a")
        .provider_id("kk://default/node-a");
    let plan = capkk_cloudinit::parse(ALL_MODULES.as_bytes(), "cloud-config", &vars).unwrap();
    let steps: Vec<_> = plan.steps.iter().collect();
    add(
        "provisioning-all-modules.sh",
        Kind::Script,
        prov::segment(&plan, 300, &steps, true, false),
    );
    out
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

#[test]
fn every_host_script_and_unit_matches_its_golden_rendering() {
    let update = std::env::var_os("CAPKK_UPDATE_GOLDEN").is_some();
    let dir = golden_dir();
    let mut stale = Vec::new();
    let names: Vec<String> = renderings().into_iter().map(|(n, _, _)| n).collect();
    for (name, _, text) in renderings() {
        let path = dir.join(&name);
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(want) if want == text => {}
            _ => stale.push(name),
        }
    }
    assert!(
        stale.is_empty(),
        "renderings differ from tests/golden (review the diff, then CAPKK_UPDATE_GOLDEN=1): {stale:?}"
    );
    let extra: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !names.contains(n))
        .collect();
    assert!(
        extra.is_empty(),
        "golden files nothing renders any more: {extra:?}"
    );
}

/// `sh -n` (dash, POSIX) and `shellcheck -s sh` over one script; the error names the failure.
pub(crate) fn check_script(name: &str, text: &str) -> Result<(), String> {
    use std::io::Write as _;
    let run = |cmd: &str, args: &[&str]| -> Result<(), String> {
        let mut child = std::process::Command::new(cmd)
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("{cmd} cannot run ({e}): install it (Debian package {cmd})"))?;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .map_err(|e| e.to_string())?;
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{cmd} {args:?} rejects {name}:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    run("sh", &["-n"])?;
    // SC2016: a `$` inside single quotes is exactly what quoting a value is for.
    run("shellcheck", &["-s", "sh", "-S", "info", "-e", "SC2016", "-"])
}

#[test]
fn every_rendered_script_passes_sh_n_and_shellcheck() {
    let mut failures = Vec::new();
    for (name, kind, text) in renderings() {
        if let Kind::Script = kind
            && let Err(e) = check_script(&name, &text)
        {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_host_file_is_rendered_somewhere() {
    let all: String = renderings().into_iter().map(|(_, _, t)| t).collect();
    for (path, text) in tpl::ALL {
        if text.contains("{{") {
            // A configuration file with `{{NAME}}` placeholders (loadbalancer): every line without one is
            // rendered as it is.
            for line in text.lines().filter(|l| !l.contains("{{")) {
                assert!(
                    all.contains(line),
                    "{path}: line {line:?} is in no golden rendering"
                );
            }
            continue;
        }
        assert!(
            all.contains(text),
            "{path} is not (whole) in any golden rendering"
        );
    }
}
