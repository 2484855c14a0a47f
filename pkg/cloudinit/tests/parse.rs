//! Parser tests over fixtures in CABPK's shape and over every supported module, encoding and error.

use capkk_cloudinit::{Action, Encoding, Error, Module, NtpClient, TableType, TemplateVars, parse};

fn vars() -> TemplateVars {
    TemplateVars::new()
        .local_hostname("node-a")
        .instance_id("kkm-1")
        .provider_id("kk://default/node-a")
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"))).expect("fixture exists")
}

fn files(plan: &capkk_cloudinit::Plan) -> Vec<&capkk_cloudinit::WriteFile> {
    plan.steps
        .iter()
        .filter_map(|s| match &s.action {
            Action::WriteFile(f) => Some(f),
            _ => None,
        })
        .collect()
}

fn commands(plan: &capkk_cloudinit::Plan, module: Module) -> Vec<String> {
    plan.steps
        .iter()
        .filter(|s| s.module == module)
        .filter_map(|s| match &s.action {
            Action::Command(c) => Some(c.script.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn init_control_plane_fixture_becomes_files_then_commands() {
    let plan = parse(&fixture("init-control-plane.yaml"), "cloud-config", &vars()).unwrap();
    let f = files(&plan);
    let paths: Vec<&str> = f.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths[0], "/etc/sysctl.d/99-kubernetes.conf");
    assert!(paths.contains(&"/etc/kubernetes/pki/ca.key"));
    assert!(paths.contains(&"/etc/kubernetes/pki/etcd/ca.key"));
    assert_eq!(paths[paths.len() - 2], "/run/kubeadm/kubeadm.yaml");
    assert_eq!(paths[paths.len() - 1], "/run/cluster-api/placeholder");
    // base64 decoded, append honoured, modes and owners exact.
    assert_eq!(
        f[0].content,
        b"net.ipv4.ip_forward = 1\nnet.bridge.bridge-nf-call-iptables = 1\n"
    );
    assert!(f[1].append && !f[0].append);
    let key = f.iter().find(|f| f.path == "/etc/kubernetes/pki/ca.key").unwrap();
    assert_eq!((key.mode, key.owner.as_str()), (0o600, "root:root"));
    assert!(key.content.starts_with(b"-----BEGIN RSA PRIVATE KEY-----\n"));
    // Jinja rendered inside the kubeadm config.
    let kubeadm = String::from_utf8(f[f.len() - 2].content.clone()).unwrap();
    assert!(kubeadm.contains("name: 'node-a'"), "{kubeadm}");
    assert!(kubeadm.contains("value: 'kk://default/node-a'"));
    assert!(!kubeadm.contains("{{"));
    let runcmd = commands(&plan, Module::RunCmd);
    assert_eq!(runcmd.len(), 4);
    assert_eq!(
        runcmd[2],
        "kubeadm init --config /run/kubeadm/kubeadm.yaml  && echo success > /run/cluster-api/bootstrap-success.complete"
    );
    // Files come before commands.
    let first_cmd = plan
        .steps
        .iter()
        .position(|s| s.module == Module::RunCmd)
        .unwrap();
    assert!(
        plan.steps[..first_cmd]
            .iter()
            .all(|s| s.module == Module::WriteFiles)
    );
}

#[test]
fn join_control_plane_fixture_carries_certificates_and_join_config() {
    let plan = parse(&fixture("join-control-plane.yaml"), "cloud-config", &vars()).unwrap();
    let f = files(&plan);
    assert_eq!(
        f.iter()
            .filter(|f| f.path.starts_with("/etc/kubernetes/pki/"))
            .count(),
        8
    );
    let join = f
        .iter()
        .find(|f| f.path == "/run/kubeadm/kubeadm-join-config.yaml")
        .unwrap();
    assert_eq!(join.mode, 0o640);
    assert!(String::from_utf8_lossy(&join.content).contains("controlPlane:"));
    assert_eq!(commands(&plan, Module::RunCmd).len(), 1);
}

#[test]
fn join_worker_fixture_orders_every_module_like_cloud_init() {
    let plan = parse(&fixture("join-worker.yaml"), "", &vars()).unwrap();
    let modules: Vec<Module> = plan.steps.iter().map(|s| s.module).collect();
    let mut sorted = modules.clone();
    sorted.sort();
    assert_eq!(modules, sorted, "steps are in cloud-init order");
    assert_eq!(
        plan.steps.iter().map(|s| s.name()).collect::<Vec<_>>(),
        [
            "disk_setup /dev/vdb",
            "fs_setup /dev/vdb1",
            "mounts /var/lib/data",
            "write_files /run/kubeadm/kubeadm-join-config.yaml",
            "write_files /run/cluster-api/placeholder",
            "users capkk",
            "ntp",
            "runcmd[0]",
            "runcmd[1]",
        ]
    );
    let Action::CreateUser(u) = &plan.steps[5].action else {
        panic!("users step")
    };
    assert_eq!(u.groups, ["adm", "sudo"]);
    assert_eq!(u.sudo, ["ALL=(ALL) NOPASSWD:ALL"]);
    assert!(u.lock_passwd);
    assert_eq!(u.ssh_authorized_keys.len(), 1);
    let Action::ConfigureNtp(n) = &plan.steps[6].action else {
        panic!("ntp step")
    };
    assert_eq!(n.servers, ["time1.example.internal", "time2.example.internal"]);
    assert_eq!(n.client, NtpClient::Auto);
    let Action::PartitionDisk(d) = &plan.steps[0].action else {
        panic!("disk step")
    };
    assert_eq!(
        (d.table_type, d.layout.len(), d.overwrite),
        (TableType::Gpt, 1, false)
    );
    let Action::Mount(m) = &plan.steps[2].action else {
        panic!("mount step")
    };
    assert_eq!(
        (
            m.spec.as_str(),
            m.fstype.as_str(),
            m.options.as_str(),
            m.pass.as_str()
        ),
        ("LABEL=data", "auto", "defaults,nofail", "2")
    );
}

#[test]
fn step_ids_are_stable_and_change_with_content_or_variables() {
    let a = parse(&fixture("join-worker.yaml"), "cloud-config", &vars()).unwrap();
    let b = parse(&fixture("join-worker.yaml"), "cloud-config", &vars()).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.hash.len(), 16);
    let ids: std::collections::HashSet<_> = a.steps.iter().map(|s| s.id.clone()).collect();
    assert_eq!(ids.len(), a.steps.len(), "ids are unique within a plan");
    let c = parse(
        &fixture("join-worker.yaml"),
        "cloud-config",
        &vars().local_hostname("node-b"),
    )
    .unwrap();
    assert_ne!(a.hash, c.hash);
    assert_ne!(a.steps[3].id, c.steps[3].id, "the rendered join config differs");
    assert_eq!(a.steps[4].id, c.steps[4].id, "the placeholder does not");
}

#[test]
fn identical_commands_get_distinct_ids() {
    let plan = parse(b"#cloud-config\nruncmd:\n- echo x\n- echo x\n", "", &vars()).unwrap();
    assert_ne!(plan.steps[0].id, plan.steps[1].id);
}

#[test]
fn debug_output_hides_contents_commands_and_passwords() {
    let plan = parse(&fixture("init-control-plane.yaml"), "cloud-config", &vars()).unwrap();
    let dbg = format!("{plan:?}");
    assert!(!dbg.contains("PRIVATE KEY"), "{dbg}");
    assert!(!dbg.contains("kubeadm init"), "{dbg}");
    let plan = parse(
        b"#cloud-config\nusers:\n- name: a\n  passwd: $6$salt$hash-canary\n",
        "",
        &vars(),
    )
    .unwrap();
    assert!(!format!("{plan:?}").contains("hash-canary"));
}

fn one_file(yaml: &str) -> capkk_cloudinit::WriteFile {
    let plan = parse(
        format!("#cloud-config\nwrite_files:\n{yaml}").as_bytes(),
        "",
        &vars(),
    )
    .unwrap();
    let Action::WriteFile(f) = plan.steps.into_iter().next().unwrap().action else {
        panic!("a file")
    };
    f
}

#[test]
fn every_encoding_spelling_decodes_to_the_same_bytes() {
    let data = b"\x00\x01binary\xff\nand text\n";
    for (spelling, enc) in [
        ("base64", Encoding::Base64),
        ("b64", Encoding::Base64),
        ("gzip+base64", Encoding::GzipBase64),
        ("gz+base64", Encoding::GzipBase64),
        ("gzip+b64", Encoding::GzipBase64),
        ("gz+b64", Encoding::GzipBase64),
        ("GZIP+BASE64", Encoding::GzipBase64),
    ] {
        let encoded = String::from_utf8(enc.encode(data)).unwrap();
        let f = one_file(&format!(
            "- path: /x\n  encoding: {spelling}\n  content: {encoded}\n"
        ));
        assert_eq!(f.content, data, "{spelling}");
    }
    // gzip / gz take binary content (!!binary, as cloud-init expects).
    for spelling in ["gzip", "gz"] {
        let b64 = String::from_utf8(Encoding::Base64.encode(&Encoding::Gzip.encode(data))).unwrap();
        let f = one_file(&format!(
            "- path: /x\n  encoding: {spelling}\n  content: !!binary |\n    {b64}\n"
        ));
        assert_eq!(f.content, data, "{spelling}");
    }
    let f = one_file("- path: /x\n  encoding: text/plain\n  content: plain\n");
    assert_eq!(f.content, b"plain");
}

#[test]
fn base64_content_may_be_a_wrapped_block_scalar() {
    let f = one_file("- path: /x\n  encoding: b64\n  content: |\n    aGVsbG8g\n    d29ybGQ=\n");
    assert_eq!(f.content, b"hello world");
}

#[test]
fn defaults_follow_cloud_init() {
    let f = one_file("- path: /etc/x\n");
    assert_eq!(
        (f.mode, f.owner.as_str(), f.append, f.defer, f.content.len()),
        (0o644, "root:root", false, false, 0)
    );
}

#[test]
fn permissions_accept_every_cloud_init_spelling() {
    for (p, want) in [
        ("'0640'", 0o640),
        ("\"0600\"", 0o600),
        ("'640'", 0o640),
        ("'0o755'", 0o755),
        ("0644", 0o644), // YAML 1.1 octal integer, as PyYAML reads it
        ("420", 420),    // a plain decimal integer is used as-is, like cloud-init
        ("'4755'", 0o4755),
    ] {
        assert_eq!(
            one_file(&format!("- path: /x\n  permissions: {p}\n")).mode,
            want,
            "{p}"
        );
    }
    for bad in ["'rw-r--r--'", "'0999'", "'77777'", "[1]"] {
        let err = parse(
            format!("#cloud-config\nwrite_files:\n- path: /x\n  permissions: {bad}\n").as_bytes(),
            "",
            &vars(),
        )
        .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidField { field, .. } if field == "write_files[0].permissions"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn deferred_files_run_after_users_and_before_runcmd() {
    let plan = parse(
        b"#cloud-config\nruncmd: [date]\nwrite_files:\n- {path: /late, defer: true}\n- {path: /early}\nusers: [bob]\n",
        "",
        &vars(),
    )
    .unwrap();
    let names: Vec<String> = plan.steps.iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        [
            "write_files /early",
            "users bob",
            "write_files /late",
            "runcmd[0]"
        ]
    );
}

#[test]
fn list_commands_are_quoted_like_shellify_and_bootcmd_runs_first() {
    let plan = parse(
        b"#cloud-config\nruncmd:\n- [printf, '%s\\n', \"it's $HOME\"]\n- echo plain\nbootcmd:\n- echo boot\n",
        "",
        &vars(),
    )
    .unwrap();
    assert_eq!(commands(&plan, Module::BootCmd), ["echo boot"]);
    assert_eq!(plan.steps[0].module, Module::BootCmd);
    let run = commands(&plan, Module::RunCmd);
    assert_eq!(run[0], r#"'printf' '%s\n' 'it'"'"'s $HOME'"#);
    assert_eq!(run[1], "echo plain");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&run[0])
        .env("HOME", "/h")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "it's $HOME\n");
}

#[test]
fn unknown_modules_are_named_and_harmless_keys_are_accepted() {
    let err = parse(
        b"#cloud-config\nruncmd: [date]\napt:\n  sources: {}\n",
        "",
        &vars(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::UnknownModule { module, .. } if module == "apt"),
        "{err}"
    );
    assert!(err.to_string().contains("\"apt\""));
    let err = parse(b"#cloud-config\npackage_update: true\n", "", &vars()).unwrap_err();
    assert!(
        matches!(&err, Error::UnknownModule { module, .. } if module == "package_update"),
        "{err}"
    );
    let err = parse(b"#cloud-config\npackages: [curl]\n", "", &vars()).unwrap_err();
    assert!(
        matches!(&err, Error::UnknownModule { module, .. } if module == "packages"),
        "{err}"
    );
    let plan = parse(
        b"#cloud-config\noutput: {all: '| tee -a /var/log/cloud-init-output.log'}\nfinal_message: done\n\
          package_update: false\npackage_upgrade: no\npackages: []\npreserve_hostname: true\nruncmd: [date]\n",
        "",
        &vars(),
    )
    .unwrap();
    assert_eq!(plan.steps.len(), 1);
}

#[test]
fn unknown_fields_inside_entries_are_named() {
    let err = parse(
        b"#cloud-config\nwrite_files:\n- path: /x\n  contents: typo\n",
        "",
        &vars(),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid write_files[0].contents: unknown field (not supported by this provider)"
    );
    let err = parse(
        b"#cloud-config\nwrite_files:\n- path: /x\n  encoding: base32\n  content: x\n",
        "",
        &vars(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidField { field, .. } if field == "write_files[0].encoding"),
        "{err}"
    );
    let err = parse(b"#cloud-config\nwrite_files:\n- content: x\n", "", &vars()).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidField { field, .. } if field == "write_files[0].path"),
        "{err}"
    );
    let err = parse(b"#cloud-config\nwrite_files:\n- path: relative/x\n", "", &vars()).unwrap_err();
    assert!(err.to_string().contains("absolute"), "{err}");
}

