//! GitOps pieces for the Flux test: a git repository served over smart HTTP by Debian's `git http-backend`
//! (a CGI program; the few lines of HTTP around it are here) on 127.0.0.1, a working copy to commit to, and
//! Flux's source-controller and kustomize-controller as local processes against the management plane, as
//! CAPI's controllers run there (binaries and CRDs from `make flux-bin`).

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context, bail, ensure};

/// Runs `git` with `args` in `dir`; its stdout on success.
pub fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        // A fixed identity and no user or system configuration: commits look the same on every machine.
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "capkk e2e")
        .env("GIT_AUTHOR_EMAIL", "e2e@capkk.invalid")
        .env("GIT_COMMITTER_NAME", "capkk e2e")
        .env("GIT_COMMITTER_EMAIL", "e2e@capkk.invalid")
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running git {args:?} (Debian package git)"))?;
    ensure!(
        out.status.success(),
        "git {args:?} in {}: {}\n{}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A bare repository `<root>/<name>.git` served read-only over smart HTTP at `url`, and a working copy
/// whose commits [`GitRepo::commit`] pushes to it (through the file system, as a developer's push would
/// land on a git host).
pub struct GitRepo {
    /// `http://127.0.0.1:<port>/<name>.git`, what a GitRepository's `spec.url` says.
    pub url: String,
    /// The working copy.
    pub work: PathBuf,
    server: GitServer,
}

impl GitRepo {
    /// An empty repository (branch `main`) under `root`, served on a free loopback port.
    pub fn create(root: &Path, name: &str) -> anyhow::Result<GitRepo> {
        let served = root.join("served");
        let bare = served.join(format!("{name}.git"));
        let work = root.join("work");
        std::fs::create_dir_all(&bare)?;
        std::fs::create_dir_all(&work)?;
        git(&bare, &["init", "--quiet", "--bare", "--initial-branch=main"])?;
        git(&work, &["init", "--quiet", "--initial-branch=main"])?;
        let bare_path = bare.to_str().context("repository path is not UTF-8")?;
        git(&work, &["remote", "add", "origin", bare_path])?;
        let server = GitServer::start(&served)?;
        Ok(GitRepo {
            url: format!("http://{}/{name}.git", server.addr),
            work,
            server,
        })
    }

    /// Writes `files` (path relative to the working copy -> content; `None` removes it), commits everything
    /// with `message`, pushes, and returns the commit's id.
    pub fn commit(&self, files: &[(&str, Option<&str>)], message: &str) -> anyhow::Result<String> {
        for (path, content) in files {
            let p = self.work.join(path);
            match content {
                Some(c) => {
                    if let Some(d) = p.parent() {
                        std::fs::create_dir_all(d)?;
                    }
                    std::fs::write(&p, c)?;
                }
                None => std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?,
            }
        }
        git(&self.work, &["add", "--all"])?;
        git(&self.work, &["commit", "--quiet", "-m", message])?;
        git(&self.work, &["push", "--quiet", "origin", "main"])?;
        git(&self.work, &["rev-parse", "HEAD"])
    }

    /// How many fetches (`git-upload-pack` requests) the server answered.
    pub fn fetches(&self) -> usize {
        self.server.fetches.load(Ordering::Relaxed)
    }
}

/// `git http-backend` behind a minimal HTTP/1.1 server: one thread per connection, one request per
/// connection (`Connection: close`), the request body handed to the CGI program and its output relayed.
struct GitServer {
    addr: String,
    stop: Arc<AtomicBool>,
    fetches: Arc<AtomicUsize>,
}

impl GitServer {
    fn start(project_root: &Path) -> anyhow::Result<GitServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?.to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (root, stop2, fetches2) = (project_root.to_owned(), stop.clone(), fetches.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (root, fetches) = (root.clone(), fetches2.clone());
                std::thread::spawn(move || {
                    if let Err(e) = serve(conn, &root, &fetches) {
                        eprintln!("git http server: {e:#}");
                    }
                });
            }
        });
        Ok(GitServer { addr, stop, fetches })
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so that it sees the flag.
        let _ = TcpStream::connect(&self.addr);
    }
}

