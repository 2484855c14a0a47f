//! What `make release` leaves in its output directory: the clusterctl repository, the image archive, the
//! CycloneDX SBOM of the manager's crate and `SHA256SUMS` over all of them. Run by `make release-test`, which
//! builds the release first and names its directory and version in `CAPKK_RELEASE_OUT` and
//! `CAPKK_RELEASE_VERSION`; without them the test fails saying so.

use std::{collections::BTreeMap, path::PathBuf};

use sha2::{Digest, Sha256};

struct Release {
    out: PathBuf,
    version: String,
}

fn release() -> Release {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: this test checks the output of `make release`; run it with `make release-test`")
        })
    };
    let out = PathBuf::from(var("CAPKK_RELEASE_OUT"));
    assert!(
        out.is_dir(),
        "CAPKK_RELEASE_OUT {} is not a directory",
        out.display()
    );
    Release {
        out,
        version: var("CAPKK_RELEASE_VERSION"),
    }
}

/// `SHA256SUMS` as path -> digest.
fn sums(r: &Release) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(r.out.join("SHA256SUMS")).expect("SHA256SUMS is there");
    text.lines()
        .map(|l| {
            let (digest, path) = l
                .split_once("  ")
                .unwrap_or_else(|| panic!("not a sha256sum line: {l}"));
            (path.to_owned(), digest.to_owned())
        })
        .collect()
}

/// The version of `name` in the workspace's Cargo.lock (the one version the manager links).
fn locked_version(name: &str) -> String {
    let lock = capkk_mgmt::repo_root().join("Cargo.lock");
    let text = std::fs::read_to_string(&lock).expect("Cargo.lock");
    let versions: Vec<&str> = text
        .split("[[package]]")
        .filter(|p| p.lines().any(|l| l == format!("name = \"{name}\"")))
        .filter_map(|p| {
            p.lines()
                .find_map(|l| l.strip_prefix("version = \"")?.strip_suffix('"'))
        })
        .collect();
    assert_eq!(versions.len(), 1, "{name} in Cargo.lock: {versions:?}");
    versions[0].to_owned()
}

#[test]
fn sha256sums_lists_the_repository_the_script_the_image_archive_and_the_sbom_with_their_digests() {
    let r = release();
    let sums = sums(&r);
    let repo = format!("infrastructure-kubekey/{}", r.version);
    let mut want: Vec<String> = std::fs::read_dir(r.out.join(&repo))
        .expect("the clusterctl repository is there")
        .map(|e| format!("{repo}/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    want.push("clusterctl-kubekey.sh".to_owned());
    want.push(format!("capkk-manager-{}.oci.tar", r.version));
    want.push(format!("capkk-manager-{}.cdx.json", r.version));
    want.sort();
    assert!(
        want.contains(&format!("{repo}/infrastructure-components.yaml")),
        "{want:?}"
    );
    assert_eq!(
        sums.keys().cloned().collect::<Vec<_>>(),
        want,
        "SHA256SUMS lists exactly the release's files"
    );
    for (path, digest) in &sums {
        let bytes = std::fs::read(r.out.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(&hex::encode(Sha256::digest(&bytes)), digest, "digest of {path}");
    }
}

#[test]
fn the_sbom_names_the_manager_crate_and_its_dependencies_with_their_locked_versions() {
    let r = release();
    let path = r.out.join(format!("capkk-manager-{}.cdx.json", r.version));
    let bom: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
            .expect("the SBOM is JSON");
    assert_eq!(bom["bomFormat"], "CycloneDX");
    assert_eq!(bom["specVersion"], "1.5");

    let subject = &bom["metadata"]["component"];
    assert_eq!(subject["name"], "capkk-controllers");
    assert_eq!(subject["version"], env!("CARGO_PKG_VERSION"));
    let targets: Vec<&str> = subject["components"]
        .as_array()
        .expect("the crate's targets")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        targets.contains(&"manager"),
        "the manager binary is a target of the SBOM's subject: {targets:?}"
    );

    let components = bom["components"].as_array().expect("components");
    let find = |name: &str| components.iter().find(|c| c["name"] == name);
    for name in ["kube", "russh", "secrecy", "capkk-ssh"] {
        let c = find(name).unwrap_or_else(|| panic!("{name} is not in the SBOM"));
        assert_eq!(c["version"], locked_version(name).as_str(), "{name}'s version");
    }
    let kube = find("kube").expect("kube");
    assert_eq!(
        kube["purl"],
        format!("pkg:cargo/kube@{}", locked_version("kube")).as_str()
    );
    assert!(
        kube["hashes"][0]["content"]
            .as_str()
            .is_some_and(|h| h.len() == 64),
        "kube carries its crate checksum"
    );
    // What the manager links, not what only its tests use.
    for dev_only in ["capkk-mgmt", "capkk-sandbox", "tower-test"] {
        assert!(
            find(dev_only).is_none(),
            "{dev_only} (a dev-dependency) is in the SBOM"
        );
    }
}