#[test]
fn undecodable_content_is_an_error_that_does_not_quote_it() {
    let err = parse(
        b"#cloud-config\nwrite_files:\n- path: /x\n  encoding: gzip+base64\n  content: c2VjcmV0LWNhbmFyeQ==\n",
        "",
        &vars(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::DecodeContent { field, .. } if field == "write_files[0].content"),
        "{err}"
    );
    assert!(!err.to_string().contains("c2VjcmV0"));
}

#[test]
fn ignition_and_other_formats_are_unsupported() {
    let err = parse(b"{\"ignition\":{\"version\":\"2.3.0\"}}", "ignition", &vars()).unwrap_err();
    assert!(
        matches!(&err, Error::UnsupportedFormat { format, .. } if format == "ignition"),
        "{err}"
    );
    assert!(err.to_string().contains("cloud-config"));
    assert!(matches!(
        parse(b"#cloud-config\n", "yaml", &vars()),
        Err(Error::UnsupportedFormat { .. })
    ));
}

#[test]
fn non_cloud_config_payloads_are_rejected_clearly() {
    for (payload, needle) in [
        (&b"#!/bin/sh\necho hi\n"[..], "shell script"),
        (b"Content-Type: multipart/mixed\n", "MIME"),
        (b"\x1f\x8b\x08\x00", "gzip"),
        (b"", "empty"),
        (b"runcmd: [date]\n", "#cloud-config"),
    ] {
        let err = parse(payload, "cloud-config", &vars()).unwrap_err();
        assert!(err.to_string().contains(needle), "{err}");
    }
}

