//! The benchmark workload: the exact list of commands and files one host receives, identical for all methods.
//!
//! A workload is a list of [`Op`]s per host. It is produced by running *our* code path once against a
//! [`RecordingExecutor`] (so it is by construction what capkk-rs sends), and the other methods replay it:
//! ansible as a generated playbook, OpenSSH as one `ssh` per op, the local floor as one `nsenter` per op.
//! File uploads are rendered for the non-capkk methods with the same atomic-write shell script the SSH
//! executor uses ([`upload_script`]).

use std::{
    borrow::Cow,
    collections::BTreeMap,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use base64::Engine as _;
use capkk_executor::{ExecError, ExecOutput, ExecRequest, Executor, FileSource, PutRequest, quote};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// One unit of work on a host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Op {
    /// Run `command` with `sh -c` (as root), optionally feeding `stdin`.
    Exec {
        /// Shell command line.
        command: String,
        /// Standard input (base64 in JSON).
        #[serde(with = "b64opt", default, skip_serializing_if = "Option::is_none")]
        stdin: Option<Vec<u8>>,
    },
    /// Write `content` to `path` atomically with `mode` and `owner`.
    Put {
        /// Absolute path on the host.
        path: String,
        /// File content (base64 in JSON).
        #[serde(with = "b64")]
        content: Vec<u8>,
        /// Permission bits.
        mode: u32,
        /// `user:group`, when set.
        owner: Option<String>,
    },
    /// Upload the local file `source` (an artifact from capkk-rs's content-addressed cache, kept for the
    /// whole benchmark) to `path` with `mode` and `owner`.
    #[serde(rename = "putfile")]
    PutFile {
        /// Absolute path on the host.
        path: String,
        /// Local file (`…/sha256/<hex>`: its name is its digest).
        source: PathBuf,
        /// Permission bits.
        mode: u32,
        /// `user:group`, when set.
        owner: Option<String>,
    },
}

impl Op {
    /// A short, non-secret label for logs and playbook task names.
    pub fn label(&self) -> String {
        match self {
            Op::Exec { command, .. } => {
                let first = command.lines().next().unwrap_or_default();
                let mut s: String = first.chars().take(60).collect();
                if s.len() < command.len() {
                    s.push('…');
                }
                format!("exec {s}")
            }
            Op::Put { path, content, .. } => format!("put {path} ({} bytes)", content.len()),
            Op::PutFile { path, source, .. } => format!(
                "put {path} ({} bytes)",
                std::fs::metadata(source).map_or(0, |m| m.len())
            ),
        }
    }

    /// The shell command line that performs this op over a plain shell (OpenSSH, local floor).
    pub fn command_line(&self) -> String {
        match self {
            Op::Exec { command, .. } => command.clone(),
            Op::Put {
                path, mode, owner, ..
            }
            | Op::PutFile {
                path, mode, owner, ..
            } => upload_script(path, *mode, owner.as_deref()),
        }
    }

    /// The shell command line that performs this op over a plain shell (OpenSSH, local floor), and its stdin
    /// (a `PutFile` reads its file).
    pub fn shell(&self) -> anyhow::Result<(String, Option<Cow<'_, [u8]>>)> {
        Ok(match self {
            Op::Exec { command, stdin } => (command.clone(), stdin.as_deref().map(Cow::Borrowed)),
            Op::Put {
                path,
                content,
                mode,
                owner,
            } => (
                upload_script(path, *mode, owner.as_deref()),
                Some(Cow::Borrowed(content.as_slice())),
            ),
            Op::PutFile {
                path,
                source,
                mode,
                owner,
            } => (
                upload_script(path, *mode, owner.as_deref()),
                Some(Cow::Owned(std::fs::read(source).map_err(|e| {
                    anyhow::anyhow!("reading {}: {e}", source.display())
                })?)),
            ),
        })
    }

