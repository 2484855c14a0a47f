//! The component defaults: which containerd, runc, crictl and pause image a host gets for the Kubernetes version
//! of its Machine, when its `spec.containerManager` names none.
//!
//! [`COMPONENT_DEFAULTS`] is the one table (README and docs/compatibility.md show it; the node artifacts of
//! `test/vm/artifacts` are checked against it by `node_artifacts_build_the_defaults_of_their_kubernetes_minor`
//! below, and `build.sh`/`build-prev.sh` read the pause tag from it). Where its values come from:
//!
//! - **pause**: kubeadm's `PauseVersion` constant (`cmd/kubeadm/app/constants/constants.go` of
//!   `k8s.io/kubernetes`) in the newest patch release of each minor: the tag `kubeadm config images list`
//!   prints and kubeadm's preflight pulls, and so the sandbox image containerd must use (kubeadm warns when
//!   the runtime's differs, and the kubelet never pins the sandbox, so a mismatch leaves an unused image).
//! - **crictl**: the cri-tools release of the same minor (cri-tools versions follow Kubernetes': crictl of
//!   minor N is written and tested against the CRI of Kubernetes N; Kubernetes' own `build/dependencies.yaml`
//!   names these releases).
//! - **containerd, runc**: containerd 2.2.1 and the runc its release is tested with (`script/setup/runc-version`
//!   of containerd v2.2.1: v1.3.4). containerd's RELEASES.md recommends 2.1.0+ for Kubernetes 1.31-1.34; 2.x is
//!   what v1.36's kubelet needs (1.x lacks the CRI `RuntimeConfig` call it uses for the cgroup driver). One
//!   runtime for every row keeps the tested combination and the served node artifacts few.
//!
//! A version outside the table is refused (naming the fields to set) rather than given the nearest row: a
//! guessed runtime for a Kubernetes release nobody tried is exactly what this table exists to avoid.

use crate::{Error, Result};

/// The components of one Kubernetes minor. Spelled as the catalogue requests them (containerd without a `v`,
/// runc and crictl with one) and the pause image's tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ComponentDefaults {
    /// Kubernetes minor, `1.36`.
    pub kubernetes_minor: &'static str,
    /// containerd release, `2.2.1`.
    pub containerd: &'static str,
    /// runc release, `v1.3.4`.
    pub runc: &'static str,
    /// crictl (cri-tools) release, `v1.36.0`.
    pub crictl: &'static str,
    /// Tag of the pause image kubeadm of this minor names, `3.10.2`.
    pub pause: &'static str,
}

impl ComponentDefaults {
    const fn new(
        kubernetes_minor: &'static str,
        containerd: &'static str,
        runc: &'static str,
        crictl: &'static str,
        pause: &'static str,
    ) -> Self {
        Self {
            kubernetes_minor,
            containerd,
            runc,
            crictl,
            pause,
        }
    }
}

/// The component defaults by Kubernetes minor, oldest first. One row per line: `test/vm/artifacts/*.sh` read
/// rows with `sed` (`ComponentDefaults::new("<minor>", "<containerd>", "<runc>", "<crictl>", "<pause>"),`).
#[rustfmt::skip]
pub const COMPONENT_DEFAULTS: &[ComponentDefaults] = &[
    ComponentDefaults::new("1.31", "2.2.1", "v1.3.4", "v1.31.1", "3.10"),
    ComponentDefaults::new("1.32", "2.2.1", "v1.3.4", "v1.32.0", "3.10"),
    ComponentDefaults::new("1.33", "2.2.1", "v1.3.4", "v1.33.0", "3.10"),
    ComponentDefaults::new("1.34", "2.2.1", "v1.3.4", "v1.34.0", "3.10.1"),
    ComponentDefaults::new("1.35", "2.2.1", "v1.3.4", "v1.35.0", "3.10.1"),
    ComponentDefaults::new("1.36", "2.2.1", "v1.3.4", "v1.36.0", "3.10.2"),
];

/// The newest row: what tools that have no Kubernetes version at hand (benchmarks) take.
pub const NEWEST: ComponentDefaults = COMPONENT_DEFAULTS[COMPONENT_DEFAULTS.len() - 1];

