//! The artifact catalogue: which files exist, where they come from, how they are verified and installed.
//!
//! # URL layout
//!
//! | id | default URL | `component.host` path (same layout on an offline file server) |
//! |---|---|---|
//! | `kubeadm`, `kubelet`, `kubectl` | `https://dl.k8s.io/release/{v}/bin/linux/{arch}/{id}` | `/kubernetes-release/release/{v}/bin/linux/{arch}/{id}` |
//! | `cni` | `https://github.com/containernetworking/plugins/releases/download/{v}/cni-plugins-linux-{arch}-{v}.tgz` | `/containernetworking/plugins/releases/download/{v}/cni-plugins-linux-{arch}-{v}.tgz` |
//! | `crictl` | `https://github.com/kubernetes-sigs/cri-tools/releases/download/{v}/crictl-{v}-linux-{arch}.tar.gz` | `/cri-tools/releases/download/{v}/crictl-{v}-linux-{arch}.tar.gz` |
//! | `containerd` | `https://github.com/containerd/containerd/releases/download/v{v}/containerd-{v}-linux-{arch}.tar.gz` | `/containerd/containerd/releases/download/v{v}/containerd-{v}-linux-{arch}.tar.gz` |
//! | `runc` | `https://github.com/opencontainers/runc/releases/download/{v}/runc.{arch}` | `/opencontainers/runc/releases/download/{v}/runc.{arch}` |
//!
//! `{v}` is the version as the catalogue spells it (`v1.32.0` for Kubernetes, crictl, CNI and runc; `1.7.13`
//! for containerd). `zone: cn` switches the default to the QingStor mirrors CAPKK uses (same path as the host
//! layout under `https://kubernetes-release.pek3b.qingstor.com`, CNI under
//! `https://containernetworking.pek3b.qingstor.com/plugins/...`); `component.host` wins over the zone.
//!
//! Precedence of the source: override `url` (used verbatim) > override `path` (joined to `component.host`, or
//! to the default URL's origin) > `component.host` + layout path > zone > default.
//!
//! # Checksums
//!
//! SHA-256 is always verified. Where the expected digest comes from, first match wins:
//!
//! 1. override `checksum.value`;
//! 2. override `checksum.path` (a `sha256sum`-style file, absolute URL or path on `component.host`);
//! 3. the embedded pin [`KNOWN_SHA256`] (the earlier releases' defaults, and the Kubernetes versions the
//!    project tested first; a pinned digest protects even against a mirror that serves a consistent pair of
//!    tampered artifact and checksum file);
//! 4. the checksum file upstream publishes next to every artifact, fetched from the same place as the
//!    artifact (so from `component.host` when a mirror is set, which must mirror these files too):
//!
//! | id | published checksum file (upstream name) | content |
//! |---|---|---|
//! | `kubeadm`, `kubelet`, `kubectl` | `{artifact URL}.sha256` (dl.k8s.io) | the digest alone |
//! | `cni` | `{artifact URL}.sha256` | `digest  file` |
//! | `crictl` | `{artifact URL}.sha256` | the digest (older releases: `digest  file`) |
//! | `containerd` | `{artifact URL}.sha256sum` | `digest  file` |
//! | `runc` | `runc.sha256sum` in the release directory | one `digest  runc.{arch}` line per file |
//!
//! A published checksum file is fetched only over `https://`, or from `component.host` (the user's own
//! mirror, which may be plain HTTP); an artifact from any other plain-HTTP URL needs an explicit
//! `checksum.value` or `checksum.path`. The file is streamed with a size limit and must name the artifact's
//! file (or hold a single digest). So any released version works without a hand-kept table; what a
//! published checksum cannot guard against is a compromised origin serving both files. The component
//! defaults by Kubernetes version ([`crate::components`]) have no pins yet: upstream's digests of their
//! release files could not be read at the source where the table was written, and a digest copied from
//! anywhere else would be no pin; they resolve through the published files over `https://` (or the user's
//! mirror).
//!
//! # Install paths
//!
//! | id | installed as | mode |
//! |---|---|---|
//! | `kubeadm`, `kubelet`, `kubectl` | `/usr/local/bin/{id}` | 0755 |
//! | `runc` | `/usr/local/sbin/runc` | 0755 |
//! | `crictl` | archive extracted into `/usr/local/bin` (`crictl`) | from archive |
//! | `containerd` | archive extracted into `/usr/local` (`bin/containerd`, `bin/ctr`, shims) | from archive |
//! | `cni` | archive extracted into `/opt/cni/bin` | from archive |
//!
//! Archives leave a stamp `/var/lib/capkk/artifacts/{id}` holding the archive's SHA-256, so a re-run can tell
//! that the same archive is already extracted.