    fn digest_into(&self, h: &mut Sha256) {
        match self {
            Op::Exec { command, stdin } => {
                h.update(b"exec\0");
                h.update(command.as_bytes());
                h.update(b"\0");
                if let Some(s) = stdin {
                    h.update(Sha256::digest(s));
                }
            }
            Op::Put {
                path,
                content,
                mode,
                owner,
            } => {
                h.update(b"put\0");
                h.update(path.as_bytes());
                h.update(Sha256::digest(content));
                h.update(mode.to_le_bytes());
                h.update(owner.as_deref().unwrap_or("").as_bytes());
            }
            Op::PutFile {
                path,
                source,
                mode,
                owner,
            } => {
                // The source is content-addressed (its name is its digest); its directory differs per run.
                h.update(b"putfile\0");
                h.update(path.as_bytes());
                h.update(b"\0");
                h.update(
                    source
                        .file_name()
                        .map(|n| n.as_encoded_bytes())
                        .unwrap_or_default(),
                );
                h.update(mode.to_le_bytes());
                h.update(owner.as_deref().unwrap_or("").as_bytes());
            }
        }
        h.update(b"\n");
    }
}

/// The same atomic write as capkk-ssh's upload: temp file beside the target, mode, owner, rename.
pub fn upload_script(path: &str, mode: u32, owner: Option<&str>) -> String {
    let mut s = String::from("set -e; umask 077; ");
    s.push_str(&format!(
        "p={}; d=$(dirname -- \"$p\"); mkdir -p -- \"$d\"; ",
        quote(path)
    ));
    s.push_str("t=$(mktemp -- \"$d/.capkk-upload.XXXXXX\"); trap 'rm -f -- \"$t\"' EXIT; cat > \"$t\"; ");
    s.push_str(&format!("chmod {:o} -- \"$t\"; ", mode & 0o7777));
    if let Some(owner) = owner {
        s.push_str(&format!("chown -- {} \"$t\"; ", quote(owner)));
    }
    s.push_str("n=$(wc -c < \"$t\"); mv -f -- \"$t\" \"$p\"; trap - EXIT; echo \"$n\"");
    s
}

/// Digest of an op sequence: two runs did the same work iff their digests are equal.
pub fn digest(ops: &[Op]) -> String {
    let mut h = Sha256::new();
    for op in ops {
        op.digest_into(&mut h);
    }
    hex::encode(h.finalize())
}

/// What must hold on a host after a correct run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Expect {
    /// Files: path -> (sha256 hex, octal mode, `user:group`).
    pub files: BTreeMap<String, (String, String, String)>,
    /// Files whose content must be exactly this text (sentinel, stand-in call log).
    pub exact: BTreeMap<String, String>,
    /// Files that must start with known content and go on with a known marker (CAPKK v3 appends its
    /// kube-proxy configuration to the kubeadm config it writes).
    #[serde(default)]
    pub prefixed: BTreeMap<String, Prefixed>,
}

/// A file that starts with `len` bytes of digest `sha256` and has `contains` somewhere after them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Prefixed {
    /// SHA-256 (hex) of the first `len` bytes.
    pub sha256: String,
    /// Length of the known prefix.
    pub len: usize,
    /// Octal mode.
    pub mode: String,
    /// `user:group`.
    pub owner: String,
    /// Text that must occur after the prefix.
    pub contains: String,
}

/// Everything the methods need: ops per host, checks per host, and what to remove between runs.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Workload {
    /// Where the op list came from (printed in the report).
    pub source: String,
    /// Ops per host name, in order.
    pub ops: BTreeMap<String, Vec<Op>>,
    /// Checks per host name.
    pub expect: BTreeMap<String, Expect>,
    /// Checks per host name for the capkk-v3 method: CAPKK v3 writes `write_files` with `echo '…' > path`
    /// (one more newline), appends its kube-proxy configuration to `/run/kubeadm/kubeadm.yaml` and adds
    /// `--ignore-preflight-errors=all` to `kubeadm init|join`.
    #[serde(default)]
    pub expect_v3: BTreeMap<String, Expect>,
    /// How many ops of each host come before provisioning (facts, bootstrap, binary and container-manager
    /// steps): the capkk-v3 method replays these and provisions through CAPKK's own cloud-init path.
    #[serde(default)]
    pub pre_ops: usize,
    /// Paths removed on every host before each run.
    pub reset_paths: Vec<String>,
    /// Digest per host of what capkk-rs sent in the recording pass (every capkk-rs run must match it).
    pub ours_digests: BTreeMap<String, String>,
}

