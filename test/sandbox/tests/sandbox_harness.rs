//! The sandbox harness itself: hosts, users, shim, faults, isolation, idempotent setup and teardown.
//! Needs root + openssh-server + sudo; fails naming what is missing otherwise (skips only with CAPKK_ALLOW_SKIP=1).

use std::{
    io::Read,
    net::{SocketAddr, TcpStream},
    path::Path,
    time::Duration,
};

use capkk_sandbox::{Sandbox, SandboxConfig, skip_unless_supported};

fn banner(addr: &str) -> std::io::Result<String> {
    let addr: SocketAddr = format!("{addr}:22").parse().unwrap();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(3)))?;
    let mut b = [0u8; 8];
    s.read_exact(&mut b)?;
    Ok(String::from_utf8_lossy(&b).into_owned())
}

#[test]
fn hosts_are_isolated_machines_with_users_shim_and_faults() {
    if skip_unless_supported() {
        return;
    }
    let sb = Sandbox::up(&SandboxConfig::new("sandbox-tests", 2).with_internal_hosts(1)).unwrap();
    let idx = sb.state().index;
    let hosts = sb.hosts();
    assert_eq!(hosts.len(), 2);
    let h = &hosts[0];
    assert_eq!(h.address(), format!("198.18.{idx}.11"));
    assert!(banner(h.address()).unwrap().starts_with("SSH-2.0"));

    // Its own hostname, network, PID namespace, users and host key; not the machine's host keys.
    let inside = h
        .sh_inside("hostname; ip -4 -o addr show eth0 | wc -l; cat /proc/1/cmdline | tr '\\0' ' '; echo")
        .unwrap();
    let lines: Vec<&str> = inside.lines().collect();
    assert_eq!(lines[0], h.info.name);
    assert_eq!(lines[1], "1");
    assert!(lines[2].contains("/etc/capkk-sandbox/init.sh"), "{inside}");
    // Kernel settings the sandbox relies on are set by each namespace itself, whatever the machine's are.
    assert_eq!(h.sh_inside("cat /proc/sys/net/ipv4/ip_forward").unwrap(), "0\n");
    let users = h
        .sh_inside("id -u kkadmin; id -u kkuser; cat /etc/sudoers.d/capkk-sandbox")
        .unwrap();
    assert!(
        users.starts_with("2001\n2002\n") && users.contains("NOPASSWD"),
        "{users}"
    );
    assert_eq!(
        h.run_inside("ls /etc/ssh/ssh_host_ed25519_key")
            .unwrap()
            .status
            .code(),
        Some(2)
    );
    // A fresh root home: nothing of the machine's /root shows through.
    let home = h.sh_inside("ls -A /root; stat -c %a /root").unwrap();
    assert!(
        !home.contains(".cargo") && !home.contains(".rustup") && home.ends_with("700\n"),
        "{home}"
    );
    let fp = h
        .sh_inside("ssh-keygen -lf /etc/ssh/capkk_host_ed25519_key.pub | cut -d' ' -f2")
        .unwrap();
    assert_eq!(fp.trim(), h.fingerprint());
    assert_ne!(hosts[0].fingerprint(), hosts[1].fingerprint());

    // Writes stay in the host's upper layer.
    h.sh_inside("mkdir -p /etc/kubernetes && echo x > /etc/kubernetes/t")
        .unwrap();
    assert!(h.upper_dir().join("etc/kubernetes/t").exists());
    assert!(
        !Path::new("/etc/kubernetes/t").exists()
            || std::fs::read_to_string("/etc/kubernetes/t").unwrap() != "x\n"
    );
    assert_eq!(
        hosts[1]
            .run_inside("test -e /etc/kubernetes/t")
            .unwrap()
            .status
            .code(),
        Some(1)
    );

    // systemctl shim: records calls, starts/stops a simple service.
    h.sh_inside(
        "mkdir -p /etc/systemd/system && printf '[Service]\\nExecStart=/bin/sleep 1000\\n' > /etc/systemd/system/demo.service",
    )
    .unwrap();
    h.sh_inside("systemctl daemon-reload && systemctl enable --now demo")
        .unwrap();
    assert_eq!(
        h.sh_inside("systemctl is-active demo.service").unwrap(),
        "active\n"
    );
    assert_eq!(h.sh_inside("systemctl is-enabled demo").unwrap(), "enabled\n");
    assert!(h.sh_inside("ps -eo args").unwrap().contains("/bin/sleep 1000"));
    h.sh_inside("systemctl restart demo && systemctl is-active -q demo")
        .unwrap();
    h.sh_inside("systemctl stop demo").unwrap();
    let stopped = h.run_inside("systemctl is-active demo").unwrap();
    assert_eq!(stopped.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&stopped.stdout), "inactive\n");
    assert_eq!(
        h.run_inside("systemctl start missing").unwrap().status.code(),
        Some(5)
    );
    let calls = h.systemctl_calls().unwrap();
    assert_eq!(
        calls[..6],
        [
            "daemon-reload",
            "enable --now demo",
            "is-active demo.service",
            "is-enabled demo",
            "restart demo",
            "is-active -q demo"
        ]
    );

    // Faults.
    h.link_down().unwrap();
    assert!(banner(h.address()).is_err());
    h.link_up().unwrap();
    assert!(banner(h.address()).is_ok());
    h.kill_sshd().unwrap();
    assert!(banner(h.address()).is_err());
    h.start_sshd().unwrap();
    assert!(banner(h.address()).is_ok());
    let mut h2 = hosts[1].clone();
    let old = h2.fingerprint().to_owned();
    let new = h2.rotate_host_key().unwrap();
    assert_ne!(old, new);
    assert_eq!(
        Sandbox::attach("sandbox-tests")
            .unwrap()
            .host(&h2.info.name)
            .unwrap()
            .fingerprint(),
        new
    );

    // The second network: internal hosts are not reachable from the machine (no route, nothing leaves).
    let inner = &sb.internal_hosts()[0];
    assert_eq!(inner.address(), format!("198.19.{idx}.11"));
    assert!(banner(inner.address()).is_err());
    assert_eq!(inner.sh_inside("hostname").unwrap().trim(), inner.info.name);
    let bastion = sb.bastion().unwrap();
    assert!(
        bastion
            .sh_inside("ip -4 -o addr")
            .unwrap()
            .contains(&format!("198.19.{idx}.1/24"))
    );
    assert_eq!(
        bastion.sh_inside("cat /proc/sys/net/ipv4/ip_forward").unwrap(),
        "0\n"
    );

    // Inventory and state are written outside the repo.
    let dir = sb.state().dir.clone();
    assert!(dir.starts_with("/tmp/capkk-sandbox"));
    let inv = std::fs::read_to_string(dir.join("inventory.yaml")).unwrap();
    assert!(inv.contains(h.address()) && inv.contains("private_key_file"));
    assert!(!inv.contains(&sb.credentials().password));

    // Idempotent: a second `up` of the same name replaces the first (same slot, fresh hosts).
    let init_pid = std::fs::read_to_string(h.info.dir.join("init.pid")).unwrap();
    let again = Sandbox::up(&SandboxConfig::new("sandbox-tests", 1)).unwrap();
    assert_eq!(again.state().index, idx);
    assert!(
        !Path::new(&format!("/proc/{}", init_pid.trim())).exists(),
        "old host processes are gone"
    );
    assert!(
        banner(&format!("198.18.{idx}.12")).is_err(),
        "old second host is gone"
    );
    assert!(banner(again.hosts()[0].address()).is_ok());
    std::mem::forget(sb); // already replaced; its Drop would tear down the new one
    let netns = again.hosts()[0].info.netns.clone();
    drop(again);
    assert!(!dir.exists());
    assert!(!Path::new(&format!("/sys/class/net/kkbr{idx}")).exists());
    assert!(!Path::new(&format!("/run/netns/{netns}")).exists());
}