/// Where kubeadm pulls its images from when nothing else is configured, and so the default sandbox image's.
pub const DEFAULT_IMAGE_REPOSITORY: &str = "registry.k8s.io";

/// The table as the docs show it (README's configuration reference and docs/compatibility.md carry exactly
/// this text; a unit test fails when either drifts).
pub fn markdown_table() -> String {
    let mut t = String::from(
        "| Kubernetes | containerd | runc | crictl | sandbox image (pause) |\n|---|---|---|---|---|\n",
    );
    for d in COMPONENT_DEFAULTS {
        t.push_str(&format!(
            "| v{} | {} | {} | {} | `pause:{}` |\n",
            d.kubernetes_minor, d.containerd, d.runc, d.crictl, d.pause
        ));
    }
    t
}

/// The `major.minor` of a Kubernetes version (`v1.36.3`, `1.36.3`, `v1.36.0-rc.1`), if it has that shape.
pub fn kubernetes_minor(version: &str) -> Option<String> {
    let v = version.trim();
    let v = v.strip_prefix('v').unwrap_or(v);
    let mut parts = v.splitn(3, '.');
    let major = parts
        .next()
        .filter(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))?;
    let minor = parts.next()?;
    let minor: String = minor.chars().take_while(char::is_ascii_digit).collect();
    if minor.is_empty() {
        return None;
    }
    Some(format!("{major}.{minor}"))
}

/// The table's row for a Kubernetes version, if it has one.
pub fn defaults_for(kubernetes_version: &str) -> Option<&'static ComponentDefaults> {
    let minor = kubernetes_minor(kubernetes_version)?;
    COMPONENT_DEFAULTS.iter().find(|d| d.kubernetes_minor == minor)
}

/// The sandbox image kubeadm names for `pause_tag`: `<repository>/pause:<tag>`, the repository being the
/// cluster's private registry when it has one (the repository kubeadm's images come from then), else
/// `registry.k8s.io`.
pub fn sandbox_image(private_registry: Option<&str>, pause_tag: &str) -> String {
    let repo = private_registry
        .map(|r| r.trim().trim_end_matches('/'))
        .filter(|r| !r.is_empty())
        .unwrap_or(DEFAULT_IMAGE_REPOSITORY);
    format!("{repo}/pause:{pause_tag}")
}

/// What the spec says (each `None` or empty: take the table's), and what decides the table's row.
#[derive(Clone, Copy, Debug, Default)]
pub struct ComponentSpec<'a> {
    /// The Machine's Kubernetes version (`KKInstance.spec.kubernetesVersion`).
    pub kubernetes_version: Option<&'a str>,
    /// `spec.containerManager.version`.
    pub containerd: Option<&'a str>,
    /// `spec.containerManager.runcVersion`.
    pub runc: Option<&'a str>,
    /// `spec.containerManager.crictlVersion`.
    pub crictl: Option<&'a str>,
    /// `spec.containerManager.sandboxImage`.
    pub sandbox_image: Option<&'a str>,
    /// The KKCluster's `spec.registry.privateRegistry` (the default sandbox image's repository).
    pub private_registry: Option<&'a str>,
}

/// The versions a host gets: the spec's where it names one, else the table's row for the Kubernetes version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedComponents {
    /// The Kubernetes minor whose row was used, when one was needed.
    pub kubernetes_minor: Option<String>,
    /// containerd, catalogue spelling (`2.2.1`).
    pub containerd: String,
    /// runc (`v1.3.4`).
    pub runc: String,
    /// crictl (`v1.36.0`).
    pub crictl: String,
    /// The pod sandbox image.
    pub sandbox_image: String,
    /// The spec's fields that were filled from the table (`version`, `runcVersion`, `crictlVersion`,
    /// `sandboxImage`), in that order.
    pub defaulted: Vec<&'static str>,
}

fn given(v: Option<&str>) -> Option<&str> {
    v.map(str::trim).filter(|v| !v.is_empty())
}

