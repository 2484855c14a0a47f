//! Controller-side content-addressed artifact cache.
//!
//! Files live at `<root>/sha256/<hex>` and enter the cache only after their SHA-256 was verified, so a cached
//! path is always trustworthy. A per-digest async lock makes concurrent hosts that need the same artifact
//! share one download. Downloads stream to `<root>/tmp/` while hashing and are renamed into place.
//!
//! The cache can only address files under its root: every digest it is given must be exactly 64 hex digits
//! ([`check_sha256`]) before it becomes part of a path, whatever the caller validated before. Downloads are
//! capped while they stream ([`ArtifactCache::max_artifact_bytes`], checksum files at 1 MiB), so one object
//! naming a huge or endless URL cannot fill the controller's memory or disk. The whole cache is bounded too
//! ([`ArtifactCache::max_cache_bytes`]): a download that would pass the bound first evicts the artifacts used
//! least recently (a hit refreshes a file's modification time), never one used in the last
//! [`IN_USE_GRACE`] (a host may still be uploading it), and fails when that does not make room. So tenants
//! naming many large artifacts cannot fill the cache volume (an `emptyDir` over its `sizeLimit` gets the
//! manager's Pod evicted).
//!
//! Every download is checked against the [`DownloadPolicy`] first and connects only to the addresses that
//! check passed (see [`super::policy`]); a redirect is followed only to the same host, so it is pinned the
//! same way. Proxies from the environment are not used: through a proxy the address checked would not be
//! the address reached.

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

use super::policy::{DownloadPolicy, PinError, Pinned};
use crate::{Error, Result};

/// Largest checksum file accepted.
const CHECKSUM_FILE_LIMIT: usize = 1024 * 1024;
/// Default largest artifact accepted (an ISO of OS packages is the largest kind).
pub const DEFAULT_MAX_ARTIFACT_BYTES: u64 = 4 << 30;
/// Default bound on the whole cache, downloads in progress included: below the 4 GiB `sizeLimit` of the
/// manager's cache volume (config/manager), whose excess would get the Pod evicted.
pub const DEFAULT_MAX_CACHE_BYTES: u64 = 3584 << 20;
/// An artifact fetched this recently is not evicted: a host may still be uploading it.
pub const IN_USE_GRACE: Duration = Duration::from_secs(10 * 60);

/// `sha256` lower-cased when it is exactly 64 hex digits, else [`Error::InvalidInput`]: a digest names a file
/// in the cache and on the host, so anything else (a path, `..`, an empty string) is refused.
pub fn check_sha256(field: &str, sha256: &str) -> Result<String> {
    if sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(sha256.to_ascii_lowercase())
    } else {
        Err(Error::InvalidInput {
            field: field.to_owned(),
            message: format!(
                "a SHA-256 must be exactly 64 hex digits, got {} characters",
                sha256.chars().count()
            ),
        })
    }
}

/// `url` without its userinfo (`https://user:pass@host/x` → `https://host/x`): URLs appear in errors,
/// conditions and spans.
pub fn strip_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// What the cache counts against its bound.
#[derive(Debug, Default)]
struct Usage {
    /// Bytes of the files under `sha256/`, as last counted (another process sharing the directory may have
    /// added or evicted some since: recounted whenever the bound is reached).
    stored: u64,
    /// Bytes reserved by this process's downloads in progress.
    in_flight: u64,
}

/// The bytes a download reserved and its partial file under `tmp/`. Dropping it (a failed download, or the
/// `fetch` future dropped at a deadline) gives the bytes back and removes the file, so a cancelled download
/// cannot leave the cache counting bytes nobody holds; [`Reservation::stored`] hands them to the stored file.
struct Reservation<'a> {
    cache: &'a ArtifactCache,
    tmp: PathBuf,
    bytes: u64,
}

impl Reservation<'_> {
    /// Counts `n` more bytes of this download against the cache's bound.
    fn grow(&mut self, n: u64) -> std::result::Result<(), String> {
        self.cache.reserve(n)?;
        self.bytes += n;
        Ok(())
    }

    /// The download was renamed into `sha256/`: its bytes now belong to the stored file.
    fn stored(mut self) {
        let mut used = self.cache.usage();
        used.in_flight = used.in_flight.saturating_sub(self.bytes);
        used.stored += self.bytes;
        self.bytes = 0;
        self.tmp = PathBuf::new();
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = std::fs::remove_file(&self.tmp);
        }
        let mut used = self.cache.usage();
        used.in_flight = used.in_flight.saturating_sub(self.bytes);
    }
}

