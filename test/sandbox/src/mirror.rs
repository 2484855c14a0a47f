//! A tiny HTTP/1.1 file server: the artifact mirror that sandbox hosts download release artifacts from in
//! tests and benchmarks (stand-ins with their real SHA-256, put in memory, counting the requests per path),
//! and, behind the `capkk-mirror` binary, the file mirror of the e2e and the real-node tiers (a directory on
//! disk, one log line per request); and the tarballs such stand-ins are packed in.
//!
//! What the clients need and no more: GET and HEAD with `Content-Length`, keep-alive (apt pipelines its
//! requests), percent-decoded paths (apt asks for `conntrack_1%253a1.4.7…` to get the file `conntrack_1%3a1.4.7…`).
//! `Range` is ignored: curl (`-fsSL --retry 3`), wget (`-q -T 60 -O`) and the controller's reqwest never send
//! it, and apt, which may when resuming a partial file, accepts the whole file with 200 as HTTP allows.

use std::{
    collections::{BTreeMap, HashMap},
    ffi::OsStr,
    fs::File,
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use crate::Sandbox;

/// How long a connection may sit idle between requests before it is closed (clients' own pools give up
/// sooner: reqwest after 90 s).
const IDLE: Duration = Duration::from_secs(300);

/// The mirror: GET and HEAD of what [`Mirror::put`] stored, then of the files under its directory when it has
/// one ([`Mirror::serve_dir`]); 404 for anything else, `Content-Length`, keep-alive connections, one thread per
/// connection.
#[derive(Clone, Debug)]
pub struct Mirror {
    /// `http://198.18.N.1:port`.
    pub base: String,
    files: Arc<Mutex<HashMap<String, Arc<Vec<u8>>>>>,
    /// Served from disk, streamed: a directory mirror's root.
    dir: Option<Arc<PathBuf>>,
    /// One line per request on stderr (method, path, status, bytes, duration).
    log: bool,
    /// Every request per path (404s and HEADs included).
    hits: Arc<Mutex<HashMap<String, usize>>>,
    /// GET requests answered with the file, per path.
    downloads: Arc<Mutex<BTreeMap<String, usize>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One request's line and the headers the server acts on.
struct Request {
    method: String,
    target: String,
    close: bool,
}

impl Request {
    /// The next request of a connection; `None` once the client closed it.
    fn read(reader: &mut impl BufRead) -> std::io::Result<Option<Request>> {
        let mut first = String::new();
        if reader.read_line(&mut first)? == 0 {
            return Ok(None);
        }
        let mut words = first.split_whitespace();
        let method = words.next().unwrap_or_default().to_owned();
        let target = words.next().unwrap_or("/").to_owned();
        // HTTP/1.0 closes after each response unless the client asks to keep the connection.
        let mut close = words.next() == Some("HTTP/1.0");
        loop {
            let mut l = String::new();
            if reader.read_line(&mut l)? == 0 || l == "\r\n" || l == "\n" {
                break;
            }
            let l = l.to_ascii_lowercase();
            if let Some(v) = l.strip_prefix("connection:") {
                match v.trim() {
                    "close" => close = true,
                    "keep-alive" => close = false,
                    _ => {}
                }
            }
        }
        Ok(Some(Request {
            method,
            target,
            close,
        }))
    }
}

/// What answers a request.
enum Body {
    Memory(Arc<Vec<u8>>),
    File(File, u64),
    /// A status without a body: 400 (a path that leaves the directory or cannot be decoded), 404, 405.
    Status(u16),
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "",
    }
}

/// `%XX` decoded (and nothing else: `+` is a plus in a path); `None` for a malformed escape.
fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// The file under `dir` that a request target names; `None` when the target is no absolute path, cannot be
/// decoded or would leave `dir` (a `..` component, an encoded `/` or NUL).
fn file_under(dir: &Path, target: &str) -> Option<PathBuf> {
    let path = target.split('?').next().unwrap_or_default();
    if !path.starts_with('/') {
        return None;
    }
    let mut p = dir.to_path_buf();
    for raw in path.split('/') {
        let name = percent_decode(raw)?;
        match name.as_slice() {
            b"" | b"." => {}
            b".." => return None,
            n if n.contains(&b'/') || n.contains(&0) => return None,
            n => p.push(OsStr::from_bytes(n)),
        }
    }
    Some(p)
}

/// Time of day, UTC, to the millisecond: enough to line a request up with the hosts' journals.
fn clock() -> String {
    let t = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let s = t.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        t.subsec_millis()
    )
}

impl Mirror {
    /// Listen on the sandbox's bridge address (any free port).
    pub fn start(sb: &Sandbox) -> std::io::Result<Mirror> {
        Self::start_on(&format!("198.18.{}.1", sb.state().index))
    }

    /// Listen on `addr` (a sandbox bridge address), port chosen by the kernel.
    pub fn start_on(addr: &str) -> std::io::Result<Mirror> {
        Self::spawn(TcpListener::bind((addr, 0))?, None, false)
    }