use crate::{Error, Result};

/// Default CNI plugins version.
pub const DEFAULT_CNI_VERSION: &str = "v1.3.0";
/// crictl where no Kubernetes version decides it (the newest row of [`crate::components::COMPONENT_DEFAULTS`]:
/// a host's is resolved from its Machine's version by [`crate::components::resolve`]).
pub const DEFAULT_CRICTL_VERSION: &str = crate::components::NEWEST.crictl;
/// containerd where no Kubernetes version decides it (the newest row of the component defaults).
pub const DEFAULT_CONTAINERD_VERSION: &str = crate::components::NEWEST.containerd;
/// runc where no Kubernetes version decides it (the newest row of the component defaults).
pub const DEFAULT_RUNC_VERSION: &str = crate::components::NEWEST.runc;

/// Directory of archive stamps on the host.
pub const STAMP_DIR: &str = "/var/lib/capkk/artifacts";
/// Directory where uploads / host downloads are staged before verification.
pub const STAGING_DIR: &str = "/var/lib/capkk/staging";

/// `(id, arch, version, sha256)` of upstream release files (digests as KubeKey's `version/components.json` and
/// upstream's checksum files publish them): the pin for the earlier releases' defaults (containerd 1.7.13,
/// runc v1.1.12, crictl v1.29.0) and the Kubernetes versions the project tested first. Not a list of supported versions: every other release resolves through its published
/// checksum file. Keep it small.
pub const KNOWN_SHA256: &[(&str, &str, &str, &str)] = &[
    (
        "kubeadm",
        "amd64",
        "v1.31.4",
        "6c8e2fd2fa2cab51debf215fcb9149b94e7046f69ff558290066875200975cf6",
    ),
    (
        "kubeadm",
        "amd64",
        "v1.32.0",
        "8a10abe691a693d6deeeb1c992bc75da9d8c76718a22327688f7eb1d7c15f0d6",
    ),
    (
        "kubeadm",
        "arm64",
        "v1.31.4",
        "4598c2f0c69e60feb47a070376da358f16efe0e1403c6aca97fa8f7ab1d0e7c0",
    ),
    (
        "kubeadm",
        "arm64",
        "v1.32.0",
        "5da9746a449a3b8a8312b6dd8c48dcb861036cf394306cfbc66a298ba1e8fbde",
    ),
    (
        "kubelet",
        "amd64",
        "v1.31.4",
        "9062fbb2b6054ecab07b9e841b0a49ab4acc224860b01c218d01ba95017c5e49",
    ),
    (
        "kubelet",
        "amd64",
        "v1.32.0",
        "5ad4965598773d56a37a8e8429c3dc3d86b4c5c26d8417ab333ae345c053dae2",
    ),
    (
        "kubelet",
        "arm64",
        "v1.31.4",
        "fb6f02f3324a72307acc11998eb5b1c3778167ae165c98f9d49bd011498e72f8",
    ),
    (
        "kubelet",
        "arm64",
        "v1.32.0",
        "bda9b2324c96693b38c41ecea051bab4c7c434be5683050b5e19025b50dbc0bf",
    ),
    (
        "kubectl",
        "amd64",
        "v1.31.4",
        "298e19e9c6c17199011404278f0ff8168a7eca4217edad9097af577023a5620f",
    ),
    (
        "kubectl",
        "amd64",
        "v1.32.0",
        "646d58f6d98ee670a71d9cdffbf6625aeea2849d567f214bc43a35f8ccb7bf70",
    ),
    (
        "kubectl",
        "arm64",
        "v1.31.4",
        "b97e93c20e3be4b8c8fa1235a41b4d77d4f2022ed3d899230dbbbbd43d26f872",
    ),
    (
        "kubectl",
        "arm64",
        "v1.32.0",
        "ba4004f98f3d3a7b7d2954ff0a424caa2c2b06b78c17b1dccf2acc76a311a896",
    ),
    (
        "cni",
        "amd64",
        "v1.2.0",
        "f3a841324845ca6bf0d4091b4fc7f97e18a623172158b72fc3fdcdb9d42d2d37",
    ),
    (
        "cni",
        "amd64",
        "v1.3.0",
        "754a71ed60a4bd08726c3af705a7d55ee3df03122b12e389fdba4bea35d7dd7e",
    ),
    (
        "cni",
        "arm64",
        "v1.2.0",
        "525e2b62ba92a1b6f3dc9612449a84aa61652e680f7ebf4eff579795fe464b57",
    ),
    (
        "cni",
        "arm64",
        "v1.3.0",
        "de7a666fd6ad83a228086bd55756db62ef335a193d1b143d910b69f079e30598",
    ),
    (
        "crictl",
        "amd64",
        "v1.29.0",
        "d16a1ffb3938f5a19d5c8f45d363bd091ef89c0bc4d44ad16b933eede32fdcbb",
    ),
    (
        "crictl",
        "arm64",
        "v1.29.0",
        "0b615cfa00c331fb9c4524f3d4058a61cc487b33a3436d1269e7832cf283f925",
    ),
    (
        "containerd",
        "amd64",
        "1.7.13",
        "c2371c009dd8b7738663333d91e5ab50d204f8bcae24201f45d59060d12c3a23",
    ),
    (
        "containerd",
        "arm64",
        "1.7.13",
        "118759e398f35337109592b4d237538872dc12a207d38832b9d04515d0acbc4d",
    ),
    (
        "runc",
        "amd64",
        "v1.1.12",
        "aadeef400b8f05645768c1476d1023f7875b78f52c7ff1967a6dbce236b8cbd8",
    ),
    (
        "runc",
        "arm64",
        "v1.1.12",
        "879f910a05c95c10c64ad8eb7d5e3aa8e4b30e65587b3d68e009a3565aed5bb8",
    ),
];