/// The cache. Cheap to share behind an `Arc`; one per controller process.
pub struct ArtifactCache {
    root: PathBuf,
    policy: Mutex<Arc<DownloadPolicy>>,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    max_artifact_bytes: AtomicU64,
    max_cache_bytes: AtomicU64,
    /// Bytes counted against [`ArtifactCache::max_cache_bytes`].
    used: Mutex<Usage>,
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

/// Follow a redirect only to the host of the URL the operator or tenant named (at most 10): a mirror may
/// move a path, but a redirect must not turn the manager into a client of another host.
fn same_host_redirects(attempt: reqwest::redirect::Attempt<'_>) -> reqwest::redirect::Action {
    let first = attempt
        .previous()
        .first()
        .and_then(|u| u.host_str())
        .map(str::to_owned);
    if attempt.previous().len() > 10 {
        attempt.error("more than 10 redirects")
    } else if attempt.url().host_str().map(str::to_owned) != first {
        attempt.error("a redirect to another host is not followed")
    } else {
        attempt.follow()
    }
}

/// The resolver of a download's client: names are resolved (and checked) before the client exists and
/// given to it as overrides, so any other name reaching the resolver is one nobody checked.
struct Unchecked;

impl reqwest::dns::Resolve for Unchecked {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = name.as_str().to_owned();
        Box::pin(
            async move { Err(format!("{name} was not checked by the download policy; not resolved").into()) },
        )
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
        // Partial downloads left by an earlier process are garbage. Only stale ones are removed: another
        // process may share the directory (two managers of a test, a standby replica) and still be writing its
        // own, which stay fresh while they stream.
        let now = std::time::SystemTime::now();
        for f in cached_files(&root.join("tmp")) {
            if now.duration_since(f.modified).is_ok_and(|age| age > IN_USE_GRACE) {
                let _ = std::fs::remove_file(&f.path);
            }
        }
        let stored = stored_bytes(&root);
        Ok(Self {
            root,
            policy: Mutex::new(Arc::default()),
            locks: Mutex::new(HashMap::new()),
            max_artifact_bytes: AtomicU64::new(DEFAULT_MAX_ARTIFACT_BYTES),
            max_cache_bytes: AtomicU64::new(DEFAULT_MAX_CACHE_BYTES),
            used: Mutex::new(Usage { stored, in_flight: 0 }),
            downloads: AtomicU64::new(0),
            bytes_downloaded: AtomicU64::new(0),
        })
    }

    /// The cache root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the file with digest `sha256` lives (whether or not it is cached yet); an error unless `sha256`
    /// is 64 hex digits, so the result is always a file directly under `<root>/sha256/`.
    pub fn path_for(&self, sha256: &str) -> Result<PathBuf> {
        Ok(self.root.join("sha256").join(check_sha256("sha256", sha256)?))
    }

    /// The largest artifact a download may bring (default [`DEFAULT_MAX_ARTIFACT_BYTES`]).
    pub fn max_artifact_bytes(&self) -> u64 {
        self.max_artifact_bytes.load(Ordering::Relaxed)
    }

    /// Change the largest artifact a download may bring (the controller's `--max-artifact-bytes`).
    pub fn set_max_artifact_bytes(&self, limit: u64) {
        self.max_artifact_bytes.store(limit.max(1), Ordering::Relaxed);
    }