#[test]
fn jinja_undefined_variables_and_statements_fail_clearly() {
    let payload = b"## template: jinja\n#cloud-config\nruncmd:\n- echo {{ ds.meta_data.uuid }}\n";
    let err = parse(payload, "", &vars()).unwrap_err();
    assert!(
        matches!(&err, Error::RenderTemplate { line: 4, message } if message.contains("ds.meta_data.uuid")),
        "{err}"
    );
    let ok = parse(payload, "", &vars().set("ds.meta_data.uuid", "u-1")).unwrap();
    assert_eq!(commands(&ok, Module::RunCmd), ["echo u-1"]);
    let err = parse(
        b"## template: jinja\n#cloud-config\n{% set x = 1 %}\n",
        "",
        &vars(),
    )
    .unwrap_err();
    assert!(matches!(err, Error::RenderTemplate { line: 3, .. }), "{err}");
    // Without the header, braces are plain text (cloud-init does not render).
    let plain = parse(b"#cloud-config\nruncmd:\n- echo '{{ x }}'\n", "", &vars()).unwrap();
    assert_eq!(commands(&plain, Module::RunCmd), ["echo '{{ x }}'"]);
}

#[test]
fn yaml_errors_carry_payload_line_numbers() {
    let err = parse(b"## template: jinja\n#cloud-config\nruncmd: [\n", "", &vars()).unwrap_err();
    assert!(
        matches!(&err, Error::ParseYaml { message } if message.contains("line 3")),
        "{err}"
    );
}

