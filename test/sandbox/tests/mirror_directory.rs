//! The directory mode of the test mirror, through `capkk-mirror` as the e2e and the real-node tiers' scripts
//! start it (`--listen --dir --addr-file`), on 127.0.0.1: files streamed intact, HEAD, 404, paths that would
//! leave the directory refused, apt's percent-encoded file names, one log line per request.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, bail};

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> anyhow::Result<Scratch> {
        let d = std::env::temp_dir().join(format!("capkk-mirror-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d)?;
        Ok(Scratch(d))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The binary, killed on drop.
struct Served {
    child: Child,
    addr: String,
    log: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(dir: &Path, scratch: &Path) -> anyhow::Result<Served> {
    let addr_file = scratch.join("mirror.addr");
    let log = scratch.join("mirror.log");
    let child = Command::new(env!("CARGO_BIN_EXE_capkk-mirror"))
        .args(["--listen", "127.0.0.1:0", "--dir"])
        .arg(dir)
        .arg("--addr-file")
        .arg(&addr_file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?)
        .spawn()
        .context("start capkk-mirror")?;
    let mut served = Served {
        child,
        addr: String::new(),
        log,
    };
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if let Ok(a) = std::fs::read_to_string(&addr_file)
            && !a.trim().is_empty()
        {
            served.addr = a.trim().to_owned();
            return Ok(served);
        }
        if let Some(st) = served.child.try_wait()? {
            bail!(
                "capkk-mirror exited ({st}): {}",
                std::fs::read_to_string(&served.log)?
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("capkk-mirror wrote no address to {} in 10 s", addr_file.display())
}

/// One response: status, headers (lower-case names), body.
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Send `method target` on `conn` (kept alive) and read the response (a HEAD's without a body).
fn request(conn: &mut BufReader<TcpStream>, method: &str, target: &str) -> anyhow::Result<Response> {
    write!(
        conn.get_mut(),
        "{method} {target} HTTP/1.1\r\nHost: mirror\r\nUser-Agent: test\r\n\r\n"
    )?;
    let mut line = String::new();
    conn.read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("status line {line:?}"))?;
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        conn.read_line(&mut l)?;
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':').with_context(|| format!("header {l:?}"))?;
        headers.push((n.to_ascii_lowercase(), v.trim().to_owned()));
    }
    let mut r = Response {
        status,
        headers,
        body: Vec::new(),
    };
    let len: u64 = r.header("content-length").context("no Content-Length")?.parse()?;
    if method != "HEAD" {
        conn.by_ref().take(len).read_to_end(&mut r.body)?;
    }
    Ok(r)
}

fn connect(addr: &str) -> anyhow::Result<BufReader<TcpStream>> {
    Ok(BufReader::new(TcpStream::connect(addr)?))
}

/// Deterministic bytes that no shifted copy matches (a dropped or repeated chunk shows).
fn pattern(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn the_mirror_serves_a_directory_with_get_head_and_404_on_one_kept_alive_connection() -> anyhow::Result<()> {
    let s = Scratch::new("basic")?;
    let root = s.0.join("root");
    let k8s = root.join("kubernetes-release/release/v1.36.3/bin/linux/amd64");
    std::fs::create_dir_all(&k8s)?;
    std::fs::write(k8s.join("kubeadm.sha256"), "abc123\n")?;
    let m = serve(&root, &s.0)?;
    let mut c = connect(&m.addr)?;

    let get = request(
        &mut c,
        "GET",
        "/kubernetes-release/release/v1.36.3/bin/linux/amd64/kubeadm.sha256",
    )?;
    assert_eq!((get.status, get.body.as_slice()), (200, b"abc123\n".as_slice()));
    let head = request(
        &mut c,
        "HEAD",
        "/kubernetes-release/release/v1.36.3/bin/linux/amd64/kubeadm.sha256",
    )?;
    assert_eq!((head.status, head.header("content-length")), (200, Some("7")));
    assert!(head.body.is_empty(), "a HEAD has no body");
    let missing = request(
        &mut c,
        "GET",
        "/kubernetes-release/release/v1.36.3/bin/linux/amd64/kubelet",
    )?;
    assert_eq!(missing.status, 404);
    assert_eq!(
        request(&mut c, "GET", "/kubernetes-release/")?.status,
        404,
        "a directory is no file"
    );
    assert_eq!(request(&mut c, "POST", "/x")?.status, 405);
    // The connection survived every answer: the same socket still serves.
    assert_eq!(
        request(
            &mut c,
            "GET",
            "/kubernetes-release/release/v1.36.3/bin/linux/amd64/./kubeadm.sha256"
        )?
        .status,
        200
    );

    drop(c);
    let t0 = Instant::now();
    let log = loop {
        let log = std::fs::read_to_string(&m.log)?;
        if log.lines().filter(|l| l.contains(" 127.0.0.1:")).count() >= 6
            || t0.elapsed() > Duration::from_secs(5)
        {
            break log;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    for want in [
        "GET /kubernetes-release/release/v1.36.3/bin/linux/amd64/kubeadm.sha256 200 7B",
        "HEAD /kubernetes-release/release/v1.36.3/bin/linux/amd64/kubeadm.sha256 200 7B",
        "GET /kubernetes-release/release/v1.36.3/bin/linux/amd64/kubelet 404 0B",
        "POST /x 405 0B",
    ] {
        assert!(log.contains(want), "no log line with {want:?} in:\n{log}");
    }
    Ok(())
}

#[test]
fn paths_leaving_the_directory_are_refused_and_apts_encoded_names_are_found() -> anyhow::Result<()> {
    let s = Scratch::new("paths")?;
    let root = s.0.join("root");
    std::fs::create_dir_all(root.join("debian"))?;
    std::fs::write(s.0.join("secret"), "outside")?;
    // apt-get download names a package with an epoch `conntrack_1%3a1.4.7-1+b2_amd64.deb`; apt asks for it
    // percent-encoded once more (`%253a`, `~` as `%7e`), and `+` stays a plus.
    std::fs::write(root.join("debian/conntrack_1%3a1.4.7-1+b2_amd64.deb"), "deb")?;
    std::fs::write(root.join("debian/libssl3_3.0.22-1~deb12u2_amd64.deb"), "ssl")?;
    let m = serve(&root, &s.0)?;
    let mut c = connect(&m.addr)?;

    let epoch = request(&mut c, "GET", "/debian/./conntrack_1%253a1.4.7-1+b2_amd64.deb")?;
    assert_eq!((epoch.status, epoch.body.as_slice()), (200, b"deb".as_slice()));
    let tilde = request(&mut c, "GET", "/debian/libssl3_3.0.22-1%7edeb12u2_amd64.deb")?;
    assert_eq!((tilde.status, tilde.body.as_slice()), (200, b"ssl".as_slice()));
    for bad in [
        "/../secret",
        "/debian/../../secret",
        "/%2e%2e/secret",
        "/debian%2f..%2f..%2fsecret",
        "/%zz",
        "secret",
    ] {
        let r = request(&mut c, "GET", bad)?;
        assert_eq!(r.status, 400, "{bad} is refused");
        assert!(r.body.is_empty(), "{bad} answers nothing of the file");
    }
    Ok(())
}

#[test]
fn a_large_file_arrives_intact_on_parallel_connections() -> anyhow::Result<()> {
    let s = Scratch::new("large")?;
    let root = s.0.join("root");
    std::fs::create_dir_all(&root)?;
    // Node binaries are tens of MB (kubelet ~60 MiB): streamed from disk, not read into memory first.
    let want = pattern(48 << 20);
    std::fs::write(root.join("kubelet"), &want)?;
    let m = serve(&root, &s.0)?;
    let got = std::thread::scope(|sc| {
        let pulls: Vec<_> = (0..2)
            .map(|_| {
                sc.spawn(|| -> anyhow::Result<Response> {
                    request(&mut connect(&m.addr)?, "GET", "/kubelet")
                })
            })
            .collect();
        pulls
            .into_iter()
            .map(|h| h.join().expect("the download thread"))
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    for r in got {
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-length"), Some(want.len().to_string().as_str()));
        assert!(
            r.body == want,
            "the download differs from the file ({} of {} bytes)",
            r.body.len(),
            want.len()
        );
    }
    Ok(())
}