/// The embedded checksum for `(id, arch, version)`, if known.
pub fn known_sha256(id: &str, arch: &str, version: &str) -> Option<&'static str> {
    KNOWN_SHA256
        .iter()
        .find(|(i, a, v, _)| *i == id && *a == arch && *v == version)
        .map(|(_, _, _, h)| *h)
}

/// Where downloads happen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DownloadOn {
    /// The controller downloads once into its content-addressed cache and uploads to each host (default).
    #[default]
    Controller,
    /// Each host downloads directly (`curl` or `wget`) and verifies the SHA-256 itself.
    Host,
}

impl DownloadOn {
    /// Parse `component.downloadOn` (`controller`, `host`, empty = controller).
    pub fn parse(value: Option<&str>) -> Result<Self> {
        match value.map(str::trim).unwrap_or("") {
            "" | "controller" => Ok(DownloadOn::Controller),
            "host" => Ok(DownloadOn::Host),
            other => Err(Error::InvalidInput {
                field: "spec.component.downloadOn".into(),
                message: format!("{other:?} is not one of controller, host"),
            }),
        }
    }
}

/// A per-artifact override (mapped from the API's `component.overrides[]`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ArtifactOverride {
    /// Artifact id (`kubeadm`, `kubelet`, `kubectl`, `cni`, `crictl`, `containerd`, `runc`).
    pub id: String,
    /// Only for this arch (any when `None`).
    pub arch: Option<String>,
    /// Only for this version (any when `None`; compared with and without a leading `v`).
    pub version: Option<String>,
    /// Full URL (used verbatim).
    pub url: Option<String>,
    /// Path joined to `component.host` (or the default URL's origin).
    pub path: Option<String>,
    /// Hex SHA-256.
    pub checksum_value: Option<String>,
    /// URL, or path on `component.host`, of a `sha256sum`-style file.
    pub checksum_path: Option<String>,
}

/// Download sources (mapped from the API's `component`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ComponentSource {
    /// `cn` for the China mirrors.
    pub zone: Option<String>,
    /// Offline file server, e.g. `http://10.0.0.5:8080` (same path layout as the table above).
    pub host: Option<String>,
    /// Per-artifact overrides.
    pub overrides: Vec<ArtifactOverride>,
    /// Who downloads.
    pub download_on: DownloadOn,
}