#[test]
fn users_module_parses_every_supported_field_and_rejects_default() {
    let plan = parse(
        b"#cloud-config\nusers:\n- name: ops\n  gecos: Ops Team\n  homedir: /home/ops\n  primary_group: ops\n  \
          groups: [docker, wheel]\n  shell: /bin/bash\n  uid: 1500\n  system: false\n  lock_passwd: false\n  \
          hashed_passwd: $6$x$y\n  sudo: [\"ALL=(ALL) NOPASSWD:ALL\", \"ALL=(root) /bin/ls\"]\n  \
          ssh_authorized_keys: [ssh-ed25519 AAAA k1, ssh-rsa BBBB k2]\n- alice, bob\n",
        "",
        &vars(),
    )
    .unwrap();
    let users: Vec<_> = plan
        .steps
        .iter()
        .map(|s| match &s.action {
            Action::CreateUser(u) => u.clone(),
            _ => panic!("users only"),
        })
        .collect();
    assert_eq!(users.len(), 3);
    assert_eq!(users[0].uid, Some(1500));
    assert_eq!(users[0].hashed_passwd.as_deref(), Some("$6$x$y"));
    assert!(!users[0].lock_passwd);
    assert_eq!(users[0].sudo.len(), 2);
    assert_eq!((users[1].name.as_str(), users[2].name.as_str()), ("alice", "bob"));
    assert!(users[1].lock_passwd);
    let plan = parse(
        b"#cloud-config\nusers:\n- {name: a, inactive: true}\n- {name: b, inactive: '5'}\n",
        "",
        &vars(),
    )
    .unwrap();
    let inactive: Vec<Option<String>> = plan
        .steps
        .iter()
        .map(|s| match &s.action {
            Action::CreateUser(u) => u.inactive.clone(),
            _ => panic!("users only"),
        })
        .collect();
    assert_eq!(
        inactive,
        [None, Some("5".to_owned())],
        "CABPK's boolean inactive is ignored like cloud-init"
    );
    let err = parse(b"#cloud-config\nusers: [default]\n", "", &vars()).unwrap_err();
    assert!(err.to_string().contains("default"), "{err}");
    let err = parse(
        b"#cloud-config\nusers:\n- name: x\n  snapuser: a@b\n",
        "",
        &vars(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidField { field, .. } if field == "users[0].snapuser"),
        "{err}"
    );
}