impl Workload {
    /// Number of ops on the first host (all hosts have the same count).
    pub fn steps(&self) -> usize {
        self.ops.values().next().map_or(0, Vec::len)
    }

    /// Fill `expect.files` from the final state of every `Put` (last write wins) and add the reset paths; the
    /// capkk-v3 checks get the `Put`s of the ops it replays (the first [`Workload::pre_ops`]).
    pub fn derive_file_checks(&mut self) {
        for (host, ops) in &self.ops {
            for (i, op) in ops.iter().enumerate() {
                if i >= self.pre_ops {
                    break;
                }
                if let Op::Put {
                    path,
                    content,
                    mode,
                    owner,
                } = op
                {
                    self.expect_v3.entry(host.clone()).or_default().files.insert(
                        path.clone(),
                        (
                            hex::encode(Sha256::digest(content)),
                            format!("{:o}", mode & 0o7777),
                            owner.clone().unwrap_or_else(|| "root:root".into()),
                        ),
                    );
                }
            }
            let e = self.expect.entry(host.clone()).or_default();
            for op in ops {
                if let Op::Put {
                    path,
                    content,
                    mode,
                    owner,
                } = op
                {
                    e.files.insert(
                        path.clone(),
                        (
                            hex::encode(Sha256::digest(content)),
                            format!("{:o}", mode & 0o7777),
                            owner.clone().unwrap_or_else(|| "root:root".into()),
                        ),
                    );
                    if !self.reset_paths.contains(path) {
                        self.reset_paths.push(path.clone());
                    }
                }
            }
        }
    }
}

mod b64 {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(serde::de::Error::custom)
    }
}

mod b64opt {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_some(&base64::engine::general_purpose::STANDARD.encode(v)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        s.map(|s| {
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(serde::de::Error::custom)
        })
        .transpose()
    }
}

/// Wraps an executor and records every call as an [`Op`] (then forwards it).
pub struct RecordingExecutor {
    inner: Arc<dyn Executor>,
    ops: Mutex<Vec<Op>>,
    times: Mutex<Vec<f64>>,
}

impl RecordingExecutor {
    /// Record the calls made through `inner`.
    pub fn new(inner: Arc<dyn Executor>) -> Self {
        Self {
            inner,
            ops: Mutex::new(Vec::new()),
            times: Mutex::new(Vec::new()),
        }
    }

    /// How many ops were recorded so far.
    pub fn len(&self) -> usize {
        self.ops.lock().map_or(0, |o| o.len())
    }

    /// The ops recorded so far.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().map(|o| o.clone()).unwrap_or_default()
    }

    /// Wall seconds of each recorded call, in order.
    pub fn times(&self) -> Vec<f64> {
        self.times.lock().map(|t| t.clone()).unwrap_or_default()
    }

    fn timed(&self, start: std::time::Instant) {
        if let Ok(mut t) = self.times.lock() {
            t.push(start.elapsed().as_secs_f64());
        }
    }

    fn push(&self, op: Op) {
        if let Ok(mut o) = self.ops.lock() {
            o.push(op);
        }
    }
}

#[async_trait]
impl Executor for RecordingExecutor {
    async fn exec(&self, req: ExecRequest) -> Result<ExecOutput, ExecError> {
        self.push(Op::Exec {
            command: req.command.clone(),
            stdin: req.stdin.clone(),
        });
        let start = std::time::Instant::now();
        let r = self.inner.exec(req).await;
        self.timed(start);
        r
    }