/// Resolve the components of one host: every field the spec sets wins; the others come from the table's row
/// for the Kubernetes version. A missing or unknown version is an error only when some field needs the table,
/// and it names the first such field (the message lists all of them and the versions the table knows).
pub fn resolve(spec: &ComponentSpec<'_>) -> Result<ResolvedComponents> {
    let fields = [
        ("version", given(spec.containerd)),
        ("runcVersion", given(spec.runc)),
        ("crictlVersion", given(spec.crictl)),
        ("sandboxImage", given(spec.sandbox_image)),
    ];
    let defaulted: Vec<&'static str> = fields
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(f, _)| *f)
        .collect();
    let row = if defaulted.is_empty() {
        None
    } else {
        let version = given(spec.kubernetes_version);
        let row = version.and_then(defaults_for);
        if row.is_none() {
            let known = format!(
                "{}-{}",
                COMPONENT_DEFAULTS[0].kubernetes_minor, NEWEST.kubernetes_minor
            );
            let what = match version {
                None => "the Machine has no Kubernetes version (Machine.spec.version)".to_owned(),
                Some(v) => format!("Kubernetes {v} is not in this release's component defaults (v{known})"),
            };
            let all = defaulted
                .iter()
                .map(|f| format!("spec.containerManager.{f}"))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(Error::InvalidInput {
                field: format!("spec.containerManager.{}", defaulted[0]),
                message: format!("{what}: set {all} in the KKMachine (template)"),
            });
        }
        row
    };
    let pick = |spec: Option<&str>, table: fn(&ComponentDefaults) -> &'static str| -> String {
        match (given(spec), row) {
            (Some(v), _) => v.to_owned(),
            // `row` is Some whenever a field is missing (checked above).
            (None, Some(r)) => table(r).to_owned(),
            (None, None) => String::new(),
        }
    };
    let containerd =
        crate::binary::catalogue::normalize_version("containerd", &pick(spec.containerd, |r| r.containerd));
    Ok(ResolvedComponents {
        kubernetes_minor: row.map(|r| r.kubernetes_minor.to_owned()),
        containerd,
        runc: pick(spec.runc, |r| r.runc),
        crictl: pick(spec.crictl, |r| r.crictl),
        sandbox_image: match (given(spec.sandbox_image), row) {
            (Some(s), _) => s.to_owned(),
            (None, Some(r)) => sandbox_image(spec.private_registry, r.pause),
            (None, None) => String::new(),
        },
        defaulted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &str) -> Vec<u64> {
        v.trim_start_matches('v')
            .split('.')
            .map(|p| p.parse().unwrap())
            .collect()
    }

    #[test]
    fn the_table_has_one_row_per_minor_in_ascending_order_without_gaps() {
        let minors: Vec<u64> = COMPONENT_DEFAULTS
            .iter()
            .map(|d| parse(d.kubernetes_minor)[1])
            .collect();
        for w in minors.windows(2) {
            assert_eq!(w[1], w[0] + 1, "{minors:?}");
        }
        assert_eq!(NEWEST.kubernetes_minor, "1.36");
    }

    #[test]
    fn crictl_of_every_row_is_the_cri_tools_release_of_the_same_minor() {
        for d in COMPONENT_DEFAULTS {
            let c = parse(d.crictl);
            assert_eq!(format!("{}.{}", c[0], c[1]), d.kubernetes_minor, "{d:?}");
        }
    }

    #[test]
    fn every_row_spells_its_versions_as_the_catalogue_requests_them() {
        for d in COMPONENT_DEFAULTS {
            assert!(!d.containerd.starts_with('v'), "{d:?}");
            assert!(d.runc.starts_with('v') && d.crictl.starts_with('v'), "{d:?}");
            assert!(!d.pause.starts_with('v') && !d.pause.is_empty(), "{d:?}");
            // Every value reaches a host script: the CRD's version pattern must accept it.
            for v in [d.containerd, d.runc, d.crictl, d.pause] {
                assert!(v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.'), "{v}");
            }
        }
    }

    #[test]
    fn the_pause_tag_is_the_one_kubeadm_names_for_each_minor() {
        // kubeadm's PauseVersion constant in each minor's newest patch release (k8s.io/kubernetes
        // cmd/kubeadm/app/constants/constants.go), read when the table was written.
        let kubeadm = [
            ("1.31", "3.10"),
            ("1.32", "3.10"),
            ("1.33", "3.10"),
            ("1.34", "3.10.1"),
            ("1.35", "3.10.1"),
            ("1.36", "3.10.2"),
        ];
        for (minor, pause) in kubeadm {
            assert_eq!(defaults_for(minor).map(|d| d.pause), Some(pause), "{minor}");
        }
    }

    #[test]
    fn kubernetes_versions_are_reduced_to_their_minor_with_or_without_v_or_a_pre_release() {
        assert_eq!(kubernetes_minor("v1.36.3").as_deref(), Some("1.36"));
        assert_eq!(kubernetes_minor("1.35.4").as_deref(), Some("1.35"));
        assert_eq!(kubernetes_minor("v1.37.0-rc.1").as_deref(), Some("1.37"));
        assert_eq!(kubernetes_minor(" v1.32 ").as_deref(), Some("1.32"));
        assert_eq!(kubernetes_minor("latest"), None);
        assert_eq!(kubernetes_minor("v1"), None);
        assert_eq!(kubernetes_minor(""), None);
    }

    #[test]
    fn a_spec_naming_no_components_gets_the_row_of_its_kubernetes_minor() {
        let r = resolve(&ComponentSpec {
            kubernetes_version: Some("v1.36.3"),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            r,
            ResolvedComponents {
                kubernetes_minor: Some("1.36".into()),
                containerd: "2.2.1".into(),
                runc: "v1.3.4".into(),
                crictl: "v1.36.0".into(),
                sandbox_image: "registry.k8s.io/pause:3.10.2".into(),
                defaulted: vec!["version", "runcVersion", "crictlVersion", "sandboxImage"],
            }
        );
        let older = resolve(&ComponentSpec {
            kubernetes_version: Some("1.35.4"),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(older.crictl, "v1.35.0");
        assert_eq!(older.sandbox_image, "registry.k8s.io/pause:3.10.1");
    }

    #[test]
    fn the_default_sandbox_image_comes_from_the_clusters_private_registry_when_it_has_one() {
        let r = resolve(&ComponentSpec {
            kubernetes_version: Some("v1.36.3"),
            private_registry: Some("198.18.0.1:5000/"),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(r.sandbox_image, "198.18.0.1:5000/pause:3.10.2");
        let blank = resolve(&ComponentSpec {
            kubernetes_version: Some("v1.36.3"),
            private_registry: Some("  "),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(blank.sandbox_image, "registry.k8s.io/pause:3.10.2");
    }

    #[test]
    fn every_value_the_spec_sets_wins_over_the_table_and_only_the_rest_is_defaulted() {
        let r = resolve(&ComponentSpec {
            kubernetes_version: Some("v1.36.3"),
            containerd: Some("v1.7.13"),
            crictl: Some("v1.29.0"),
            sandbox_image: Some(""),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(r.containerd, "1.7.13", "containerd is spelled without its v");
        assert_eq!(r.crictl, "v1.29.0");
        assert_eq!(r.runc, "v1.3.4");
        assert_eq!(
            r.sandbox_image, "registry.k8s.io/pause:3.10.2",
            "an empty field is unset"
        );
        assert_eq!(r.defaulted, vec!["runcVersion", "sandboxImage"]);
    }

    #[test]
    fn a_spec_naming_every_component_needs_no_kubernetes_version_at_all() {
        for version in [None, Some("v9.99.0"), Some("latest")] {
            let r = resolve(&ComponentSpec {
                kubernetes_version: version,
                containerd: Some("1.6.4"),
                runc: Some("v1.1.12"),
                crictl: Some("v1.24.0"),
                sandbox_image: Some("mirror.example/pause:3.6"),
                private_registry: None,
            })
            .unwrap();
            assert_eq!(r.kubernetes_minor, None);
            assert!(r.defaulted.is_empty());
            assert_eq!(r.sandbox_image, "mirror.example/pause:3.6");
        }
    }

    #[test]
    fn an_unknown_kubernetes_version_is_refused_naming_the_first_field_to_set_and_listing_the_rest() {
        let e = resolve(&ComponentSpec {
            kubernetes_version: Some("v1.37.2"),
            containerd: Some("2.2.1"),
            ..Default::default()
        })
        .unwrap_err();
        let Error::InvalidInput { field, message } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(field, "spec.containerManager.runcVersion");
        assert!(message.contains("Kubernetes v1.37.2"), "{message}");
        assert!(message.contains("v1.31-1.36"), "{message}");
        assert!(
            message.contains("spec.containerManager.crictlVersion, spec.containerManager.sandboxImage"),
            "{message}"
        );
        assert!(!message.contains("spec.containerManager.version"), "{message}");
    }

    /// The module version `go.mod` of `test/vm/artifacts/<dir>` requires (the pins of the node artifacts).
    fn artifact_pin(dir: &str, module: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../test/vm/artifacts")
            .join(dir)
            .join("go.mod");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        text.lines()
            .find_map(|l| {
                let mut w = l.split_whitespace();
                let first = w.next()?;
                let (m, v) = if first == "require" {
                    (w.next()?, w.next()?)
                } else {
                    (first, w.next()?)
                };
                (m == module && v.starts_with('v')).then(|| v.to_owned())
            })
            .unwrap_or_else(|| panic!("{} requires no {module}", path.display()))
    }

    /// Components of the previous minor's node artifact set that are not its row's, each with why. The set
    /// serves the main set's build instead, and its clusters set the field (`tcg-knobs.py` does).
    const PREV_SET_GAPS: &[(&str, &str)] = &[(
        "crictl",
        "the Go module proxy the node artifacts are built from does not serve sigs.k8s.io/cri-tools v1.35.0",
    )];

    #[test]
    fn node_artifacts_build_the_defaults_of_their_kubernetes_minor() {
        // The main set (test/vm/artifacts/tools): its Kubernetes minor's row, every component.
        let kube = artifact_pin("tools/kube", "k8s.io/kubernetes");
        let row =
            defaults_for(&kube).unwrap_or_else(|| panic!("the node artifacts' Kubernetes {kube} has no row"));
        let containerd = artifact_pin("tools/containerd", "github.com/containerd/containerd/v2");
        let runc = artifact_pin("tools/runc", "github.com/opencontainers/runc");
        let crictl = artifact_pin("tools/crictl", "sigs.k8s.io/cri-tools");
        assert_eq!(containerd, format!("v{}", row.containerd), "containerd of {kube}");
        assert_eq!(runc, row.runc, "runc of {kube}");
        assert_eq!(crictl, row.crictl, "crictl of {kube}");
        // The previous minor's set (tools-prev) builds only Kubernetes and pause and serves the main set's
        // containerd, runc and crictl: they must be its row's too, but for the gaps named above.
        let prev = artifact_pin("tools-prev/kube", "k8s.io/kubernetes");
        let prow =
            defaults_for(&prev).unwrap_or_else(|| panic!("the previous set's Kubernetes {prev} has no row"));
        assert_eq!(
            containerd,
            format!("v{}", prow.containerd),
            "containerd of {prev}"
        );
        assert_eq!(runc, prow.runc, "runc of {prev}");
        let crictl_gap = PREV_SET_GAPS.iter().any(|(c, _)| *c == "crictl");
        assert_eq!(
            crictl != prow.crictl,
            crictl_gap,
            "crictl of {prev}: the set serves {crictl}, the row says {}; PREV_SET_GAPS must name crictl \
             exactly when they differ",
            prow.crictl
        );
    }

    #[test]
    fn the_readme_and_the_compatibility_matrix_show_the_table_as_it_is() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let table = markdown_table();
        for doc in ["README.md", "docs/compatibility.md"] {
            let text = std::fs::read_to_string(root.join(doc)).unwrap();
            assert!(
                text.contains(&table),
                "{doc} does not show the component defaults as they are; paste:\n{table}"
            );
        }
    }

    #[test]
    fn a_machine_without_a_kubernetes_version_is_refused_when_the_table_is_needed() {
        for version in [None, Some(""), Some("latest")] {
            let e = resolve(&ComponentSpec {
                kubernetes_version: version,
                ..Default::default()
            })
            .unwrap_err();
            let Error::InvalidInput { field, message } = &e else {
                panic!("{e:?}")
            };
            assert_eq!(field, "spec.containerManager.version");
            if version.is_none_or(str::is_empty) {
                assert!(message.contains("Machine.spec.version"), "{message}");
            }
        }
    }
}