    /// Serve the files under `dir` on `listen` (`ip:port`, port 0: chosen by the kernel), streamed from disk,
    /// logging every request on stderr: the `capkk-mirror` binary.
    pub fn serve_dir(listen: &str, dir: &Path) -> std::io::Result<Mirror> {
        if !dir.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} is not a directory", dir.display()),
            ));
        }
        Self::spawn(
            TcpListener::bind(listen)?,
            Some(Arc::new(dir.to_path_buf())),
            true,
        )
    }

    fn spawn(listener: TcpListener, dir: Option<Arc<PathBuf>>, log: bool) -> std::io::Result<Mirror> {
        let m = Mirror {
            base: format!("http://{}", listener.local_addr()?),
            files: Arc::default(),
            dir,
            log,
            hits: Arc::default(),
            downloads: Arc::default(),
        };
        let srv = m.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else {
                    // Out of descriptors, say: let connections close rather than spin.
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                };
                let srv = srv.clone();
                std::thread::spawn(move || {
                    let _ = srv.serve(conn);
                });
            }
        });
        Ok(m)
    }

    /// Answer the requests of one connection until the client closes it or asks to.
    fn serve(&self, mut conn: TcpStream) -> std::io::Result<()> {
        conn.set_read_timeout(Some(IDLE))?;
        let peer = conn.peer_addr().map(|a| a.to_string()).unwrap_or_default();
        let mut reader = BufReader::new(conn.try_clone()?);
        while let Some(req) = Request::read(&mut reader)? {
            let t0 = Instant::now();
            *lock(&self.hits).entry(req.target.clone()).or_default() += 1;
            let body = self.lookup(&req);
            let (status, len) = match &body {
                Body::Memory(b) => (200, b.len() as u64),
                Body::File(_, len) => (200, *len),
                Body::Status(s) => (*s, 0),
            };
            if status == 200 && req.method == "GET" {
                *lock(&self.downloads).entry(req.target.clone()).or_default() += 1;
            }
            let connection = if req.close { "close" } else { "keep-alive" };
            let mut head = format!(
                "HTTP/1.1 {status} {}\r\nContent-Length: {len}\r\nConnection: {connection}\r\n",
                reason(status)
            );
            head += match status {
                200 => "Content-Type: application/octet-stream\r\n",
                405 => "Allow: GET, HEAD\r\n",
                _ => "",
            };
            head += "\r\n";
            let sent = conn.write_all(head.as_bytes()).and_then(|()| match body {
                _ if req.method == "HEAD" => Ok(()),
                Body::Memory(b) => conn.write_all(&b),
                // Streamed (sendfile), never read whole: node binaries are tens of MB.
                Body::File(f, len) => match std::io::copy(&mut f.take(len), &mut conn)? {
                    n if n == len => Ok(()),
                    n => Err(std::io::Error::other(format!(
                        "file shrank to {n} bytes while served"
                    ))),
                },
                Body::Status(_) => Ok(()),
            });
            if self.log {
                let outcome = match &sent {
                    Ok(()) => format!("{status} {len}B"),
                    Err(e) => format!("{status} aborted: {e}"),
                };
                eprintln!(
                    "{} {peer} {} {} {outcome} {:.3}s",
                    clock(),
                    req.method,
                    req.target,
                    t0.elapsed().as_secs_f64()
                );
            }
            sent?;
            if req.close {
                break;
            }
        }
        Ok(())
    }

    /// The answer to a request: a file put in memory, else one under the directory, else a status.
    fn lookup(&self, req: &Request) -> Body {
        if req.method != "GET" && req.method != "HEAD" {
            return Body::Status(405);
        }
        if let Some(b) = lock(&self.files).get(&req.target) {
            return Body::Memory(b.clone());
        }
        let Some(dir) = &self.dir else {
            return Body::Status(404);
        };
        let Some(path) = file_under(dir, &req.target) else {
            return Body::Status(400);
        };
        match File::open(&path).and_then(|f| Ok((f.metadata()?, f))) {
            Ok((meta, f)) if meta.is_file() => Body::File(f, meta.len()),
            _ => Body::Status(404),
        }
    }

    /// Serve `body` at `path`.
    pub fn put(&self, path: &str, body: impl Into<Arc<Vec<u8>>>) {
        lock(&self.files).insert(path.to_owned(), body.into());
    }

    /// Stop serving `path` (404 from now on).
    pub fn remove(&self, path: &str) {
        lock(&self.files).remove(path);
    }

    /// How many requests asked for `path` so far (HEADs and 404s included).
    pub fn hits(&self, path: &str) -> usize {
        lock(&self.hits).get(path).copied().unwrap_or(0)
    }

    /// GET requests answered with a file so far, per path.
    pub fn downloads(&self) -> BTreeMap<String, usize> {
        lock(&self.downloads).clone()
    }

    /// Forget the downloads counted so far.
    pub fn reset_downloads(&self) {
        lock(&self.downloads).clear();
    }
}

/// `<dir>/<name>.tgz` holding `members` (path inside the archive, contents), every one mode 0755, made with
/// `tar` from `<dir>/<name>.d`; returns the archive's bytes.
pub fn tarball(dir: &Path, name: &str, members: &[(&str, Vec<u8>)]) -> std::io::Result<Vec<u8>> {
    let root = dir.join(format!("{name}.d"));
    for (path, content) in members {
        let p = root.join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, content)?;
        let mut perm = std::fs::metadata(&p)?.permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
        std::fs::set_permissions(&p, perm)?;
    }
    let out = dir.join(format!("{name}.tgz"));
    let st = std::process::Command::new("tar")
        .arg("-czf")
        .arg(&out)
        .arg("-C")
        .arg(&root)
        .arg(".")
        .status()?;
    if !st.success() {
        return Err(std::io::Error::other(format!(
            "tar -czf {} failed: {st}",
            out.display()
        )));
    }
    std::fs::read(out)
}