    async fn put(&self, req: PutRequest) -> Result<u64, ExecError> {
        // Files (artifacts from the cache) are recorded by path: reading them here would charge capkk-rs for
        // the bench's bookkeeping.
        self.push(match &req.source {
            FileSource::Bytes(b) => Op::Put {
                path: req.path.clone(),
                content: b.clone(),
                mode: req.mode,
                owner: req.owner.clone(),
            },
            FileSource::Path(p) => Op::PutFile {
                path: req.path.clone(),
                source: p.clone(),
                mode: req.mode,
                owner: req.owner.clone(),
            },
        });
        let start = std::time::Instant::now();
        let r = self.inner.put(req).await;
        self.timed(start);
        r
    }

    async fn get(&self, path: &str, limit: usize, privileged: bool) -> Result<Vec<u8>, ExecError> {
        self.push(Op::Exec {
            command: format!("cat -- {}", quote(path)),
            stdin: None,
        });
        let start = std::time::Instant::now();
        let r = self.inner.get(path, limit, privileged).await;
        self.timed(start);
        r
    }

    fn target(&self) -> String {
        self.inner.target()
    }
}

/// Decode a cloud-config `write_files` entry's content.
fn decode_content(content: &str, encoding: Option<&str>, field: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let b64 = |s: &str| {
        let clean: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        base64::engine::general_purpose::STANDARD
            .decode(clean)
            .map_err(|e| anyhow::anyhow!("{field}: invalid base64: {e}"))
    };
    let gunzip = |b: Vec<u8>| -> anyhow::Result<Vec<u8>> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(b.as_slice())
            .read_to_end(&mut out)
            .map_err(|e| anyhow::anyhow!("{field}: invalid gzip: {e}"))?;
        Ok(out)
    };
    match encoding.unwrap_or("text/plain") {
        "text/plain" => Ok(content.as_bytes().to_vec()),
        "b64" | "base64" => b64(content),
        "gz" | "gzip" => gunzip(content.as_bytes().to_vec()),
        "gz+b64" | "gzip+base64" | "gz+base64" | "gzip+b64" => gunzip(b64(content)?),
        other => anyhow::bail!("{field}: unsupported encoding {other:?}"),
    }
}

/// Expected content of the sentinel CABPK's kubeadm command writes.
pub const SENTINEL: &str = "/run/cluster-api/bootstrap-success.complete";

/// The CABPK parts of the bench fixture, read independently of capkk-cloudinit (used for the host checks).
#[derive(Clone, Debug)]
pub struct FixtureFile {
    /// Destination path.
    pub path: String,
    /// Decoded content with `{{ ds.meta_data.local_hostname }}` rendered to `hostname`.
    pub content: Vec<u8>,
    /// Octal permissions.
    pub mode: u32,
    /// Owner.
    pub owner: String,
}

