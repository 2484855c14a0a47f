//! A tiny HTTP/1.1 file server on a sandbox's bridge: the artifact mirror that sandbox hosts download
//! release artifacts from in tests and benchmarks (stand-ins with their real SHA-256), counting the requests
//! per path; and the tarballs such stand-ins are packed in.

use std::{
    collections::{BTreeMap, HashMap},
    io::{BufRead, BufReader, Write},
    net::{TcpListener, TcpStream},
    path::Path,
    sync::{Arc, Mutex, PoisonError},
};

use crate::Sandbox;

/// The mirror: GET and HEAD of what [`Mirror::put`] stored (404 for anything else), `Content-Length`,
/// keep-alive connections, one thread per connection.
#[derive(Clone, Debug)]
pub struct Mirror {
    /// `http://198.18.N.1:port`.
    pub base: String,
    files: Arc<Mutex<HashMap<String, Arc<Vec<u8>>>>>,
    /// Every request per path (404s and HEADs included).
    hits: Arc<Mutex<HashMap<String, usize>>>,
    /// GET requests answered with the file, per path.
    downloads: Arc<Mutex<BTreeMap<String, usize>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Mirror {
    /// Listen on the sandbox's bridge address (any free port).
    pub fn start(sb: &Sandbox) -> std::io::Result<Mirror> {
        Self::start_on(&format!("198.18.{}.1", sb.state().index))
    }

    /// Listen on `addr` (a sandbox bridge address), port chosen by the kernel.
    pub fn start_on(addr: &str) -> std::io::Result<Mirror> {
        let listener = TcpListener::bind((addr, 0))?;
        let port = listener.local_addr()?.port();
        let m = Mirror {
            base: format!("http://{addr}:{port}"),
            files: Arc::default(),
            hits: Arc::default(),
            downloads: Arc::default(),
        };
        let srv = m.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
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
        let mut reader = BufReader::new(conn.try_clone()?);
        loop {
            let mut first = String::new();
            if reader.read_line(&mut first)? == 0 {
                return Ok(());
            }
            let mut close = false;
            loop {
                let mut l = String::new();
                if reader.read_line(&mut l)? == 0 || l == "\r\n" || l == "\n" {
                    break;
                }
                if l.to_ascii_lowercase().starts_with("connection: close") {
                    close = true;
                }
            }
            let mut words = first.split_whitespace();
            let method = words.next().unwrap_or_default().to_owned();
            let path = words.next().unwrap_or("/").to_owned();
            *lock(&self.hits).entry(path.clone()).or_default() += 1;
            let body = lock(&self.files).get(&path).cloned();
            let connection = if close { "close" } else { "keep-alive" };
            match body {
                Some(b) => {
                    if method == "GET" {
                        *lock(&self.downloads).entry(path).or_default() += 1;
                    }
                    conn.write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: {connection}\r\n\r\n",
                            b.len()
                        )
                        .as_bytes(),
                    )?;
                    if method != "HEAD" {
                        conn.write_all(&b)?;
                    }
                }
                None => conn.write_all(
                    format!(
                        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: {connection}\r\n\r\n"
                    )
                    .as_bytes(),
                )?,
            }
            if close {
                return Ok(());
            }
        }
    }

    /// Serve `body` at `path`.
    pub fn put(&self, path: &str, body: impl Into<Arc<Vec<u8>>>) {
        lock(&self.files).insert(path.to_owned(), body.into());
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