/// How an artifact is installed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Install {
    /// A single executable copied to `dest` with `mode`.
    Binary {
        /// Absolute destination.
        dest: String,
        /// Permission bits.
        mode: u32,
    },
    /// A `.tar.gz` extracted into `dir`; `probe` must exist afterwards.
    Archive {
        /// Extraction directory.
        dir: String,
        /// A file the archive provides (used to detect a removed install).
        probe: String,
    },
}

/// What to install: id, version and arch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactRequest {
    /// Artifact id.
    pub id: String,
    /// Version (normalised by [`resolve`]).
    pub version: String,
    /// `amd64` or `arm64`.
    pub arch: String,
}

impl ArtifactRequest {
    /// A request.
    pub fn new(id: &str, version: &str, arch: &str) -> Self {
        Self {
            id: id.into(),
            version: version.into(),
            arch: arch.into(),
        }
    }
}

/// Where the expected SHA-256 comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChecksumSource {
    /// A known digest (embedded table or override value).
    Value(String),
    /// A checksum file named by the user (`checksum.path`), and the file name to look up in it.
    File {
        /// URL of the file.
        url: String,
        /// Name of the artifact file inside it.
        file_name: String,
    },
    /// The checksum file upstream publishes next to the artifact (see the module documentation).
    Published {
        /// URL of the file.
        url: String,
        /// Name of the artifact file inside it.
        file_name: String,
    },
}

/// The URL of the checksum file upstream publishes for artifact `id` downloaded from `url` (same origin,
/// upstream's file names).
pub fn published_checksum_url(id: &str, url: &str) -> String {
    match id {
        "runc" => match url.rsplit_once('/') {
            Some((dir, _)) => format!("{dir}/runc.sha256sum"),
            None => "runc.sha256sum".into(),
        },
        "containerd" => format!("{url}.sha256sum"),
        _ => format!("{url}.sha256"),
    }
}

/// A fully resolved artifact (source, checksum source, install).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// Artifact id.
    pub id: String,
    /// Normalised version.
    pub version: String,
    /// Arch.
    pub arch: String,
    /// Download URL.
    pub url: String,
    /// The spec field the URL comes from (an override's `url` or `path`, `spec.component.host`), named
    /// when a download from it is refused.
    pub url_field: String,
    /// Checksum source.
    pub checksum: ChecksumSource,
    /// How it is installed.
    pub install: Install,
}

impl Artifact {
    /// `id version arch` for messages.
    pub fn label(&self) -> String {
        format!("{} {} ({})", self.id, self.version, self.arch)
    }
}

struct Layout {
    default: &'static str,
    cn: &'static str,
    host_path: &'static str,
}

fn layout(id: &str) -> Option<Layout> {
    Some(match id {
        "kubeadm" | "kubelet" | "kubectl" => Layout {
            default: "https://dl.k8s.io/release/{v}/bin/linux/{arch}/{id}",
            cn: "https://kubernetes-release.pek3b.qingstor.com/release/{v}/bin/linux/{arch}/{id}",
            host_path: "/kubernetes-release/release/{v}/bin/linux/{arch}/{id}",
        },
        "cni" => Layout {
            default: "https://github.com/containernetworking/plugins/releases/download/{v}/cni-plugins-linux-{arch}-{v}.tgz",
            cn: "https://containernetworking.pek3b.qingstor.com/plugins/releases/download/{v}/cni-plugins-linux-{arch}-{v}.tgz",
            host_path: "/containernetworking/plugins/releases/download/{v}/cni-plugins-linux-{arch}-{v}.tgz",
        },
        "crictl" => Layout {
            default: "https://github.com/kubernetes-sigs/cri-tools/releases/download/{v}/crictl-{v}-linux-{arch}.tar.gz",
            cn: "https://kubernetes-release.pek3b.qingstor.com/cri-tools/releases/download/{v}/crictl-{v}-linux-{arch}.tar.gz",
            host_path: "/cri-tools/releases/download/{v}/crictl-{v}-linux-{arch}.tar.gz",
        },
        "containerd" => Layout {
            default: "https://github.com/containerd/containerd/releases/download/v{v}/containerd-{v}-linux-{arch}.tar.gz",
            cn: "https://kubernetes-release.pek3b.qingstor.com/containerd/containerd/releases/download/v{v}/containerd-{v}-linux-{arch}.tar.gz",
            host_path: "/containerd/containerd/releases/download/v{v}/containerd-{v}-linux-{arch}.tar.gz",
        },
        "runc" => Layout {
            default: "https://github.com/opencontainers/runc/releases/download/{v}/runc.{arch}",
            cn: "https://kubernetes-release.pek3b.qingstor.com/opencontainers/runc/releases/download/{v}/runc.{arch}",
            host_path: "/opencontainers/runc/releases/download/{v}/runc.{arch}",
        },
        _ => return None,
    })
}

