//! VM test hosts end to end: the image from the cache (built on first use), a real Debian VM under QEMU on a
//! bridge in the fleet's slot, reached over real SSH with a pinned ed25519 host key; and the watchdog that
//! keeps a VM from outliving the process that started it.
//!
//! Needs root, qemu-system-x86, qemu-utils, mmdebstrap, e2fsprogs and openssh-client; without them the tests
//! fail and name what is missing. Boot times are printed (measured, never asserted).

use std::{
    io::{Read, Write},
    net::TcpListener,
    path::Path,
    process::Command,
    sync::OnceLock,
    thread,
    time::{Duration, Instant},
};

use capkk_vm::{Fleet, FleetConfig, LOG_ROOT, VmSpec};

fn fleet() -> &'static Fleet {
    static F: OnceLock<Fleet> = OnceLock::new();
    F.get_or_init(|| {
        let t = Instant::now();
        let f = Fleet::shared(&FleetConfig::new(
            "vm-tests",
            vec![VmSpec {
                cpus: 2,
                memory_mib: 1024,
            }],
        ))
        .expect("VM fleet up");
        let s = f.state();
        eprintln!(
            "vm-tests: image {} (build {:.0}s), {} ready {:.0}s after QEMU start ({:.0}s in total)",
            s.image_hash,
            s.image_build_secs,
            s.vms[0].name,
            s.vms[0].boot_secs,
            t.elapsed().as_secs_f64()
        );
        f
    })
}

#[test]
fn a_booted_vm_has_its_own_identity_from_outside_the_image() {
    let f = fleet();
    let vm = &f.vms()[0];
    let out = f
        .sh(
            0,
            "hostname; ip -4 -o addr show dev eth0; cat /sys/class/dmi/id/product_uuid; cat /etc/machine-id; \
             ls /etc/ssh/ | grep ^ssh_host_",
        )
        .expect("ssh");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], vm.name, "{out}");
    assert!(lines[1].contains(&format!("inet {}/24", vm.address)), "{out}");
    assert_eq!(lines[2].to_lowercase(), vm.uuid, "{out}");
    assert_eq!(lines[3].len(), 32, "machine-id made at first boot: {out}");
    assert_eq!(
        lines[4..],
        ["ssh_host_ed25519_key", "ssh_host_ed25519_key.pub"],
        "ed25519 host key only: {out}"
    );
}

#[test]
fn the_host_key_the_console_reported_is_the_one_ssh_pins() {
    let f = fleet();
    let vm = &f.vms()[0];
    let console = std::fs::read_to_string(vm.console_log()).expect("console log");
    assert!(
        console.contains(&format!("capkk-hostkey: {}", vm.host_key_fingerprint)),
        "console log lacks the fingerprint"
    );
    let kh = std::fs::read_to_string(&f.state().known_hosts).unwrap();
    assert!(kh.starts_with(&format!("{} ssh-ed25519 ", vm.address)), "{kh}");
    // StrictHostKeyChecking=yes against that known_hosts: a different key would fail here.
    assert_eq!(f.sh(0, "echo pinned").unwrap(), "pinned\n");
}

#[test]
fn the_guest_runs_systemd_and_has_what_a_kubernetes_node_needs_from_its_kernel() {
    let f = fleet();
    let out = f
        .ssh(
            0,
            "systemctl is-system-running --wait; systemctl --failed --no-legend; \
             modprobe overlay && modprobe br_netfilter && echo modules-ok; \
             sysctl -w net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 >/dev/null && echo sysctl-ok; \
             cat /sys/fs/cgroup/cgroup.controllers; swapon --show --noheadings | wc -l; \
             test -s /boot/config-$(uname -r) && echo kernel-config-ok; \
             grep -q '^nameserver ' /etc/resolv.conf && echo resolv-ok",
        )
        .expect("ssh");
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.first(), Some(&"running"), "{text}");
    assert!(
        text.contains("modules-ok") && text.contains("sysctl-ok"),
        "{text}"
    );
    // kubeadm's SystemVerification preflight reads the kernel config; without it `kubeadm init` refuses.
    assert!(
        text.contains("kernel-config-ok"),
        "/boot/config-$(uname -r): {text}"
    );
    // The kubelet creates no pod sandbox without /etc/resolv.conf.
    assert!(text.contains("resolv-ok"), "/etc/resolv.conf: {text}");
    let controllers = lines.iter().find(|l| l.contains("memory")).copied().unwrap_or("");
    for c in ["cpu", "memory", "pids"] {
        assert!(controllers.split(' ').any(|x| x == c), "cgroup v2 {c}: {text}");
    }
}

#[test]
fn the_guest_reaches_services_on_the_machine_side_of_the_bridge() {
    let f = fleet();
    let listener = TcpListener::bind((f.state().bridge_address.as_str(), 0)).expect("bind on the bridge");
    let port = listener.local_addr().unwrap().port();
    let server = thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf);
        s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 6\r\n\r\nmirror")
            .unwrap();
    });
    let out = f
        .sh(
            0,
            &format!(
                "curl -fsS --max-time 60 http://{}:{port}/",
                f.state().bridge_address
            ),
        )
        .expect("curl from the guest");
    server.join().unwrap();
    assert_eq!(out, "mirror");
}

#[test]
fn a_fleet_does_not_outlive_the_process_that_guards_it() {
    let mut guard = Command::new("sleep").arg("600").spawn().expect("spawn sleep");
    let cfg = FleetConfig::new("vm-guard", vec![VmSpec::WORKER]);
    let fleet = Fleet::start(&cfg, guard.id()).expect("fleet started");
    let state = fleet.state().clone();
    let pid = state.vms[0].pid;
    assert!(Path::new(&format!("/proc/{pid}")).exists(), "QEMU runs");
    assert!(Path::new(&format!("/sys/class/net/{}", state.bridge)).exists());
    guard.kill().unwrap();
    guard.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let slot = Path::new("/tmp/capkk-sandbox/.slots").join(state.index.to_string());
    let slot_released = || std::fs::read_to_string(&slot).unwrap_or_default() != "vm-guard";
    // The slot is released last (after the state dir): waiting for everything but it raced the teardown's
    // final `rm` (CI saw the slot still claimed).
    let gone = || {
        !Path::new(&format!("/proc/{pid}")).exists()
            && !Path::new(&format!("/sys/class/net/{}", state.bridge)).exists()
            && !Path::new(&format!("/sys/class/net/{}", state.vms[0].tap)).exists()
            && !state.dir.exists()
            && slot_released()
    };
    while !gone() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(200));
    }
    assert!(
        gone(),
        "the watchdog stopped QEMU {pid}, removed bridge, tap and state dir, and released the slot"
    );
    assert!(
        Path::new(LOG_ROOT)
            .join("vm-guard/vm-guard-1.console.log")
            .exists(),
        "the console log is kept"
    );
}
