//! The fake tools of `test/assets` on a sandbox host: package managers (`fake-pm`), kernel tools
//! (`fake-kernel`) and the like, installed into the host's `/usr/local/sbin` so that host work run in tests
//! never changes the machine's kernel state or reaches a package mirror.

use std::path::{Path, PathBuf};

use base64::Engine as _;

use crate::{Host, Result, SandboxError};

/// The fake package managers and kernel tools every host-work test installs.
pub const FAKES: &[&str] = &["fake-pm", "fake-kernel"];

/// `test/assets` of this checkout.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets")
}

/// Copy the files of `test/assets/<dir>` for each of `dirs` into the host's `/usr/local/sbin` (mode 0755).
/// The host's `/sys` is the machine's sysfs: the host gets its own (tmpfs) `/sys/module`, so the fake
/// `modprobe` marks modules as loaded there without touching the machine's kernel.
pub fn install(host: &Host<'_>, dirs: &[&str]) -> Result<()> {
    let mut script = String::from(
        "mkdir -p /usr/local/sbin\nmountpoint -q /sys/module || mount -t tmpfs capkk-fake-sysmodule /sys/module\n",
    );
    for d in dirs {
        let d = dir().join(d);
        let read_err = |source| SandboxError::WriteFile {
            path: d.display().to_string(),
            source,
        };
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&d)
            .map_err(read_err)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for path in entries {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_owned();
            let data = std::fs::read(&path).map_err(|source| SandboxError::WriteFile {
                path: path.display().to_string(),
                source,
            })?;
            let b64 = base64::engine::general_purpose::STANDARD.encode(data);
            script.push_str(&format!(
                "printf '%s' '{b64}' | base64 -d > /usr/local/sbin/{name}; chmod 755 /usr/local/sbin/{name}\n"
            ));
        }
    }
    host.sh_inside(&script)?;
    Ok(())
}
