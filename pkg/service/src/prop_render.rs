//! Property: for random strings in every custom-resource field that reaches a host script, the service layer
//! either refuses the value (naming the field) or renders a script that `sh -n` accepts, where the value
//! appears only quoted. The sandbox half (scripts run in a real host, no file outside the expected paths) is
//! `rendered_scripts_from_random_fields_touch_only_their_own_paths` in `tests/sandbox_services.rs`.

use proptest::prelude::*;

use crate::{
    binary::{self, ArtifactRequest, BinaryConfig, ComponentSource, DownloadOn, catalogue},
    bootstrap::{self, HostIdentity, ResetOptions},
    containermanager::{self, ContainerdConfig, RegistryAuth},
    facts::{self, PackageManager, script::Script},
    provisioning::script as prov,
    repository,
};

/// Printable ASCII with every shell metacharacter, blanks and newlines, sometimes non-ASCII.
fn nasty() -> impl Strategy<Value = String> {
    prop_oneof![
        "[ -~\\t\\n]{0,24}",
        "[$`'\"\\\\;|&<>(){}*?!#~ \\n-]{1,12}",
        "[a-z0-9.:/-]{1,16}",
        ".{0,12}",
    ]
}

fn sh_n(text: &str) -> Result<(), TestCaseError> {
    use std::io::Write as _;
    let mut child = std::process::Command::new("sh")
        .arg("-n")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| TestCaseError::fail(format!("sh: {e}")))?;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let out = child
        .wait_with_output()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(
        out.status.success(),
        "sh -n: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

fn facts() -> facts::HostFacts {
    facts::parse("@@os-release\nID=debian\nVERSION_ID=12\n@@end\nmachine=x86_64\npm=apt-get\nsystemctl=/x\n")
        .unwrap()
}

/// A YAML double-quoted scalar holding `s` exactly (JSON strings are YAML).
fn y(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn bootstrap_and_reset_fields(host in nasty(), addr in nasty(), name in nasty(), sock in nasty()) {
        let id = HostIdentity {
            hostname: host,
            internal_address: addr.clone(),
            hosts_entries: vec![(addr, vec![name])],
        };
        if let Ok(s) = bootstrap::prepare_script(&id, &facts()) {
            sh_n(&s.render())?;
        }
        let reset = bootstrap::reset_script(&ResetOptions { cri_socket: Some(sock.clone()) }).render();
        sh_n(&reset)?;
        if !containermanager::valid_cri_socket(&sock) {
            prop_assert!(reset.contains("SOCK=''\n"), "an invalid socket reached the reset script");
        }
    }

    #[test]
    fn binary_fields(version in nasty(), cni in nasty(), ip in nasty(), node in nasty(), url in nasty()) {
        let cfg = BinaryConfig {
            kubernetes_version: version.clone(),
            arch: "amd64".into(),
            cni_version: Some(cni),
            node_ip: Some(ip.clone()),
            node_name: Some(node.clone()),
            source: ComponentSource {
                overrides: vec![catalogue::ArtifactOverride {
                    id: "kubeadm".into(),
                    url: Some(url),
                    checksum_value: Some("a".repeat(64)),
                    ..Default::default()
                }],
                ..Default::default()
            },
        };
        // The checks `binary::ensure` makes before it renders anything.
        let ok = binary::check_version("spec.version", &version).is_ok()
            && ip.is_empty() == ip.parse::<std::net::IpAddr>().is_err()
            && (node.is_empty() || bootstrap::valid_hostname(&node));
        if ok {
            let mut s = Script::new();
            if let Ok(a) = binary::resolve(&ArtifactRequest::new("kubeadm", &version, "amd64"), &cfg.source) {
                let sha = "a".repeat(64);
                binary::install_steps(&mut s, &[(&a, sha.as_str())], DownloadOn::Host);
            }
            s.step("kubelet-unit", binary::kubelet_unit_step(&cfg));
            sh_n(&s.render())?;
        }
    }

    #[test]
    fn containerd_fields(
        version in nasty(), sock in nasty(), image in nasty(), mirror in nasty(),
        insecure in nasty(), private in nasty(), user in nasty(), pass in nasty(), ca in nasty(),
    ) {
        let cfg = ContainerdConfig {
            version: Some(version),
            cri_socket: Some(sock),
            sandbox_image: Some(image),
            registry_mirrors: vec![mirror],
            insecure_registries: vec![insecure],
            private_registry: Some(private),
            registry_auth: Some(RegistryAuth {
                username: Some(user),
                password: Some(pass),
                ca_file: Some(ca),
                ..Default::default()
            }),
            arch: "amd64".into(),
            ..Default::default()
        };
        if containermanager::check_input(&cfg).is_ok()
            && let Ok(hosts) = containermanager::hosts_tomls(&cfg)
        {
            let mut s = Script::new();
            containermanager::config_steps(&mut s, &cfg, &hosts, true);
            sh_n(&s.render())?;
            sh_n(&containermanager::probe_script(&cfg, &hosts))?;
            for (reg, _, _) in &hosts {
                prop_assert!(reg != "." && reg != ".." && !reg.contains('/'), "{reg:?}");
            }
        }
    }

    #[test]
    fn repository_fields(pkg in nasty(), iso in nasty()) {
        let cfg = repository::RepositoryConfig::from_api(Some("none"), true, vec![pkg], Default::default())
            .unwrap();
        if let Ok(pkgs) = repository::packages_for(&cfg, PackageManager::Apt) {
            sh_n(&repository::probe_command(PackageManager::Apt, &pkgs))?;
            let iso = repository::check_iso_name(&iso).ok().map(|()| iso.as_str());
            for pm in [PackageManager::Apt, PackageManager::Dnf] {
                sh_n(&repository::install_script(pm, &pkgs, true, iso).render())?;
            }
        }
    }

    #[test]
    fn bootstrap_data_fields(
        path in nasty(), owner in nasty(), content in nasty(), user in nasty(), gecos in nasty(),
        group in nasty(), key in nasty(), sudo in nasty(), spec in nasty(), mp in nasty(),
        dev in nasty(), label in nasty(), opt in nasty(), ntp in nasty(),
    ) {
        let yaml = format!(
            "#cloud-config\nwrite_files:\n- {{path: {p}, owner: {o}, content: {c}, append: true}}\n\
             users:\n- {{name: {u}, gecos: {g}, groups: [{gr}], ssh_authorized_keys: [{k}], sudo: [{s}], \
             hashed_passwd: {c}, plain_text_passwd: {c}}}\n\
             mounts:\n- [{sp}, {mp}]\n\
             disk_setup:\n  {d}: {{table_type: gpt, layout: [50, [50, {l}]]}}\n\
             fs_setup:\n- {{device: {d}, filesystem: ext4, label: {l}, extra_opts: [{op}]}}\n\
             ntp: {{enabled: true, servers: [{n}]}}\nruncmd:\n- {c}\n",
            p = y(&format!("/srv/{path}")),
            o = y(&owner),
            c = y(&content),
            u = y(&user),
            g = y(&gecos),
            gr = y(&group),
            k = y(&key),
            s = y(&sudo),
            sp = y(&spec),
            mp = y(&format!("/mnt/{mp}")),
            d = y(&format!("/dev/{dev}")),
            l = y(&label),
            op = y(&opt),
            n = y(&ntp),
        );
        let Ok(plan) = capkk_cloudinit::parse(yaml.as_bytes(), "", &capkk_cloudinit::TemplateVars::new()) else {
            return Ok(());
        };
        let steps: Vec<_> = plan.steps.iter().collect();
        sh_n(&prov::segment(&plan, 60, &steps, true, true))?;
        for st in &plan.steps {
            sh_n(&prov::body(&st.action))?;
        }
    }
}