fn serve(conn: TcpStream, root: &Path, fetches: &AtomicUsize) -> anyhow::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (method, target) = match (parts.next(), parts.next()) {
        (Some(m), Some(t)) => (m.to_owned(), t.to_owned()),
        _ => return Ok(()), // the wake-up connection of Drop, or garbage
    };
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
    }
    let header = |name: &str| headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let mut body = Vec::new();
    if header("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or("0"), 16)?;
            let mut chunk = vec![0; size + 2]; // the chunk and its CRLF
            reader.read_exact(&mut chunk)?;
            if size == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..size]);
        }
    } else if let Some(n) = header("content-length") {
        body.resize(n.parse()?, 0);
        reader.read_exact(&mut body)?;
    }
    let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
    if path.ends_with("/git-upload-pack") {
        fetches.fetch_add(1, Ordering::Relaxed);
    }
    let mut cgi = Command::new("git")
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("REQUEST_METHOD", &method)
        .env("PATH_INFO", path)
        .env("QUERY_STRING", query)
        .env("CONTENT_TYPE", header("content-type").unwrap_or_default())
        .env("CONTENT_LENGTH", body.len().to_string())
        .env(
            "HTTP_CONTENT_ENCODING",
            header("content-encoding").unwrap_or_default(),
        )
        .env("GIT_PROTOCOL", header("git-protocol").unwrap_or_default())
        .env("REMOTE_ADDR", "127.0.0.1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("starting git http-backend (Debian package git)")?;
    let mut stdin = cgi.stdin.take().context("http-backend stdin")?;
    let writer = std::thread::spawn(move || stdin.write_all(&body));
    let out = cgi.wait_with_output()?;
    let _ = writer.join();
    // CGI output: headers (Status: among them), a blank line, the body.
    let split = out
        .stdout
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, i + 4))
        .or_else(|| {
            out.stdout
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|i| (i, i + 2))
        })
        .context("git http-backend wrote no header block")?;
    let head = String::from_utf8_lossy(&out.stdout[..split.0]).into_owned();
    let mut status = "200 OK".to_owned();
    let mut response = Vec::new();
    let mut fields = String::new();
    for h in head.lines() {
        match h.split_once(':') {
            Some((k, v)) if k.eq_ignore_ascii_case("status") => status = v.trim().to_owned(),
            Some(_) => fields.push_str(&format!("{}\r\n", h.trim_end())),
            None => {}
        }
    }
    let payload = &out.stdout[split.1..];
    response.extend_from_slice(
        format!(
            "HTTP/1.1 {status}\r\n{fields}Content-Length: {}\r\nConnection: close\r\n\r\n",
            payload.len()
        )
        .as_bytes(),
    );
    response.extend_from_slice(payload);
    let mut conn = conn;
    conn.write_all(&response)?;
    Ok(())
}

/// Flux's source-controller and kustomize-controller as processes with the plane's admin kubeconfig (as
/// CAPI's controllers run), all namespaces watched, no leader election; killed on drop. Logs:
/// `<dir>/source-controller.log`, `<dir>/kustomize-controller.log`.
pub struct Flux {
    children: Vec<(String, Child)>,
    /// The controllers' log files.
    pub logs: Vec<PathBuf>,
}

impl Flux {
    /// The directory of the pinned binaries and CRDs (`make flux-bin`); fails naming that target when it
    /// is incomplete.
    pub async fn dir() -> anyhow::Result<PathBuf> {
        let dir = capkk_mgmt::flux_dir().await?;
        for f in ["source-controller", "kustomize-controller", "crds/.complete"] {
            if !dir.join(f).exists() {
                bail!(
                    "Flux is not built: {} is missing (run `make flux-bin`: Flux's source-controller and \
                     kustomize-controller from test/mgmt/tools/flux)",
                    dir.join(f).display()
                );
            }
        }
        Ok(dir)
    }

    /// Installs Flux's CRDs and starts both controllers; returns once both answer `/readyz`.
    pub async fn start(
        client: &kube::Client,
        kubeconfig: &Path,
        dir: &Path,
        runtime_ns: &str,
    ) -> anyhow::Result<Flux> {
        let bin = Self::dir().await?;
        capkk_mgmt::install_crds(client, &bin.join("crds")).await?;
        let storage = dir.join("flux-storage");
        std::fs::create_dir_all(&storage)?;
        let storage_addr = format!("127.0.0.1:{}", super::free_port()?);
        let mut flux = Flux {
            children: Vec::new(),
            logs: Vec::new(),
        };
        let mut health = Vec::new();
        for (name, extra) in [
            (
                "source-controller",
                vec![
                    format!("--storage-path={}", storage.display()),
                    format!("--storage-addr={storage_addr}"),
                    format!("--storage-adv-addr={storage_addr}"),
                ],
            ),
            ("kustomize-controller", vec!["--no-remote-bases=true".to_owned()]),
        ] {
            let hport = super::free_port()?;
            let log = dir.join(format!("{name}.log"));
            let f = std::fs::OpenOptions::new().create(true).append(true).open(&log)?;
            let child = Command::new(bin.join(name))
                .arg(format!("--metrics-addr=127.0.0.1:{}", super::free_port()?))
                .arg(format!("--health-addr=127.0.0.1:{hport}"))
                .arg("--enable-leader-election=false")
                .arg("--watch-all-namespaces=true")
                .arg("--log-level=info")
                .args(&extra)
                .env("KUBECONFIG", kubeconfig)
                .env("RUNTIME_NAMESPACE", runtime_ns)
                // Anything a library wants to cache under $HOME stays in the test's directory.
                .env("HOME", dir)
                .stdin(Stdio::null())
                .stdout(f.try_clone()?)
                .stderr(f)
                .spawn()
                .with_context(|| format!("starting {}", bin.join(name).display()))?;
            flux.children.push((name.to_owned(), child));
            flux.logs.push(log);
            health.push((name, hport));
        }
        let t0 = Instant::now();
        for (name, port) in health {
            loop {
                if super::http_get(port, "/readyz").is_ok_and(|r| r.starts_with("HTTP/1.1 200")) {
                    break;
                }
                if t0.elapsed() > Duration::from_secs(120) {
                    bail!(
                        "{name} not ready on 127.0.0.1:{port} after 120 s (log {})",
                        dir.display()
                    );
                }
                if let Some((_, c)) = flux.children.iter_mut().find(|(n, _)| n == name)
                    && let Ok(Some(status)) = c.try_wait()
                {
                    bail!(
                        "{name} exited ({status}); its log: {}",
                        dir.join(format!("{name}.log")).display()
                    );
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        Ok(flux)
    }
}

impl Drop for Flux {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