#[test]
fn ntp_disabled_yields_no_step_and_bad_clients_are_named() {
    let plan = parse(
        b"#cloud-config\nntp: {enabled: false, servers: [a]}\n",
        "",
        &vars(),
    )
    .unwrap();
    assert!(plan.is_empty());
    let plan = parse(b"#cloud-config\nntp: {}\n", "", &vars()).unwrap();
    let Action::ConfigureNtp(n) = &plan.steps[0].action else {
        panic!("ntp")
    };
    assert_eq!(n.pools.len(), 4, "cloud-init's default pools");
    let err = parse(b"#cloud-config\nntp: {ntp_client: openntpd}\n", "", &vars()).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidField { field, .. } if field == "ntp.ntp_client"),
        "{err}"
    );
    let err = parse(b"#cloud-config\nntp: {servers: [\"a b\"]}\n", "", &vars()).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidField { field, .. } if field == "ntp.servers"),
        "{err}"
    );
}

#[test]
fn disk_and_fs_setup_are_conservative_by_default() {
    let plan = parse(
        b"#cloud-config\ndisk_setup:\n  /dev/sdb: {table_type: mbr, layout: [[60, 83], 40]}\n  /dev/sdc: {layout: false}\n\
          fs_setup:\n- {device: /dev/nvme1n1, partition: 2, filesystem: xfs, label: d, replace_fs: ntfs, extra_opts: [-f]}\n\
          - {device: /dev/sdd, filesystem: ext4}\nmounts:\n- [sdd, /mnt/d, ext4, noatime]\n- [/dev/sde, none, swap, sw, '0', '0']\n",
        "",
        &vars(),
    )
    .unwrap();
    let names: Vec<String> = plan.steps.iter().map(|s| s.name()).collect();
    assert_eq!(
        names,
        [
            "disk_setup /dev/sdb",
            "fs_setup /dev/nvme1n1p2",
            "fs_setup /dev/sdd",
            "mounts /mnt/d",
            "mounts none"
        ]
    );
    let Action::PartitionDisk(d) = &plan.steps[0].action else {
        panic!()
    };
    assert_eq!(d.layout[0].type_code.as_deref(), Some("83"));
    assert!(!d.overwrite);
    let Action::MakeFilesystem(f) = &plan.steps[1].action else {
        panic!()
    };
    assert!(!f.overwrite);
    assert_eq!(f.replace_fs.as_deref(), Some("ntfs"));
    let Action::Mount(m) = &plan.steps[3].action else {
        panic!()
    };
    assert_eq!(m.spec, "/dev/sdd");
    let Action::Mount(m) = &plan.steps[4].action else {
        panic!()
    };
    assert!(m.is_swap());
    let plan = parse(
        b"#cloud-config\nmounts:\n- [tmpfs, /mnt/t, tmpfs, size=1m]\n",
        "",
        &vars(),
    )
    .unwrap();
    let Action::Mount(m) = &plan.steps[0].action else {
        panic!("a mount")
    };
    assert_eq!(
        (m.spec.as_str(), m.fstype.as_str(), m.options.as_str()),
        ("tmpfs", "tmpfs", "size=1m")
    );
    for (bad, field) in [
        (
            "disk_setup:\n  ephemeral0: {layout: true}\n",
            "disk_setup.ephemeral0",
        ),
        (
            "disk_setup:\n  /dev/sdb: {layout: [70, 40]}\n",
            "disk_setup./dev/sdb.layout",
        ),
        (
            "fs_setup:\n- {device: /dev/sdb, filesystem: ext4, partition: auto}\n",
            "fs_setup[0].partition",
        ),
        (
            "fs_setup:\n- {device: /dev/sdb, filesystem: ext4, cmd: mkfs}\n",
            "fs_setup[0].cmd",
        ),
        ("mounts:\n- [ephemeral0, /mnt]\n", "mounts[0][0]"),
    ] {
        let err = parse(format!("#cloud-config\n{bad}").as_bytes(), "", &vars()).unwrap_err();
        assert!(
            matches!(&err, Error::InvalidField { field: f, .. } if f == field),
            "{bad}: {err}"
        );
    }
}

