//! test/kubeadm-sim/build.sh run by several callers at once, as the integration binaries of
//! `make test-integration INTEGRATION_JOBS=N` run it: each build finds its embedded binaries until it is done.
//! Plain tier: bash and coreutils; `go` and the control-plane binaries are stand-ins.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn executable(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn builds_of_two_versions_at_once_each_embed_their_binaries_until_they_are_done() {
    let dir = std::env::temp_dir().join(format!("capkk-sim-build-{}", std::process::id()));
    let (bin, cp, out) = (dir.join("bin"), dir.join("cp"), dir.join("out"));
    for d in [&bin, &cp, &out] {
        std::fs::create_dir_all(d).unwrap();
    }
    executable(&cp.join("etcd"), "#!/bin/sh\n# etcd stand-in\n");
    executable(
        &cp.join("kube-apiserver"),
        "#!/bin/sh\n# kube-apiserver stand-in\n",
    );
    // A `go build` that reads what it embeds at its start and again at its end, as the real one reads the files
    // while it compiles.
    executable(
        &bin.join("go"),
        "#!/bin/sh\nset -e\nwhile [ \"$1\" != -o ]; do shift; done\n\
         for f in embedded/etcd.gz embedded/kube-apiserver.gz; do test -s \"$f\" || { echo \"go: $f gone at start\" >&2; exit 1; }; done\n\
         sleep 2\n\
         for f in embedded/etcd.gz embedded/kube-apiserver.gz; do test -s \"$f\" || { echo \"go: $f gone while building\" >&2; exit 1; }; done\n\
         printf '#!/bin/sh\\n' >\"$2\"\nchmod +x \"$2\"\n",
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let build = |version: &str| {
        Command::new("bash")
            .arg(repo().join("test/kubeadm-sim/build.sh"))
            .arg(out.join(format!("kubeadm-sim-{version}/kubeadm")))
            .arg(&cp)
            .arg(version)
            .env("PATH", &path)
            .env("CAPKK_HEARTBEAT_SECS", "60")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let first = build("v1.35.2");
    std::thread::sleep(Duration::from_millis(500));
    let second = build("v1.36.3");
    let (a, b) = (
        first.wait_with_output().unwrap(),
        second.wait_with_output().unwrap(),
    );
    for (what, o) in [("v1.35.2", &a), ("v1.36.3", &b)] {
        assert!(
            o.status.success(),
            "the {what} build failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            out.join(format!("kubeadm-sim-{what}/kubeadm")).is_file(),
            "{what} built"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
