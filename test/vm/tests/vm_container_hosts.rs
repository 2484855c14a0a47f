//! Node containers end to end (the `containers` host source): the node image from the cache (built on first
//! use), privileged podman containers with systemd and sshd on the fleet's bridge, reached over real SSH with
//! a pinned host key; the machine's kernel settings shielded from what a node writes; nothing left behind.
//!
//! Needs root, podman, runc, mmdebstrap and openssh-client; without them the tests fail and name what is
//! missing. Start times are printed (measured, never asserted).

use std::{
    path::Path,
    process::Command,
    sync::OnceLock,
    thread,
    time::{Duration, Instant},
};

use capkk_vm::{Fleet, FleetConfig, LOG_ROOT, Source, VmSpec, containers};

fn config(name: &str, hosts: usize) -> FleetConfig {
    let mut cfg = FleetConfig::new(name, vec![VmSpec::WORKER; hosts]);
    cfg.source = Source::Containers;
    cfg
}

fn fleet() -> &'static Fleet {
    static F: OnceLock<Fleet> = OnceLock::new();
    F.get_or_init(|| {
        let t = Instant::now();
        let f = Fleet::shared(&config("ct-tests", 2)).expect("node containers up");
        let s = f.state();
        eprintln!(
            "ct-tests: node image {} (build {:.0}s), {} and {} ready {:.1}s and {:.1}s after start ({:.1}s in total)",
            s.image_hash,
            s.image_build_secs,
            s.vms[0].name,
            s.vms[1].name,
            s.vms[0].boot_secs,
            s.vms[1].boot_secs,
            t.elapsed().as_secs_f64()
        );
        f
    })
}

fn text(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_node_container_is_a_bare_debian_host_with_its_own_identity_reached_over_ssh() {
    let f = fleet();
    let mut machine_ids = Vec::new();
    for (i, host) in f.vms().iter().enumerate() {
        let out = f
            .sh(
                i,
                "hostname; ip -4 -o addr show dev eth0; cat /etc/machine-id; systemctl is-system-running; \
                 . /etc/os-release; echo $ID $VERSION_ID; \
                 for b in kubelet kubeadm containerd runc crictl; do command -v $b || true; done; \
                 grep '^nameserver' /etc/resolv.conf",
            )
            .expect("ssh as the provider reaches it");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], host.name, "{out}");
        assert!(lines[1].contains(&format!("inet {}/24", host.address)), "{out}");
        assert_eq!(lines[2].len(), 32, "machine-id made at first boot: {out}");
        machine_ids.push(lines[2].to_owned());
        assert_eq!(lines[3], "running", "systemd as PID 1, no failed unit: {out}");
        assert_eq!(lines[4], "debian 12", "{out}");
        assert_eq!(
            lines[5],
            format!("nameserver {}", f.state().bridge_address),
            "nothing of Kubernetes preinstalled; the resolver is the fleet's gateway: {out}"
        );
    }
    assert_ne!(machine_ids[0], machine_ids[1], "each node has its own machine-id");
    let kh = std::fs::read_to_string(&f.state().known_hosts).unwrap();
    assert!(
        kh.lines()
            .any(|l| l.starts_with(&format!("{} ssh-ed25519 ", f.vms()[0].address))),
        "{kh}"
    );
}

#[test]
fn nodes_reach_each_other_and_the_machine_over_the_fleets_bridge_only() {
    let f = fleet();
    let other = &f.vms()[1].address;
    let out = f
        .sh(
            0,
            &format!("timeout 5 bash -c '</dev/tcp/{other}/22' && echo peer-ok; ip route show default"),
        )
        .expect("ssh");
    assert!(out.contains("peer-ok"), "host 1 reaches host 2's sshd: {out}");
    assert!(
        out.contains(&format!("default via {} dev eth0", f.state().bridge_address)),
        "{out}"
    );
    // No podman network: nothing on the machine rewrites the nodes' traffic to leave it.
    let nets = Command::new("podman")
        .args([
            "inspect",
            "--format",
            "{{.HostConfig.NetworkMode}}",
            &f.vms()[0].name,
        ])
        .output()
        .expect("podman inspect");
    assert_eq!(text(&nets).trim(), "none");
}