#[test]
fn an_empty_cloud_config_is_an_empty_plan() {
    assert!(parse(b"#cloud-config\n", "", &vars()).unwrap().is_empty());
    assert!(
        parse(b"## template: jinja\n#cloud-config\n{}\n", "", &vars())
            .unwrap()
            .is_empty()
    );
}

/// CABPK invariants hold for every fixture: the hand-made ones here and, once captured, the real CABPK
/// outputs in `test/fixtures/cabpk/`.
#[test]
fn every_cabpk_fixture_has_cabpks_invariants() {
    let dirs = [
        format!("{}/tests/fixtures", env!("CARGO_MANIFEST_DIR")),
        format!("{}/../../test/fixtures/cabpk", env!("CARGO_MANIFEST_DIR")),
    ];
    let mut checked = Vec::new();
    for dir in &dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
                continue;
            }
            let name = path.display().to_string();
            let plan = parse(&std::fs::read(&path).unwrap(), "cloud-config", &vars())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let f = files(&plan);
            assert!(
                f.iter().any(|f| f.path == "/run/cluster-api/placeholder"),
                "{name}: placeholder"
            );
            let kubeadm = f
                .iter()
                .find(|f| f.path.starts_with("/run/kubeadm/kubeadm"))
                .unwrap_or_else(|| panic!("{name}: kubeadm config"));
            assert_eq!(kubeadm.mode, 0o640, "{name}");
            assert!(
                !String::from_utf8_lossy(&kubeadm.content).contains("{{"),
                "{name}: jinja rendered"
            );
            let cmds = commands(&plan, Module::RunCmd);
            assert!(
                cmds.iter().any(|c| c.starts_with("kubeadm ")
                    && c.ends_with("&& echo success > /run/cluster-api/bootstrap-success.complete")),
                "{name}: kubeadm command chained to the sentinel"
            );
            if name.contains("control-plane") {
                assert!(
                    f.iter()
                        .any(|f| f.path == "/etc/kubernetes/pki/ca.key" && f.mode == 0o600),
                    "{name}"
                );
            }
            checked.push(name);
        }
    }
    assert!(checked.len() >= 3, "{checked:?}");
}