/// Known artifact ids.
pub const ARTIFACT_IDS: &[&str] = &[
    "kubeadm",
    "kubelet",
    "kubectl",
    "cni",
    "crictl",
    "containerd",
    "runc",
];

fn install_of(id: &str) -> Install {
    match id {
        "runc" => Install::Binary {
            dest: "/usr/local/sbin/runc".into(),
            mode: 0o755,
        },
        "cni" => Install::Archive {
            dir: "/opt/cni/bin".into(),
            probe: "/opt/cni/bin/loopback".into(),
        },
        "crictl" => Install::Archive {
            dir: "/usr/local/bin".into(),
            probe: "/usr/local/bin/crictl".into(),
        },
        "containerd" => Install::Archive {
            dir: "/usr/local".into(),
            probe: "/usr/local/bin/containerd".into(),
        },
        bin => Install::Binary {
            dest: format!("/usr/local/bin/{bin}"),
            mode: 0o755,
        },
    }
}

/// The catalogue spelling of a version: containerd without `v`, everything else with `v`.
pub fn normalize_version(id: &str, version: &str) -> String {
    let bare = version.trim().trim_start_matches('v');
    if id == "containerd" {
        bare.to_owned()
    } else {
        format!("v{bare}")
    }
}

fn fill(template: &str, id: &str, v: &str, arch: &str) -> String {
    template
        .replace("{v}", v)
        .replace("{arch}", arch)
        .replace("{id}", id)
}

fn origin(url: &str) -> &str {
    let after = url.find("://").map(|i| i + 3).unwrap_or(0);
    match url[after..].find('/') {
        Some(i) => &url[..after + i],
        None => url,
    }
}

fn join(base: &str, path: &str) -> String {
    format!("{}/{}", base.trim_end_matches('/'), path.trim_start_matches('/'))
}

fn validate_hex(field: &str, value: &str) -> Result<String> {
    let v = value.trim().to_ascii_lowercase();
    if v.len() != 64 || !v.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::InvalidInput {
            field: field.into(),
            message: format!("{value:?} is not a 64-digit hex SHA-256"),
        });
    }
    Ok(v)
}

