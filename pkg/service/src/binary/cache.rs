//! Controller-side content-addressed artifact cache.
//!
//! Files live at `<root>/sha256/<hex>` and enter the cache only after their SHA-256 was verified, so a cached
//! path is always trustworthy. A per-digest async lock makes concurrent hosts that need the same artifact
//! share one download. Downloads stream to `<root>/tmp/` while hashing and are renamed into place.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tracing::{debug, instrument};

use crate::{Error, Result};

/// Largest checksum file accepted.
const CHECKSUM_FILE_LIMIT: usize = 1024 * 1024;

/// The cache. Cheap to share behind an `Arc`; one per controller process.
pub struct ArtifactCache {
    root: PathBuf,
    client: reqwest::Client,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    downloads: AtomicU64,
    bytes_downloaded: AtomicU64,
}

impl std::fmt::Debug for ArtifactCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactCache")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

fn local_io(path: &Path, source: std::io::Error) -> Error {
    Error::LocalIo {
        path: path.display().to_string(),
        source,
    }
}

impl ArtifactCache {
    /// A cache rooted at `root` (created if missing).
    pub fn new(root: impl Into<PathBuf>) -> Result<Self> {
        let root = root.into();
        for d in [root.join("sha256"), root.join("tmp")] {
            std::fs::create_dir_all(&d).map_err(|e| local_io(&d, e))?;
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .read_timeout(Duration::from_secs(120))
            .user_agent(concat!("capkk-rs/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Download {
                url: String::new(),
                message: format!("building the HTTP client: {e}"),
            })?;
        Ok(Self {
            root,
            client,
            locks: Mutex::new(HashMap::new()),
            downloads: AtomicU64::new(0),
            bytes_downloaded: AtomicU64::new(0),
        })
    }

    /// The cache root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the file with digest `sha256` lives (whether or not it is cached yet).
    pub fn path_for(&self, sha256: &str) -> PathBuf {
        self.root.join("sha256").join(sha256.to_ascii_lowercase())
    }

    /// Number of completed artifact downloads since creation.
    pub fn downloads(&self) -> u64 {
        self.downloads.load(Ordering::Relaxed)
    }

    /// Bytes downloaded for artifacts since creation.
    pub fn bytes_downloaded(&self) -> u64 {
        self.bytes_downloaded.load(Ordering::Relaxed)
    }

    fn lock_for(&self, sha256: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(sha256.to_owned()).or_default().clone()
    }

    /// The cached file for `sha256`, downloading it from `url` first when missing. A download whose digest
    /// differs is discarded and reported as [`Error::ChecksumMismatch`] for `artifact`.
    #[instrument(skip(self), fields(%url))]
    pub async fn fetch(&self, url: &str, sha256: &str, artifact: &str) -> Result<PathBuf> {
        let sha256 = sha256.to_ascii_lowercase();
        let dest = self.path_for(&sha256);
        if dest.is_file() {
            return Ok(dest);
        }
        let lock = self.lock_for(&sha256);
        let _guard = lock.lock().await;
        if dest.is_file() {
            return Ok(dest);
        }
        let tmp = self
            .root
            .join("tmp")
            .join(format!("{sha256}.{}.{}", std::process::id(), rand_suffix()));
        let result = self.download_to(url, &tmp).await;
        let (actual, size) = match result {
            Ok(v) => v,
            Err(e) => {
                let _ = tokio::fs::remove_file(&tmp).await;
                return Err(e);
            }
        };
        if actual != sha256 {
            let _ = tokio::fs::remove_file(&tmp).await;
            return Err(Error::ChecksumMismatch {
                artifact: format!("{artifact} from {url}"),
                expected: sha256,
                actual,
            });
        }
        tokio::fs::rename(&tmp, &dest)
            .await
            .map_err(|e| local_io(&dest, e))?;
        self.downloads.fetch_add(1, Ordering::Relaxed);
        self.bytes_downloaded.fetch_add(size, Ordering::Relaxed);
        debug!(size, "cached");
        Ok(dest)
    }

    async fn download_to(&self, url: &str, tmp: &Path) -> Result<(String, u64)> {
        let dl = |message: String| Error::Download {
            url: url.to_owned(),
            message,
        };
        let mut resp = self
            .client
            .get(url)
            .timeout(Duration::from_secs(30 * 60))
            .send()
            .await
            .map_err(|e| dl(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(dl(format!("HTTP {}", resp.status())));
        }
        let mut file = tokio::fs::File::create(tmp).await.map_err(|e| local_io(tmp, e))?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        while let Some(chunk) = resp.chunk().await.map_err(|e| dl(e.to_string()))? {
            hasher.update(&chunk);
            size += chunk.len() as u64;
            file.write_all(&chunk).await.map_err(|e| local_io(tmp, e))?;
        }
        file.flush().await.map_err(|e| local_io(tmp, e))?;
        file.sync_all().await.map_err(|e| local_io(tmp, e))?;
        Ok((hex::encode(hasher.finalize()), size))
    }

    /// Fetch a small text file (a checksum file), at most 1 MiB.
    pub async fn fetch_text(&self, url: &str) -> Result<String> {
        let dl = |message: String| Error::Download {
            url: url.to_owned(),
            message,
        };
        let resp = self
            .client
            .get(url)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .map_err(|e| dl(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(dl(format!("HTTP {}", resp.status())));
        }
        let body = resp.bytes().await.map_err(|e| dl(e.to_string()))?;
        if body.len() > CHECKSUM_FILE_LIMIT {
            return Err(dl(format!(
                "checksum file larger than {CHECKSUM_FILE_LIMIT} bytes"
            )));
        }
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    h.finish()
}
