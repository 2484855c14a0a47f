//! Private keys read from the controller's file system.
//!
//! [`read_key_file`] reads a regular file of at most `max` bytes off the async runtime's worker threads
//! (tokio's blocking pool): what the pool uses for [`crate::Auth::key_file`]. A path that comes from a
//! namespace-scoped object (`privateKeyPath`) must not read any file the manager can: [`read_confined`] also
//! requires it to resolve (symlinks included) to a file under the operator's key directory, and refuses
//! everything when there is none.

use std::path::{Path, PathBuf};

use secrecy::SecretSlice;

/// Largest key file read (an RSA-16384 key in PEM is about 13 KiB).
pub const MAX_KEY_BYTES: u64 = 64 * 1024;

/// Read the key at `path` when it is a regular file inside `dir` (after resolving symlinks), at most
/// `max` bytes; `dir == None` refuses. The error says why without any file content.
pub async fn read_confined(dir: Option<&Path>, path: &Path, max: u64) -> Result<SecretSlice<u8>, String> {
    let Some(dir) = dir else {
        return Err(format!(
            "privateKeyPath {} is not allowed: the manager runs without --private-key-dir (use a Secret)",
            path.display()
        ));
    };
    let (dir, path) = (dir.to_path_buf(), path.to_path_buf());
    tokio::task::spawn_blocking(move || {
        let real = confine(&dir, &path)?;
        read_blocking(&real, &path, max)
    })
    .await
    .map_err(|e| format!("reading the key file failed: {e}"))?
}

/// Read the key file at `path` (a regular file of at most `max` bytes).
pub async fn read_key_file(path: &Path, max: u64) -> Result<SecretSlice<u8>, String> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || read_blocking(&path, &path, max))
        .await
        .map_err(|e| format!("reading the key file failed: {e}"))?
}

fn confine(dir: &Path, path: &Path) -> Result<PathBuf, String> {
    let outside = || {
        format!(
            "privateKeyPath {} is not a file under the key directory {}",
            path.display(),
            dir.display()
        )
    };
    let dir = dir
        .canonicalize()
        .map_err(|e| format!("key directory {}: {e}", dir.display()))?;
    let joined: PathBuf = if path.is_absolute() {
        path.to_path_buf()
    } else {
        dir.join(path)
    };
    let real = joined.canonicalize().map_err(|_| outside())?;
    if !real.starts_with(&dir) || real == dir {
        return Err(outside());
    }
    Ok(real)
}

fn read_blocking(real: &Path, shown: &Path, max: u64) -> Result<SecretSlice<u8>, String> {
    use std::io::Read as _;
    let shown = shown.display();
    let file = std::fs::File::open(real).map_err(|e| format!("key file {shown}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("key file {shown}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("key file {shown} is not a regular file"));
    }
    if meta.len() > max {
        return Err(format!("key file {shown} is larger than {max} bytes"));
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    file.take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("key file {shown}: {e}"))?;
    if buf.len() as u64 > max {
        return Err(format!("key file {shown} is larger than {max} bytes"));
    }
    Ok(SecretSlice::from(buf))
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    #[tokio::test]
    async fn private_key_path_outside_the_key_dir_a_device_or_a_huge_file_is_refused() {
        let root = std::env::temp_dir().join(format!("capkk-keydir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let keys = root.join("keys");
        std::fs::create_dir_all(&keys).unwrap();
        std::fs::write(keys.join("id"), "KEY").unwrap();
        std::fs::write(root.join("secret"), "SECRET").unwrap();
        std::fs::write(keys.join("big"), vec![b'A'; 70 * 1024]).unwrap();
        std::os::unix::fs::symlink(root.join("secret"), keys.join("link")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", keys.join("zero")).unwrap();
        let read = |dir: Option<PathBuf>, p: PathBuf| async move {
            read_confined(dir.as_deref(), &p, MAX_KEY_BYTES).await
        };
        let ok = read(Some(keys.clone()), keys.join("id")).await.unwrap();
        assert_eq!(ok.expose_secret(), b"KEY");
        assert_eq!(
            read(Some(keys.clone()), "id".into())
                .await
                .unwrap()
                .expose_secret(),
            b"KEY"
        );
        let off = read(None, keys.join("id")).await.unwrap_err();
        assert!(off.contains("--private-key-dir"), "{off}");
        // Unconfined (an operator's own key file): still a regular file of bounded size.
        assert!(
            read_key_file(Path::new("/dev/zero"), MAX_KEY_BYTES)
                .await
                .unwrap_err()
                .contains("not a regular file")
        );
        assert!(
            read_key_file(&keys.join("big"), MAX_KEY_BYTES)
                .await
                .unwrap_err()
                .contains("larger than")
        );
        for (p, why) in [
            (root.join("secret"), "not a file under"),
            (keys.join("../secret"), "not a file under"),
            (keys.join("link"), "not a file under"),
            ("/dev/zero".into(), "not a file under"),
            (
                "/var/run/secrets/kubernetes.io/serviceaccount/token".into(),
                "not a file under",
            ),
            (keys.join("zero"), "not a file under"),
            (keys.join("big"), "larger than"),
            (keys.clone(), "not a file under"),
        ] {
            let e = read(Some(keys.clone()), p.clone()).await.unwrap_err();
            assert!(e.contains(why), "{}: {e}", p.display());
            assert!(!e.contains("SECRET"));
        }
        std::fs::remove_dir_all(&root).unwrap();
    }
}