#[test]
fn the_machines_kernel_settings_survive_what_a_kubelet_and_the_provider_write_in_a_node() {
    let f = fleet();
    let before = containers::machine_sysctls();
    // What the kubelet writes at start, what systemd's and the provider's sysctl files set.
    let out = f
        .inside(
            0,
            "sysctl -w kernel.panic=10 kernel.panic_on_oops=1 vm.overcommit_memory=1 vm.panic_on_oom=0 \
             kernel.keys.root_maxkeys=1000000 kernel.keys.root_maxbytes=25000000 vm.max_map_count=262144 \
             vm.swappiness=1 fs.inotify.max_user_watches=524288 fs.inotify.max_user_instances=524288 \
             kernel.pid_max=4194304 >/dev/null && cat /proc/sys/kernel/panic /proc/sys/vm/max_map_count; \
             cat /run/capkk-sysctl.count",
        )
        .expect("podman exec");
    let t = text(&out);
    assert!(
        out.status.success(),
        "{t}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines[..2], ["10", "262144"], "the node sees what it wrote: {t}");
    assert!(
        lines[2].parse::<u32>().unwrap_or(0) > 100,
        "every writable kernel.*, vm.*, fs.* setting is shielded: {t}"
    );
    let after = containers::machine_sysctls();
    assert_eq!(before, after, "the machine's values did not change");
    assert!(
        after
            .iter()
            .any(|(k, v)| k == "kernel.panic" && !v.starts_with("unreadable")),
        "{after:?}"
    );
}

#[test]
fn the_providers_host_facts_say_a_node_container_may_not_lower_oom_scores() {
    let f = fleet();
    let out = f
        .sh(0, capkk_service::facts::PROBE)
        .expect("the facts probe over SSH");
    let facts = capkk_service::facts::parse(&out).expect("facts parse");
    assert!(
        !facts.can_lower_oom_score_adj,
        "no CAP_SYS_RESOURCE in a node container: containerd must restrict its pods' scores"
    );
    assert_eq!(facts.init, capkk_service::facts::InitSystem::Systemd);
    assert_eq!(
        facts.package_manager,
        Some(capkk_service::facts::PackageManager::Apt)
    );
}

#[test]
fn a_fleet_of_node_containers_leaves_no_container_volume_link_or_cgroup_behind() {
    let mut guard = Command::new("sleep").arg("600").spawn().expect("spawn sleep");
    let fleet = Fleet::start(&config("ct-guard", 1), guard.id()).expect("fleet started");
    let state = fleet.state().clone();
    let id = Command::new("podman")
        .args(["inspect", "--format", "{{.Id}}", &state.vms[0].name])
        .output()
        .expect("podman inspect");
    let id = text(&id).trim().to_owned();
    assert_eq!(id.len(), 64, "the container exists: {id:?}");
    let labelled = |what: &[&str]| {
        let out = Command::new("podman")
            .args(what)
            .args(["--filter", "label=capkk.run=ct-guard", "-q"])
            .output()
            .expect("podman");
        text(&out).lines().count()
    };
    assert_eq!(
        labelled(&["volume", "ls"]),
        2,
        "containerd's and the kubelet's volumes"
    );
    let cgroups = || {
        Command::new("sh")
            .args([
                "-c",
                &format!("find /sys/fs/cgroup -maxdepth 4 -type d -name '*{id}*' 2>/dev/null"),
            ])
            .output()
            .map(|o| text(&o))
            .unwrap_or_default()
    };
    assert!(
        !cgroups().is_empty(),
        "the container's cgroups exist while it runs"
    );
    guard.kill().unwrap();
    guard.wait().unwrap();
    let slot = Path::new("/tmp/capkk-sandbox/.slots").join(state.index.to_string());
    let gone = || {
        labelled(&["ps", "-a"]) == 0
            && labelled(&["volume", "ls"]) == 0
            && !Path::new(&format!("/sys/class/net/{}", state.bridge)).exists()
            && !Path::new(&format!("/sys/class/net/{}", state.vms[0].tap)).exists()
            && !state.dir.exists()
            && std::fs::read_to_string(&slot).unwrap_or_default() != "ct-guard"
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !gone() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(250));
    }
    assert!(
        gone(),
        "the watchdog removed the container, its volumes, the veth, the bridge and the state dir, and released the slot"
    );
    assert_eq!(cgroups(), "", "no cgroup of the container is left");
    assert!(
        Path::new(LOG_ROOT)
            .join("ct-guard/ct-guard-1.journal.log")
            .exists(),
        "the node's journal is kept"
    );
}

#[test]
fn a_restarted_node_container_comes_back_on_the_bridge_with_its_disk_key_and_shield() {
    let mut fleet = Fleet::up(&config("ct-restart", 1)).expect("node container up");
    let before = fleet
        .sh(
            0,
            "cat /etc/machine-id; echo kept > /var/lib/kubelet/mark; cat /proc/sys/kernel/random/boot_id",
        )
        .expect("ssh");
    let pid = fleet.vms()[0].pid;
    let t = Instant::now();
    fleet.restart(0).expect("restart");
    eprintln!(
        "ct-restart: back over SSH {:.1}s after the restart began",
        t.elapsed().as_secs_f64()
    );
    assert_ne!(fleet.vms()[0].pid, pid, "a new init process");
    // StrictHostKeyChecking against the pinned key: the host key survived with the disk.
    let after = fleet
        .sh(
            0,
            "cat /etc/machine-id; cat /var/lib/kubelet/mark; cat /run/capkk-sysctl.count; \
             ip -4 -o addr show dev eth0",
        )
        .expect("ssh after the restart");
    let (b, a): (Vec<&str>, Vec<&str>) = (before.lines().collect(), after.lines().collect());
    assert_eq!(a[0], b[0], "the same machine-id: {after}");
    assert_eq!(a[1], "kept", "the volume survived: {after}");
    assert!(a[2].parse::<u32>().unwrap_or(0) > 100, "shielded again: {after}");
    assert!(
        a[3].contains(&format!("inet {}/24", fleet.vms()[0].address)),
        "back on the bridge: {after}"
    );
}