/// Resolve one request against the catalogue, the component source and the overrides.
pub fn resolve(req: &ArtifactRequest, source: &ComponentSource) -> Result<Artifact> {
    let Some(layout) = layout(&req.id) else {
        return Err(Error::InvalidInput {
            field: "spec.component.overrides[].id".into(),
            message: format!(
                "unknown artifact {:?}; known: {}",
                req.id,
                ARTIFACT_IDS.join(", ")
            ),
        });
    };
    let arch = crate::facts::normalize_arch(&req.arch);
    if arch != "amd64" && arch != "arm64" {
        return Err(Error::InvalidInput {
            field: "arch".into(),
            message: format!("{:?} is not supported (amd64, arm64)", req.arch),
        });
    }
    let v = normalize_version(&req.id, &req.version);
    if v.trim_start_matches('v').is_empty() {
        return Err(Error::InvalidInput {
            field: format!("version of {}", req.id),
            message: "empty version".into(),
        });
    }
    let host = source.host.as_deref().map(str::trim).filter(|h| !h.is_empty());
    let cn = source
        .zone
        .as_deref()
        .map(|z| z.eq_ignore_ascii_case("cn"))
        .unwrap_or(false);
    let default_url = if let Some(h) = host {
        join(h, &fill(layout.host_path, &req.id, &v, &arch))
    } else if cn {
        fill(layout.cn, &req.id, &v, &arch)
    } else {
        fill(layout.default, &req.id, &v, &arch)
    };
    let ov = source.overrides.iter().find(|o| {
        o.id == req.id
            && o.arch
                .as_deref()
                .is_none_or(|a| a.is_empty() || crate::facts::normalize_arch(a) == arch)
            && o.version
                .as_deref()
                .is_none_or(|ver| ver.is_empty() || normalize_version(&req.id, ver) == v)
    });
    let field = |name: &str| format!("spec.component.overrides[id={}].{name}", req.id);
    let (url, url_field) = match ov {
        Some(o) if o.url.as_deref().is_some_and(|u| !u.trim().is_empty()) => (
            o.url.as_deref().unwrap_or_default().trim().to_owned(),
            field("url"),
        ),
        Some(o) if o.path.as_deref().is_some_and(|p| !p.trim().is_empty()) => {
            let base = host
                .map(str::to_owned)
                .unwrap_or_else(|| origin(&default_url).to_owned());
            (
                join(&base, o.path.as_deref().unwrap_or_default().trim()),
                field("path"),
            )
        }
        _ if cn && host.is_none() => (default_url, "spec.component.zone".to_owned()),
        _ => (default_url, "spec.component.host".to_owned()),
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(Error::InvalidInput {
            field: field("url"),
            message: format!("{url:?} is not an http(s) URL"),
        });
    }
    let file_name = url.rsplit('/').next().unwrap_or_default().to_owned();
    let checksum = if let Some(value) = ov
        .and_then(|o| o.checksum_value.as_deref())
        .filter(|s| !s.trim().is_empty())
    {
        ChecksumSource::Value(validate_hex(&field("checksum.value"), value)?)
    } else if let Some(path) = ov
        .and_then(|o| o.checksum_path.as_deref())
        .filter(|s| !s.trim().is_empty())
    {
        let url = if path.starts_with("http://") || path.starts_with("https://") {
            path.to_owned()
        } else if let Some(h) = host {
            join(h, path)
        } else {
            return Err(Error::InvalidInput {
                field: field("checksum.path"),
                message: format!("{path:?} is relative but spec.component.host is not set"),
            });
        };
        ChecksumSource::File { url, file_name }
    } else if let Some(h) = known_sha256(&req.id, &arch, &v) {
        ChecksumSource::Value(h.to_owned())
    } else {
        // The published file comes from where the artifact comes from; over plain HTTP only from the user's
        // own mirror (component.host), never from an arbitrary http:// override URL.
        let from_host = host.is_some_and(|h| url.starts_with(&format!("{}/", h.trim_end_matches('/'))));
        if !url.starts_with("https://") && !from_host {
            return Err(Error::InvalidInput {
                field: field("checksum"),
                message: format!(
                    "{url} is plain HTTP outside spec.component.host, so its published checksum is not trusted; \
                     set checksum.value (hex SHA-256) or checksum.path for {} {v} ({arch})",
                    req.id
                ),
            });
        }
        ChecksumSource::Published {
            url: published_checksum_url(&req.id, &url),
            file_name: file_name.clone(),
        }
    };
    Ok(Artifact {
        id: req.id.clone(),
        version: v,
        arch,
        url,
        url_field,
        checksum,
        install: install_of(&req.id),
    })
}

