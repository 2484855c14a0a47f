//! A tiny HTTP/1.1 file server on a sandbox's bridge: the artifact mirror that sandbox hosts download
//! release artifacts from in tests (stand-ins with their real SHA-256), counting the requests per path; and
//! the tarballs such stand-ins are packed in.

use std::{
    collections::HashMap,
    io::{BufRead, BufReader, Write},
    net::TcpListener,
    path::Path,
    sync::{Arc, Mutex, PoisonError},
};

use crate::Sandbox;

/// The mirror: serves what [`Mirror::put`] stored, 404 for anything else.
#[derive(Clone, Debug)]
pub struct Mirror {
    /// `http://198.18.N.1:port`.
    pub base: String,
    files: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    hits: Arc<Mutex<HashMap<String, usize>>>,
}

impl Mirror {
    /// Listen on the sandbox's bridge address (any free port); one thread per connection.
    pub fn start(sb: &Sandbox) -> std::io::Result<Mirror> {
        let addr = format!("198.18.{}.1", sb.state().index);
        let listener = TcpListener::bind((addr.as_str(), 0))?;
        let port = listener.local_addr()?.port();
        let m = Mirror {
            base: format!("http://{addr}:{port}"),
            files: Arc::default(),
            hits: Arc::default(),
        };
        let srv = m.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let srv = srv.clone();
                std::thread::spawn(move || srv.answer(conn));
            }
        });
        Ok(m)
    }

    fn answer(&self, mut conn: std::net::TcpStream) {
        let Ok(c2) = conn.try_clone() else { return };
        let mut reader = BufReader::new(c2);
        let mut first = String::new();
        if reader.read_line(&mut first).is_err() {
            return;
        }
        loop {
            let mut l = String::new();
            if reader.read_line(&mut l).unwrap_or(0) == 0 || l == "\r\n" || l == "\n" {
                break;
            }
        }
        let path = first.split_whitespace().nth(1).unwrap_or("/").to_owned();
        let body = self
            .files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&path)
            .cloned();
        *self
            .hits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(path)
            .or_default() += 1;
        let _ = match body {
            Some(b) => conn
                .write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        b.len()
                    )
                    .as_bytes(),
                )
                .and_then(|_| conn.write_all(&b)),
            None => {
                conn.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            }
        };
    }

    /// Serve `body` at `path`.
    pub fn put(&self, path: &str, body: Vec<u8>) {
        self.files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.to_owned(), body);
    }

    /// How many requests asked for `path` so far.
    pub fn hits(&self, path: &str) -> usize {
        self.hits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(path)
            .copied()
            .unwrap_or(0)
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