#[test]
fn many_gzip_bombs_each_under_a_per_file_cap_exceed_the_plan_wide_budget() {
    use base64::Engine as _;
    use capkk_cloudinit::{Encoding, MAX_DECODED_BYTES};
    // Five files of 20 MiB of zeros each (a few KiB compressed): each one is small, together 100 MiB.
    let bomb =
        base64::engine::general_purpose::STANDARD.encode(Encoding::Gzip.encode(&vec![0u8; 20 * 1024 * 1024]));
    let mut yaml = String::from("#cloud-config\nwrite_files:\n");
    for i in 0..5 {
        yaml.push_str(&format!(
            "- {{path: /tmp/bomb-{i}, encoding: gz+b64, content: {bomb}}}\n"
        ));
    }
    const { assert!(5 * 20 * 1024 * 1024 > MAX_DECODED_BYTES) };
    let err = capkk_cloudinit::parse(yaml.as_bytes(), "", &capkk_cloudinit::TemplateVars::new())
        .expect_err("a 100 MiB plan must be refused");
    let text = err.to_string();
    assert!(
        text.contains("write_files[3].content") && text.contains("budget"),
        "{text}"
    );
    // Under the budget the same files are fine.
    let small: String = yaml.lines().take(4).map(|l| format!("{l}\n")).collect();
    assert!(capkk_cloudinit::parse(small.as_bytes(), "", &capkk_cloudinit::TemplateVars::new()).is_ok());
}