/// Find the digest for `file_name` in a `sha256sum` (GNU or BSD style) file; a file holding exactly one
/// digest matches any name.
pub fn parse_checksum_file(text: &str, file_name: &str) -> Option<String> {
    let is_hex = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    let mut all = Vec::new();
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        // BSD: SHA256 (name) = hex
        if let Some(rest) = line.strip_prefix("SHA256 (")
            && let Some((name, hex)) = rest.split_once(") = ")
        {
            if is_hex(hex.trim()) {
                if name == file_name {
                    return Some(hex.trim().to_ascii_lowercase());
                }
                all.push(hex.trim().to_ascii_lowercase());
            }
            continue;
        }
        let mut parts = line.split_whitespace();
        let Some(hex) = parts.next().filter(|h| is_hex(h)) else {
            continue;
        };
        let name = parts.next().map(|n| n.trim_start_matches('*'));
        let base = name.map(|n| n.rsplit('/').next().unwrap_or(n));
        if base == Some(file_name) {
            return Some(hex.to_ascii_lowercase());
        }
        all.push(hex.to_ascii_lowercase());
    }
    if all.len() == 1 { all.pop() } else { None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src() -> ComponentSource {
        ComponentSource::default()
    }

    #[test]
    fn default_zone_host_and_overrides() {
        let a = resolve(&ArtifactRequest::new("kubeadm", "1.32.0", "x86_64"), &src()).unwrap();
        assert_eq!(a.url, "https://dl.k8s.io/release/v1.32.0/bin/linux/amd64/kubeadm");
        assert_eq!(
            a.url_field, "spec.component.host",
            "the field that would change it"
        );
        assert_eq!(
            a.checksum,
            ChecksumSource::Value("8a10abe691a693d6deeeb1c992bc75da9d8c76718a22327688f7eb1d7c15f0d6".into())
        );
        assert_eq!(
            a.install,
            Install::Binary {
                dest: "/usr/local/bin/kubeadm".into(),
                mode: 0o755
            }
        );
        let cn = ComponentSource {
            zone: Some("cn".into()),
            ..src()
        };
        let c = resolve(&ArtifactRequest::new("containerd", "v1.7.13", "arm64"), &cn).unwrap();
        assert_eq!(
            c.url,
            "https://kubernetes-release.pek3b.qingstor.com/containerd/containerd/releases/download/v1.7.13/containerd-1.7.13-linux-arm64.tar.gz"
        );
        assert_eq!(c.url_field, "spec.component.zone");
        let host = ComponentSource {
            zone: Some("cn".into()),
            host: Some("http://198.18.3.1:8080/".into()),
            ..src()
        };
        let k = resolve(&ArtifactRequest::new("kubelet", "v1.31.4", "amd64"), &host).unwrap();
        assert_eq!(
            k.url,
            "http://198.18.3.1:8080/kubernetes-release/release/v1.31.4/bin/linux/amd64/kubelet"
        );
        assert_eq!(k.url_field, "spec.component.host");
        let ov = ComponentSource {
            host: Some("http://mirror:80".into()),
            overrides: vec![
                ArtifactOverride {
                    id: "kubeadm".into(),
                    version: Some("v1.34.1".into()),
                    path: Some("/sim/kubeadm".into()),
                    checksum_value: Some("AB".repeat(32)),
                    ..Default::default()
                },
                ArtifactOverride {
                    id: "runc".into(),
                    url: Some("https://example.test/runc".into()),
                    checksum_path: Some("/sums/runc.sha256".into()),
                    ..Default::default()
                },
            ],
            ..src()
        };
        let s = resolve(&ArtifactRequest::new("kubeadm", "v1.34.1", "amd64"), &ov).unwrap();
        assert_eq!(s.url, "http://mirror:80/sim/kubeadm");
        assert_eq!(s.url_field, "spec.component.overrides[id=kubeadm].path");
        assert_eq!(s.checksum, ChecksumSource::Value("ab".repeat(32)));
        let r = resolve(&ArtifactRequest::new("runc", "1.1.12", "amd64"), &ov).unwrap();
        assert_eq!(r.url, "https://example.test/runc");
        assert_eq!(r.url_field, "spec.component.overrides[id=runc].url");
        assert_eq!(
            r.checksum,
            ChecksumSource::File {
                url: "http://mirror:80/sums/runc.sha256".into(),
                file_name: "runc".into()
            }
        );
    }

    #[test]
    fn unpinned_versions_use_upstreams_published_checksum_files() {
        let cases = [
            (
                "kubeadm",
                "v1.33.7",
                "https://dl.k8s.io/release/v1.33.7/bin/linux/amd64/kubeadm.sha256",
                "kubeadm",
            ),
            (
                "cni",
                "v1.4.1",
                "https://github.com/containernetworking/plugins/releases/download/v1.4.1/cni-plugins-linux-amd64-v1.4.1.tgz.sha256",
                "cni-plugins-linux-amd64-v1.4.1.tgz",
            ),
            // CAPKK's defaulted containerd and crictl.
            (
                "containerd",
                "1.6.4",
                "https://github.com/containerd/containerd/releases/download/v1.6.4/containerd-1.6.4-linux-amd64.tar.gz.sha256sum",
                "containerd-1.6.4-linux-amd64.tar.gz",
            ),
            (
                "crictl",
                "v1.24.0",
                "https://github.com/kubernetes-sigs/cri-tools/releases/download/v1.24.0/crictl-v1.24.0-linux-amd64.tar.gz.sha256",
                "crictl-v1.24.0-linux-amd64.tar.gz",
            ),
            (
                "runc",
                "v1.1.1",
                "https://github.com/opencontainers/runc/releases/download/v1.1.1/runc.sha256sum",
                "runc.amd64",
            ),
        ];
        for (id, v, url, file) in cases {
            let a = resolve(&ArtifactRequest::new(id, v, "amd64"), &src()).unwrap();
            assert_eq!(
                a.checksum,
                ChecksumSource::Published {
                    url: url.into(),
                    file_name: file.into()
                },
                "{id} {v}"
            );
        }
        // With a mirror: the same file names on the mirror, next to the artifact (plain HTTP allowed there).
        let mirror = ComponentSource {
            host: Some("http://198.18.3.1:8080".into()),
            ..src()
        };
        let a = resolve(&ArtifactRequest::new("containerd", "1.6.4", "arm64"), &mirror).unwrap();
        assert_eq!(
            a.checksum,
            ChecksumSource::Published {
                url: "http://198.18.3.1:8080/containerd/containerd/releases/download/v1.6.4/containerd-1.6.4-linux-arm64.tar.gz.sha256sum".into(),
                file_name: "containerd-1.6.4-linux-arm64.tar.gz".into()
            }
        );
        // Pins and overrides still win over the published file.
        let pinned = resolve(&ArtifactRequest::new("kubelet", "v1.32.0", "amd64"), &mirror).unwrap();
        assert!(matches!(pinned.checksum, ChecksumSource::Value(_)));
        let ov = ComponentSource {
            overrides: vec![ArtifactOverride {
                id: "kubeadm".into(),
                checksum_value: Some("cd".repeat(32)),
                ..Default::default()
            }],
            ..mirror.clone()
        };
        let a = resolve(&ArtifactRequest::new("kubeadm", "v1.33.7", "amd64"), &ov).unwrap();
        assert_eq!(a.checksum, ChecksumSource::Value("cd".repeat(32)));
    }

    #[test]
    fn a_plain_http_artifact_outside_the_mirror_needs_an_explicit_checksum() {
        let ov = ComponentSource {
            host: Some("http://198.18.3.1:8080".into()),
            overrides: vec![ArtifactOverride {
                id: "kubeadm".into(),
                url: Some("http://elsewhere.example/kubeadm".into()),
                ..Default::default()
            }],
            ..src()
        };
        let e = resolve(&ArtifactRequest::new("kubeadm", "v1.33.7", "amd64"), &ov)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("plain HTTP outside spec.component.host") && e.contains("checksum.value"),
            "{e}"
        );
        // A host that merely shares a prefix with the mirror is not the mirror.
        let ov = ComponentSource {
            overrides: vec![ArtifactOverride {
                id: "kubeadm".into(),
                url: Some("http://198.18.3.1:80800/kubeadm".into()),
                ..Default::default()
            }],
            ..ov
        };
        assert!(resolve(&ArtifactRequest::new("kubeadm", "v1.33.7", "amd64"), &ov).is_err());
    }

    #[test]
    fn refuses_unknown_ids_and_bad_values() {
        let e = resolve(&ArtifactRequest::new("helm", "v3", "amd64"), &src())
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown artifact"), "{e}");
        let bad = ComponentSource {
            overrides: vec![ArtifactOverride {
                id: "kubeadm".into(),
                checksum_value: Some("xyz".into()),
                ..Default::default()
            }],
            ..src()
        };
        let e = resolve(&ArtifactRequest::new("kubeadm", "v1.32.0", "amd64"), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("overrides[id=kubeadm].checksum.value"), "{e}");
        let e = resolve(&ArtifactRequest::new("kubeadm", "v1.32.0", "riscv64"), &src())
            .unwrap_err()
            .to_string();
        assert!(e.contains("riscv64"), "{e}");
        assert!(DownloadOn::parse(Some("sometimes")).is_err());
    }

    #[test]
    fn checksum_files() {
        let h = "a".repeat(64);
        let g = "b".repeat(64);
        let gnu = format!("{h}  crictl-v1.29.0-linux-amd64.tar.gz\n{g} *other.tgz\n");
        assert_eq!(parse_checksum_file(&gnu, "other.tgz"), Some(g.clone()));
        assert_eq!(
            parse_checksum_file(&gnu, "crictl-v1.29.0-linux-amd64.tar.gz"),
            Some(h.clone())
        );
        assert_eq!(parse_checksum_file(&gnu, "missing"), None);
        assert_eq!(
            parse_checksum_file(&format!("{h}\n"), "anything"),
            Some(h.clone())
        );
        let bsd = format!("SHA256 (runc.amd64) = {g}\n");
        assert_eq!(parse_checksum_file(&bsd, "runc.amd64"), Some(g));
    }
}