/// `write_files` and `runcmd` of a cloud-config, rendered for `hostname`.
pub fn read_fixture(text: &str, hostname: &str) -> anyhow::Result<(Vec<FixtureFile>, Vec<String>)> {
    let body: String = text
        .lines()
        .filter(|l| !l.starts_with("## template:"))
        .collect::<Vec<_>>()
        .join("\n");
    let doc: serde_json::Value =
        serde_saphyr::from_str(&body).map_err(|e| anyhow::anyhow!("fixture is not YAML: {e}"))?;
    let render = |s: &str| s.replace("{{ ds.meta_data.local_hostname }}", hostname);
    let mut files = Vec::new();
    for (i, f) in doc["write_files"].as_array().into_iter().flatten().enumerate() {
        let field = format!("write_files[{i}]");
        let path = f["path"]
            .as_str()
            .ok_or_else(|| anyhow::anyhow!("{field}.path missing"))?
            .to_owned();
        let raw = f["content"].as_str().unwrap_or_default();
        let content = decode_content(raw, f["encoding"].as_str(), &field)?;
        let content = match String::from_utf8(content) {
            Ok(s) => render(&s).into_bytes(),
            Err(e) => e.into_bytes(),
        };
        let mode = match f["permissions"].as_str() {
            Some(p) => u32::from_str_radix(p.trim_start_matches("0o"), 8)
                .map_err(|_| anyhow::anyhow!("{field}.permissions {p:?} is not octal"))?,
            None => 0o644,
        };
        let owner = f["owner"].as_str().unwrap_or("root:root").to_owned();
        files.push(FixtureFile {
            path,
            content,
            mode,
            owner,
        });
    }
    let mut cmds = Vec::new();
    for (i, c) in doc["runcmd"].as_array().into_iter().flatten().enumerate() {
        match c {
            serde_json::Value::String(s) => cmds.push(render(s)),
            serde_json::Value::Array(a) => {
                let words: Option<Vec<&str>> = a.iter().map(|w| w.as_str()).collect();
                let words = words.ok_or_else(|| anyhow::anyhow!("runcmd[{i}] has a non-string word"))?;
                cmds.push(capkk_executor::quote_all(words));
            }
            _ => anyhow::bail!("runcmd[{i}] must be a string or a list of strings"),
        }
    }
    Ok((files, cmds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_round_trip_through_json_and_digest_changes_with_content() {
        let ops = vec![
            Op::Exec {
                command: "echo hi".into(),
                stdin: Some(b"in".to_vec()),
            },
            Op::Put {
                path: "/etc/x".into(),
                content: b"data".to_vec(),
                mode: 0o640,
                owner: Some("root:root".into()),
            },
        ];
        let json = serde_json::to_string(&ops).unwrap();
        let back: Vec<Op> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, ops);
        let mut changed = ops.clone();
        if let Op::Put { content, .. } = &mut changed[1] {
            content.push(b'!');
        }
        assert_ne!(digest(&ops), digest(&changed));
        assert_eq!(digest(&ops), digest(&back));
    }

    #[test]
    fn a_cached_file_upload_is_digested_by_its_content_name_not_its_cache_directory() {
        let put = |dir: &str, name: &str| Op::PutFile {
            path: "/var/lib/capkk/staging/ab".into(),
            source: PathBuf::from(format!("{dir}/sha256/{name}")),
            mode: 0o600,
            owner: None,
        };
        assert_eq!(digest(&[put("/run-1", "ab")]), digest(&[put("/run-2", "ab")]));
        assert_ne!(digest(&[put("/run-1", "ab")]), digest(&[put("/run-1", "cd")]));
        let json = serde_json::to_string(&put("/x", "ab")).unwrap();
        assert!(json.contains("\"kind\":\"putfile\""), "{json}");
    }

    #[test]
    fn upload_script_writes_mode_owner_and_content_from_stdin() {
        let dir = tempdir();
        let path = format!("{dir}/sub dir/it's.conf");
        let script = upload_script(&path, 0o640, None);
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write as _;
        child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "6");
        assert_eq!(std::fs::read(&path).unwrap(), b"hello\n");
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777,
            0o640
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempdir() -> String {
        let d = std::env::temp_dir().join(format!("capkk-bench-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d.display().to_string()
    }

    #[test]
    fn fixture_is_read_and_rendered() {
        let text = include_str!("../fixtures/cabpk-controlplane-init.yaml");
        let (files, cmds) = read_fixture(text, "bench-7").unwrap();
        assert!(files.iter().any(|f| f.path == "/run/kubeadm/kubeadm.yaml"
            && String::from_utf8_lossy(&f.content).contains("name: 'bench-7'")));
        assert!(
            files
                .iter()
                .any(|f| f.path == "/etc/kubernetes/pki/ca.key" && f.mode == 0o600)
        );
        assert!(
            cmds.iter()
                .any(|c| c.contains("kubeadm init") && c.contains(SENTINEL))
        );
    }

    #[test]
    fn bad_fixture_names_the_field() {
        let err = read_fixture("write_files:\n- content: x\n", "h").unwrap_err();
        assert!(err.to_string().contains("write_files[0].path"), "{err}");
        let err = read_fixture("write_files:\n- path: /x\n  permissions: 'rw'\n", "h").unwrap_err();
        assert!(err.to_string().contains("write_files[0].permissions"), "{err}");
        let err = read_fixture(
            "write_files:\n- path: /x\n  encoding: b64\n  content: '!!'\n",
            "h",
        )
        .unwrap_err();
        assert!(err.to_string().contains("write_files[0]"), "{err}");
    }
}
