//! Writes the CRDs to `config/crd/bases` (or the directory given as the first argument).

use std::{fs, path::PathBuf, process::ExitCode};

fn main() -> ExitCode {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| "config/crd/bases".into());
    if let Err(e) = fs::create_dir_all(&dir) {
        eprintln!("crdgen: cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    for crd in capkk_api::crds() {
        let path = dir.join(capkk_api::crd_file_name(&crd));
        let yaml = match capkk_api::crd_yaml(&crd) {
            Ok(y) => y,
            Err(e) => {
                eprintln!("crdgen: rendering {}: {e}", crd.spec.names.kind);
                return ExitCode::FAILURE;
            }
        };
        if let Err(e) = fs::write(&path, format!("---\n{yaml}")) {
            eprintln!("crdgen: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}
