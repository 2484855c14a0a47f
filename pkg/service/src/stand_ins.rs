//! Host scripts run for real under `sh` in unit tests, with stand-ins for the host's tools (`systemctl`,
//! `haproxy`, ...) first on `PATH`: what a rendered script decides (which service it restarts, what it leaves
//! alone) is then shown by what it ran, without a host.

use std::{
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

/// A directory of stand-in tools and the file their calls are logged to.
pub(crate) struct StandIns {
    bin: PathBuf,
    log: PathBuf,
}

impl StandIns {
    /// Stand-ins under `dir` (`dir/bin`, calls in `dir/calls`, emptied).
    pub(crate) fn new(dir: &Path) -> Self {
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let log = dir.join("calls");
        let _ = std::fs::remove_file(&log);
        Self { bin, log }
    }

    /// The file every stand-in appends its calls to.
    pub(crate) fn log(&self) -> &Path {
        &self.log
    }

    /// Adds stand-in `name` running `body` (a `sh` script body; `exit 0` is appended).
    pub(crate) fn tool(&self, name: &str, body: &str) -> &Self {
        let p = self.bin.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}exit 0\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        self
    }

    /// Runs `script` under `sh` with the stand-ins first on `PATH`; returns (success, standard output, the
    /// logged calls).
    pub(crate) fn run(&self, script: &str) -> (bool, String, Vec<String>) {
        let out = Command::new("sh")
            .arg("-c")
            .arg(script)
            .env("PATH", format!("{}:/usr/bin:/bin", self.bin.display()))
            .output()
            .unwrap();
        let calls = std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            calls,
        )
    }
}