    /// Where downloads may connect (default: [`DownloadPolicy::default`], which refuses loopback).
    pub fn download_policy(&self) -> Arc<DownloadPolicy> {
        self.policy.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Change where downloads may connect (the controller's `--download-*` flags).
    pub fn set_download_policy(&self, policy: DownloadPolicy) {
        *self.policy.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
    }

    /// A client for one download from `url`, which `field` named: the URL's host is resolved and checked
    /// here, and the client connects only to the addresses that passed.
    async fn client_for(&self, url: &str, field: &str) -> Result<reqwest::Client> {
        let shown = || strip_userinfo(url);
        let Pinned { name, addrs } = self.download_policy().pin(url).await.map_err(|e| match e {
            PinError::NotHttp(why) => Error::InvalidInput {
                field: field.to_owned(),
                message: format!("{} is not an http(s) URL: {why}", shown()),
            },
            PinError::Refused(reason) => Error::DownloadRefused {
                field: field.to_owned(),
                url: shown(),
                reason,
            },
            PinError::Unresolved(message) => Error::Download {
                url: shown(),
                message,
            },
        })?;
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .read_timeout(Duration::from_secs(120))
            .user_agent(concat!("capkk-rs/", env!("CARGO_PKG_VERSION")))
            .redirect(reqwest::redirect::Policy::custom(same_host_redirects))
            .no_proxy()
            .dns_resolver(Arc::new(Unchecked));
        if let Some(name) = name {
            builder = builder.resolve_to_addrs(&name, &addrs);
        }
        builder.build().map_err(|e| Error::Download {
            url: shown(),
            message: format!("building the HTTP client: {e}"),
        })
    }

    /// Number of completed artifact downloads since creation.
    pub fn downloads(&self) -> u64 {
        self.downloads.load(Ordering::Relaxed)
    }

    /// Bytes downloaded for artifacts since creation.
    pub fn bytes_downloaded(&self) -> u64 {
        self.bytes_downloaded.load(Ordering::Relaxed)
    }

    /// The bound on the whole cache (default [`DEFAULT_MAX_CACHE_BYTES`]).
    pub fn max_cache_bytes(&self) -> u64 {
        self.max_cache_bytes.load(Ordering::Relaxed)
    }

    /// Change the bound on the whole cache (the controller's `--max-cache-bytes`).
    pub fn set_max_cache_bytes(&self, limit: u64) {
        self.max_cache_bytes.store(limit.max(1), Ordering::Relaxed);
    }

    /// Bytes the cache holds now, downloads in progress included.
    pub fn used_bytes(&self) -> u64 {
        let used = self.usage();
        used.stored + used.in_flight
    }

    fn usage(&self) -> std::sync::MutexGuard<'_, Usage> {
        self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts `n` more bytes of a download in progress against the cache's bound, evicting the least recently
    /// used artifacts not in use when they would not fit; the error says why there is no room.
    fn reserve(&self, n: u64) -> std::result::Result<(), String> {
        let max = self.max_cache_bytes();
        let mut usage = self.usage();
        if usage.stored + usage.in_flight + n > max {
            // Another process sharing the directory may have stored or evicted files since this one counted:
            // decide on what is there now.
            usage.stored = stored_bytes(&self.root);
            let in_flight = usage.in_flight;
            let used = &mut usage.stored;
            let mut files = cached_files(&self.root.join("sha256"));
            files.sort_by_key(|f| f.modified);
            let now = std::time::SystemTime::now();
            for f in files {
                if *used + in_flight + n <= max {
                    break;
                }
                let recent = now
                    .duration_since(f.modified)
                    .map_or(true, |age| age < IN_USE_GRACE);
                if recent {
                    continue;
                }
                if std::fs::remove_file(&f.path).is_ok() {
                    debug!(path = %f.path.display(), size = f.size, "evicted from the artifact cache");
                    *used = used.saturating_sub(f.size);
                }
            }
        }
        if usage.stored + usage.in_flight + n > max {
            return Err(format!(
                "the artifact cache is full ({max} bytes, --max-cache-bytes; the artifacts in it were used in the \
                 last {} minutes)",
                IN_USE_GRACE.as_secs() / 60
            ));
        }
        usage.in_flight += n;
        Ok(())
    }

    fn lock_for(&self, sha256: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(sha256.to_owned()).or_default().clone()
    }

    /// The cached file for `sha256`, downloading it from `url` (named by the spec field `field`) first when
    /// missing. A download whose digest differs is discarded and reported as [`Error::ChecksumMismatch`] for
    /// `artifact`; a destination the [`DownloadPolicy`] refuses is [`Error::DownloadRefused`] naming `field`.
    #[instrument(skip(self, url), fields(url = %strip_userinfo(url)))]
    pub async fn fetch(&self, url: &str, field: &str, sha256: &str, artifact: &str) -> Result<PathBuf> {
        let sha256 = check_sha256(&format!("checksum of {artifact}"), sha256)?;
        let dest = self.path_for(&sha256)?;
        if touch(&dest) {
            return Ok(dest);
        }
        let lock = self.lock_for(&sha256);
        let _guard = lock.lock().await;
        if touch(&dest) {
            return Ok(dest);
        }
        let tmp = self
            .root
            .join("tmp")
            .join(format!("{sha256}.{}.{}", std::process::id(), rand_suffix()));
        let mut reservation = Reservation {
            cache: self,
            tmp,
            bytes: 0,
        };
        let (actual, size) = self.download_to(url, field, &mut reservation).await?;
        if actual != sha256 {
            return Err(Error::ChecksumMismatch {
                artifact: format!("{artifact} from {}", strip_userinfo(url)),
                expected: sha256,
            });
        }
        tokio::fs::rename(&reservation.tmp, &dest)
            .await
            .map_err(|e| local_io(&dest, e))?;
        reservation.stored();
        self.downloads.fetch_add(1, Ordering::Relaxed);
        self.bytes_downloaded.fetch_add(size, Ordering::Relaxed);
        debug!(size, "cached");
        Ok(dest)
    }

    /// Streams `url` into the reservation's partial file, counting each chunk against the cache's bound in
    /// it (given back when the reservation is dropped).
    async fn download_to(
        &self,
        url: &str,
        field: &str,
        reservation: &mut Reservation<'_>,
    ) -> Result<(String, u64)> {
        let tmp = reservation.tmp.clone();
        let tmp = tmp.as_path();
        let dl = |message: String| Error::Download {
            url: strip_userinfo(url),
            message,
        };
        let limit = self.max_artifact_bytes();
        let mut resp = self
            .client_for(url, field)
            .await?
            .get(url)
            .timeout(Duration::from_secs(30 * 60))
            .send()
            .await
            .map_err(|e| dl(without_url(&e)))?;
        if !resp.status().is_success() {
            return Err(dl(format!("HTTP {}", resp.status())));
        }
        if resp.content_length().is_some_and(|n| n > limit) {
            return Err(dl(format!(
                "the artifact is larger than the limit of {limit} bytes (--max-artifact-bytes)"
            )));
        }
        let mut file = tokio::fs::File::create(tmp).await.map_err(|e| local_io(tmp, e))?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        while let Some(chunk) = resp.chunk().await.map_err(|e| dl(without_url(&e)))? {
            size += chunk.len() as u64;
            if size > limit {
                return Err(dl(format!(
                    "the artifact is larger than the limit of {limit} bytes (--max-artifact-bytes)"
                )));
            }
            reservation.grow(chunk.len() as u64).map_err(dl)?;
            hasher.update(&chunk);
            file.write_all(&chunk).await.map_err(|e| local_io(tmp, e))?;
        }
        file.flush().await.map_err(|e| local_io(tmp, e))?;
        file.sync_all().await.map_err(|e| local_io(tmp, e))?;
        Ok((hex::encode(hasher.finalize()), size))
    }

    /// Fetch a small text file (a checksum file) from `url`, named by the spec field `field`, at most 1 MiB,
    /// counted while it streams; checked against the [`DownloadPolicy`] like [`ArtifactCache::fetch`].
    pub async fn fetch_text(&self, url: &str, field: &str) -> Result<String> {
        let dl = |message: String| Error::Download {
            url: strip_userinfo(url),
            message,
        };
        let mut resp = self
            .client_for(url, field)
            .await?
            .get(url)
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .map_err(|e| dl(without_url(&e)))?;
        if !resp.status().is_success() {
            return Err(dl(format!("HTTP {}", resp.status())));
        }
        let too_big = || dl(format!("checksum file larger than {CHECKSUM_FILE_LIMIT} bytes"));
        if resp
            .content_length()
            .is_some_and(|n| n > CHECKSUM_FILE_LIMIT as u64)
        {
            return Err(too_big());
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| dl(without_url(&e)))? {
            if body.len() + chunk.len() > CHECKSUM_FILE_LIMIT {
                return Err(too_big());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(String::from_utf8_lossy(&body).into_owned())
    }
}

/// A reqwest error's text without the URL it carries (which may hold userinfo): the URL is reported once,
/// stripped, by the caller.
fn without_url(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    if let Some(u) = e.url() {
        text = text.replace(u.as_str(), &strip_userinfo(u.as_str()));
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A file of the cache: what eviction needs to know.
struct Cached {
    path: PathBuf,
    size: u64,
    modified: std::time::SystemTime,
}

/// The regular files directly under `dir`.
fn cached_files(dir: &Path) -> Vec<Cached> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let meta = e.metadata().ok().filter(std::fs::Metadata::is_file)?;
            Some(Cached {
                path: e.path(),
                size: meta.len(),
                modified: meta.modified().unwrap_or(std::time::UNIX_EPOCH),
            })
        })
        .collect()
}

/// Bytes of the files stored under `<root>/sha256/`.
fn stored_bytes(root: &Path) -> u64 {
    cached_files(&root.join("sha256")).iter().map(|f| f.size).sum()
}

/// Whether `path` is a cached file; if so, marks it used now (eviction takes the least recently used).
fn touch(path: &Path) -> bool {
    let Ok(file) = std::fs::File::options().append(true).open(path) else {
        return false;
    };
    let _ = file.set_modified(std::time::SystemTime::now());
    file.metadata().is_ok_and(|m| m.is_file())
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

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[tokio::test]
    async fn artifact_cache_cannot_address_a_file_outside_its_root() {
        let dir = std::env::temp_dir().join(format!("capkk-cache-root-{}", std::process::id()));
        let cache = ArtifactCache::new(dir.join("cache")).unwrap();
        std::fs::write(dir.join("outside"), "secret").unwrap();
        let outside = dir.join("outside").display().to_string();
        for sha in [
            outside.as_str(),
            "../outside",
            "/etc/passwd",
            "",
            "sha256",
            &format!("{}/..", "a".repeat(61)),
            &"g".repeat(64),
        ] {
            let err = cache
                .fetch("http://198.18.0.1:9/x", FIELD, sha, "test")
                .await
                .expect_err(&format!("{sha:?} must be refused"));
            assert!(matches!(err, Error::InvalidInput { .. }), "{sha:?}: {err}");
            assert!(cache.path_for(sha).is_err(), "{sha:?}");
        }
        let good = cache.path_for(&"A".repeat(64)).unwrap();
        assert_eq!(good, dir.join("cache/sha256").join("a".repeat(64)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Serves `body` once per connection on 127.0.0.1 (a raw HTTP/1.1 response, `Content-Length` only when
    /// `length` is set) and returns the base URL.
    async fn serve(body: Vec<u8>, length: bool) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let body = body.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf).await;
                    let head = if length {
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        )
                    } else {
                        "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n".to_owned()
                    };
                    let _ = s.write_all(head.as_bytes()).await;
                    let _ = s.write_all(&body).await;
                    let _ = s.shutdown().await;
                });
            }
        });
        format!("http://{addr}")
    }

    const FIELD: &str = "spec.component.overrides[id=kubeadm].url";

    /// A cache whose downloads may reach loopback (the test mirrors listen there), opted in the way the
    /// manager's `--download-allow-loopback` does; the default refuses loopback.
    fn loopback_cache(name: &str) -> (tempfile::TempDir, ArtifactCache) {
        let dir = tempfile::Builder::new().prefix(name).tempdir().unwrap();
        let cache = ArtifactCache::new(dir.path().join("cache")).unwrap();
        cache.set_download_policy(DownloadPolicy {
            allow_loopback: true,
            ..DownloadPolicy::default()
        });
        (dir, cache)
    }

    fn files_under(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect()
    }

    #[tokio::test]
    async fn a_checksum_mismatch_names_the_expected_checksum_but_never_the_fetched_bodys_digest() {
        let body = b"the manager's loopback answer".to_vec();
        let actual = hex::encode(Sha256::digest(&body));
        let url = serve(body, true).await;
        let (_dir, cache) = loopback_cache("capkk-cache-mismatch");
        let expected = "0".repeat(64);
        let err = cache
            .fetch(&format!("{url}/metadata"), FIELD, &expected, "kubeadm v1.32.0")
            .await
            .expect_err("a body with another digest must be refused");
        let text = err.to_string();
        assert!(matches!(err, Error::ChecksumMismatch { .. }), "{text}");
        assert!(text.contains("does not match the expected checksum"), "{text}");
        assert!(!text.contains(&actual), "the fetched body's digest leaks: {text}");
        assert!(
            !format!("{err:?}").contains(&actual),
            "the digest leaks through Debug: {err:?}"
        );
        assert!(
            files_under(&cache.root().join("sha256")).is_empty(),
            "nothing cached"
        );
    }

    #[tokio::test]
    async fn userinfo_of_a_download_url_never_reaches_the_error() {
        let (_dir, cache) = loopback_cache("capkk-cache-userinfo");
        let url = serve(b"x".to_vec(), true).await;
        let with_user = url.replace("http://", "http://mirror-user:hunter2-pass@");
        let err = cache
            .fetch(
                &format!("{with_user}/a"),
                FIELD,
                &"0".repeat(64),
                "kubelet v1.32.0",
            )
            .await
            .expect_err("mismatch");
        // And a refused connection (nothing listens on the discard port).
        let refused = cache
            .fetch(
                "http://mirror-user:hunter2-pass@127.0.0.1:9/a",
                FIELD,
                &"0".repeat(64),
                "kubelet",
            )
            .await
            .expect_err("nothing listens on port 9");
        for e in [err, refused] {
            for shown in [e.to_string(), format!("{e:?}")] {
                assert!(
                    !shown.contains("hunter2-pass") && !shown.contains("mirror-user"),
                    "userinfo leaks: {shown}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_redirect_to_another_host_is_not_followed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let body = b"served by the other host".to_vec();
        let digest = hex::encode(Sha256::digest(&body));
        // The target listens on 127.0.0.2 (another host; loopback on Linux), the redirecting mirror on
        // 127.0.0.1.
        let target = tokio::net::TcpListener::bind("127.0.0.2:0").await.unwrap();
        let target_addr = target.local_addr().unwrap();
        let hit = Arc::new(AtomicU64::new(0));
        let seen = hit.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = target.accept().await {
                seen.fetch_add(1, Ordering::Relaxed);
                let _ = s.shutdown().await;
            }
        });
        let mirror = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mirror_addr = mirror.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = mirror.accept().await {
                let mut buf = [0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let head = if req.starts_with("GET /moved ") {
                    format!(
                        "HTTP/1.1 302 Found\r\nLocation: http://{target_addr}/x\r\nContent-Length: 0\r\n\r\n"
                    )
                } else if req.starts_with("GET /same ") {
                    "HTTP/1.1 302 Found\r\nLocation: /final\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        .to_owned()
                } else {
                    "HTTP/1.1 200 OK\r\nContent-Length: 24\r\nConnection: close\r\n\r\nserved by the other host"
                        .to_owned()
                };
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.shutdown().await;
            }
        });
        let (_dir, cache) = loopback_cache("capkk-cache-redirect");
        let err = cache
            .fetch(&format!("http://{mirror_addr}/moved"), FIELD, &digest, "kubeadm")
            .await
            .expect_err("a redirect to 127.0.0.2 must not be followed");
        assert!(err.to_string().contains("another host"), "{err}");
        assert_eq!(hit.load(Ordering::Relaxed), 0, "the other host was contacted");
        // A redirect within the mirror is followed.
        cache
            .fetch(&format!("http://{mirror_addr}/same"), FIELD, &digest, "kubeadm")
            .await
            .expect("a redirect to the same host is followed");
    }

    /// A listener on `addr` answering every request with `body`, counting the connections it accepted.
    pub(crate) async fn counting_mirror(addr: &str, body: &'static [u8]) -> (SocketAddr, Arc<AtomicU64>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind((addr, 0)).await.unwrap();
        let local = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicU64::new(0));
        let seen = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                seen.fetch_add(1, Ordering::Relaxed);
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(body).await;
                let _ = s.shutdown().await;
            }
        });
        (local, hits)
    }

    fn default_cache(name: &str) -> (tempfile::TempDir, ArtifactCache) {
        let dir = tempfile::Builder::new().prefix(name).tempdir().unwrap();
        let cache = ArtifactCache::new(dir.path().join("cache")).unwrap();
        (dir, cache)
    }

    /// The refusal of `err`: a [`Error::DownloadRefused`] naming [`FIELD`], terminal, whose text contains
    /// `why`.
    fn assert_refused(err: &Error, why: &str) {
        let text = err.to_string();
        assert!(
            matches!(err, Error::DownloadRefused { field, .. } if field == FIELD),
            "{text}"
        );
        assert!(text.contains(why), "{text}");
        assert!(
            !err.is_transient(),
            "a refusal waits for a spec or flag change: {text}"
        );
    }

    #[tokio::test]
    async fn a_mirror_on_loopback_is_refused_by_default_and_never_contacted() {
        const BODY: &[u8] = b"the manager's own loopback";
        let digest = hex::encode(Sha256::digest(BODY));
        let (addr, hits) = counting_mirror("127.0.0.1", BODY).await;
        let (_dir, cache) = default_cache("capkk-cache-loopback");
        for url in [
            format!("http://{addr}/kubeadm"),
            format!("http://localhost:{}/kubeadm", addr.port()),
            format!("http://[::ffff:127.0.0.1]:{}/kubeadm", addr.port()),
            // Spellings URL parsers read as 127.0.0.1.
            format!("http://2130706433:{}/kubeadm", addr.port()),
            format!("http://0x7f.1:{}/kubeadm", addr.port()),
        ] {
            let err = cache
                .fetch(&url, FIELD, &digest, "kubeadm")
                .await
                .expect_err("loopback is refused by default");
            assert_refused(
                &err,
                "a loopback address (allowed only by --download-allow-loopback)",
            );
            let err = cache
                .fetch_text(&url, FIELD)
                .await
                .expect_err("also for checksum files");
            assert_refused(&err, "loopback");
        }
        assert_eq!(
            hits.load(Ordering::Relaxed),
            0,
            "the loopback mirror was contacted"
        );
        // The same mirror, opted in.
        cache.set_download_policy(DownloadPolicy {
            allow_loopback: true,
            ..DownloadPolicy::default()
        });
        cache
            .fetch(&format!("http://{addr}/kubeadm"), FIELD, &digest, "kubeadm")
            .await
            .expect("reached with --download-allow-loopback");
        assert_eq!(hits.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn the_clusters_own_ranges_are_refused_and_never_contacted() {
        const BODY: &[u8] = b"an in-cluster Service";
        let digest = hex::encode(Sha256::digest(BODY));
        // 127.0.0.2 stands for the Service range: loopback is allowed, the range is not.
        let (addr, hits) = counting_mirror("127.0.0.2", BODY).await;
        let (_dir, cache) = loopback_cache("capkk-cache-deny");
        cache.set_download_policy(DownloadPolicy {
            deny: vec!["127.0.0.2/32".parse().unwrap()],
            allow_loopback: true,
            ..DownloadPolicy::default()
        });
        let err = cache
            .fetch(&format!("http://{addr}/x"), FIELD, &digest, "kubeadm")
            .await
            .expect_err("a cluster range is refused");
        assert_refused(
            &err,
            "is an address in 127.0.0.2/32, one of the cluster's own ranges (--download-deny-cidr)",
        );
        assert_eq!(hits.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn with_an_allow_list_only_the_mirrors_it_names_are_reached() {
        const BODY: &[u8] = b"an allowed mirror";
        let digest = hex::encode(Sha256::digest(BODY));
        let (allowed, allowed_hits) = counting_mirror("127.0.0.3", BODY).await;
        let (other, other_hits) = counting_mirror("127.0.0.1", BODY).await;
        let (_dir, cache) = loopback_cache("capkk-cache-allow");
        cache.set_download_policy(DownloadPolicy {
            allow: vec!["127.0.0.3/32".parse().unwrap(), "localhost".parse().unwrap()],
            allow_loopback: true,
            ..DownloadPolicy::default()
        });
        let err = cache
            .fetch(&format!("http://{other}/x"), FIELD, &digest, "kubeadm")
            .await
            .expect_err("an address off the allow-list is refused");
        assert_refused(
            &err,
            "127.0.0.1 is not on the download allow-list (--download-allow)",
        );
        assert_eq!(
            other_hits.load(Ordering::Relaxed),
            0,
            "a mirror off the list was contacted"
        );
        cache
            .fetch(&format!("http://{allowed}/x"), FIELD, &digest, "kubeadm")
            .await
            .expect("an address in an allowed range is reached");
        assert_eq!(allowed_hits.load(Ordering::Relaxed), 1);
        // A name on the list is reached at the addresses it resolves to (localhost: the other mirror's).
        cache
            .fetch_text(&format!("http://localhost:{}/sums", other.port()), FIELD)
            .await
            .expect("a name on the allow-list is reached");
        assert_eq!(other_hits.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_download_client_resolves_no_name_but_the_one_checked() {
        const BODY: &[u8] = b"unchecked";
        let (addr, hits) = counting_mirror("127.0.0.1", BODY).await;
        let (_dir, cache) = loopback_cache("capkk-cache-pin");
        // A client made for the checked address 127.0.0.1 asked to reach a name: it does not resolve it.
        let client = cache
            .client_for(&format!("http://{addr}/x"), FIELD)
            .await
            .unwrap();
        let err = client
            .get(format!("http://localhost:{}/x", addr.port()))
            .send()
            .await
            .expect_err("an unchecked name is not resolved");
        assert!(
            without_url(&err).contains("not checked by the download policy"),
            "{err}"
        );
        assert_eq!(hits.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn an_artifact_over_the_cap_is_refused_without_filling_the_disk() {
        let cap = 64 * 1024;
        let body = vec![b'a'; 4 * 1024 * 1024];
        let digest = hex::encode(Sha256::digest(&body));
        for length in [true, false] {
            let url = serve(body.clone(), length).await;
            let (_dir, cache) = loopback_cache("capkk-cache-cap");
            cache.set_max_artifact_bytes(cap);
            let err = cache
                .fetch(&format!("{url}/big"), FIELD, &digest, "kubeadm")
                .await
                .expect_err("over the cap");
            assert!(
                err.to_string().contains("larger than the limit of 65536 bytes"),
                "{err}"
            );
            let mut kept = files_under(&cache.root().join("sha256"));
            kept.extend(files_under(&cache.root().join("tmp")));
            // Refused by Content-Length before a byte is written, or while streaming at the cap; the partial
            // file is removed either way.
            assert!(kept.is_empty(), "Content-Length {length}: left on disk: {kept:?}");
        }
    }

    /// Marks the cached file of `digest` as last used `ago` in the past.
    fn age(cache: &ArtifactCache, digest: &str, ago: Duration) {
        let f = std::fs::File::options()
            .append(true)
            .open(cache.path_for(digest).unwrap())
            .unwrap();
        f.set_modified(std::time::SystemTime::now() - ago).unwrap();
    }

    #[tokio::test]
    async fn the_cache_stays_under_its_bound_evicting_the_least_recently_used_artifacts_but_never_one_in_use()
    {
        let bodies: Vec<Vec<u8>> = (0..4u8).map(|i| vec![b'a' + i; 40 * 1024]).collect();
        let digests: Vec<String> = bodies.iter().map(|b| hex::encode(Sha256::digest(b))).collect();
        let mut urls = Vec::new();
        for b in &bodies {
            urls.push(serve(b.clone(), false).await);
        }
        let (_dir, cache) = loopback_cache("capkk-cache-total");
        cache.set_max_cache_bytes(100 * 1024);
        let fetch = |i: usize| cache.fetch(&urls[i], FIELD, &digests[i], "kubeadm");
        fetch(0).await.unwrap();
        fetch(1).await.unwrap();
        // Both are in use (fetched moments ago): a third does not fit and nothing is evicted.
        let err = fetch(2).await.expect_err("no room while both are in use");
        assert!(
            err.to_string()
                .contains("the artifact cache is full (102400 bytes, --max-cache-bytes"),
            "{err}"
        );
        assert_eq!(
            cache.used_bytes(),
            80 * 1024,
            "the discarded download gave its bytes back"
        );
        assert!(files_under(&cache.root().join("tmp")).is_empty());
        // Later: 0 was used an hour ago, 1 half an hour ago; 1 is hit again now.
        age(&cache, &digests[0], Duration::from_secs(3600));
        age(&cache, &digests[1], Duration::from_secs(1800));
        fetch(2)
            .await
            .expect("0, the least recently used, is evicted to make room");
        assert!(!cache.path_for(&digests[0]).unwrap().exists());
        assert!(cache.path_for(&digests[1]).unwrap().exists());
        age(&cache, &digests[1], Duration::from_secs(1800));
        age(&cache, &digests[2], Duration::from_secs(3600));
        fetch(1).await.expect("a hit refreshes 1");
        fetch(3)
            .await
            .expect("2, now the least recently used, is evicted");
        assert!(!cache.path_for(&digests[2]).unwrap().exists());
        let on_disk: u64 = files_under(&cache.root().join("sha256"))
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum();
        assert_eq!(on_disk, 80 * 1024);
        assert_eq!(cache.used_bytes(), on_disk);
        assert!(on_disk <= cache.max_cache_bytes());
        // A new process counts what is already there.
        let again = ArtifactCache::new(cache.root()).unwrap();
        assert_eq!(again.used_bytes(), on_disk);
    }

    #[tokio::test]
    async fn a_download_dropped_midway_gives_its_bytes_back_and_leaves_no_partial_file() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // A mirror that sends the first 16 KiB of an artifact, then stalls: the download is in progress
        // when the phase's deadline drops it.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let _ = s.read(&mut buf).await;
                    let _ = s
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n")
                        .await;
                    let _ = s.write_all(&[b'x'; 16 * 1024]).await;
                    tokio::time::sleep(Duration::from_secs(600)).await;
                });
            }
        });
        let stored = b"an artifact stored before".to_vec();
        let stored_digest = hex::encode(Sha256::digest(&stored));
        let url = serve(stored, true).await;
        let (_dir, cache) = loopback_cache("capkk-cache-cancel");
        cache.fetch(&url, FIELD, &stored_digest, "kubeadm").await.unwrap();
        let before = cache.used_bytes();
        assert!(before > 0);
        let url = format!("http://{addr}/stalls");
        let digest = "a".repeat(64);
        let mut fetch = Box::pin(cache.fetch(&url, FIELD, &digest, "kubelet"));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while cache.used_bytes() == before {
            tokio::select! {
                r = &mut fetch => panic!("the stalled download ended: {r:?}"),
                () = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no byte of the stalled download arrived in 30 s"
            );
        }
        assert_eq!(
            files_under(&cache.root().join("tmp")).len(),
            1,
            "the download is streaming to its partial file"
        );
        drop(fetch);
        assert_eq!(
            cache.used_bytes(),
            before,
            "the dropped download kept its reservation"
        );
        assert!(files_under(&cache.root().join("tmp")).is_empty());
    }

    #[tokio::test]
    async fn a_manager_at_its_bound_recounts_the_files_another_manager_sharing_the_directory_evicted() {
        let bodies: Vec<Vec<u8>> = (0..4u8).map(|i| vec![b'a' + i; 40 * 1024]).collect();
        let digests: Vec<String> = bodies.iter().map(|b| hex::encode(Sha256::digest(b))).collect();
        let mut urls = Vec::new();
        for b in &bodies {
            urls.push(serve(b.clone(), false).await);
        }
        let (_dir, first) = loopback_cache("capkk-cache-shared");
        first.set_max_cache_bytes(100 * 1024);
        first
            .fetch(&urls[0], FIELD, &digests[0], "kubeadm")
            .await
            .unwrap();
        first
            .fetch(&urls[1], FIELD, &digests[1], "kubeadm")
            .await
            .unwrap();
        // A second manager on the same directory, with a smaller bound, evicts both (unused for an hour).
        let second = ArtifactCache::new(first.root()).unwrap();
        second.set_download_policy(first.download_policy().as_ref().clone());
        second.set_max_cache_bytes(40 * 1024);
        age(&first, &digests[0], Duration::from_secs(3600));
        age(&first, &digests[1], Duration::from_secs(3600));
        second
            .fetch(&urls[2], FIELD, &digests[2], "kubeadm")
            .await
            .unwrap();
        assert_eq!(files_under(&first.root().join("sha256")).len(), 1);
        // The first still counts the 80 KiB it stored; at its bound it recounts and finds room without
        // evicting 2, which is in use.
        first
            .fetch(&urls[3], FIELD, &digests[3], "kubeadm")
            .await
            .expect("the files the other manager evicted are not counted");
        assert!(first.path_for(&digests[2]).unwrap().exists());
        let on_disk: u64 = files_under(&first.root().join("sha256"))
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum();
        assert_eq!(on_disk, 80 * 1024);
        assert_eq!(first.used_bytes(), on_disk);
    }

    #[test]
    fn userinfo_never_leaves_a_url() {
        assert_eq!(
            strip_userinfo("https://user:pa%40ss@mirror.example:8443/a/b?x=y@z"),
            "https://mirror.example:8443/a/b?x=y@z"
        );
        assert_eq!(strip_userinfo("http://host/p"), "http://host/p");
        assert_eq!(strip_userinfo("no-scheme@x"), "no-scheme@x");
    }
}
