//! The release as a user installs it: `make release`'s output served over plain HTTP on 127.0.0.1 and registered
//! with clusterctl from another directory, under a home directory of its own, by the release's
//! `clusterctl-kubekey.sh`; then the real clusterctl (the management plane's, v1.14.2) resolves, describes and lists
//! it. Also: no file of the release names this machine's paths, the image archive holds the image the components
//! name, and `make clusterctl-register` is what makes `kubekey` ours (KubeSphere's CAPKK without it).
//!
//! Run by `make release-test`, which builds the release first and names it in `CAPKK_RELEASE_OUT`,
//! `CAPKK_RELEASE_VERSION` and the clusterctl binary in `CAPKK_CLUSTERCTL`; without them the tests fail saying
//! so. Nothing reaches the network: the HTTP server and a stand-in Kubernetes API (for `init list-images`, which
//! insists on a cluster) listen on 127.0.0.1, and every clusterctl runs with a dead HTTPS proxy and the version
//! check off, so resolving KubeSphere's built-in entry over GitHub would fail instead of fetching.

use std::{
    collections::{BTreeMap, BTreeSet},
    io::{BufRead, BufReader, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::Arc,
};

/// The URL `clusterctl config repositories` shows for clusterctl's built-in `kubekey` (KubeSphere's CAPKK).
const BUILT_IN_KUBEKEY: &str = "https://github.com/kubesphere/kubekey/releases/latest/";

struct Release {
    out: PathBuf,
    version: String,
    clusterctl: PathBuf,
}

fn release() -> Release {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: this test checks the output of `make release`; run it with `make release-test`")
        })
    };
    let out = PathBuf::from(var("CAPKK_RELEASE_OUT"));
    assert!(
        out.is_absolute() && out.is_dir(),
        "CAPKK_RELEASE_OUT {} is not an absolute directory",
        out.display()
    );
    let clusterctl = PathBuf::from(var("CAPKK_CLUSTERCTL"));
    assert!(
        clusterctl.is_file(),
        "CAPKK_CLUSTERCTL {} is not a file (make mgmt-bin)",
        clusterctl.display()
    );
    Release {
        out,
        version: var("CAPKK_RELEASE_VERSION"),
        clusterctl,
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the source tree")
}

/// What a handler answers: status, content type, body.
type Reply = (u16, &'static str, Vec<u8>);

/// A plain HTTP/1.1 server on 127.0.0.1 (one thread per connection, `Connection: close`) answering GETs with
/// `handler(path)`. It lives as long as the test binary.
fn serve(handler: impl Fn(&str) -> Reply + Send + Sync + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
    let addr = listener.local_addr().unwrap();
    let handler = Arc::new(handler);
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let handler = handler.clone();
            std::thread::spawn(move || answer(conn, &*handler));
        }
    });
    addr
}

fn answer(conn: TcpStream, handler: &dyn Fn(&str) -> Reply) {
    let mut reader = BufReader::new(conn.try_clone().expect("clone"));
    let mut request = String::new();
    if reader.read_line(&mut request).is_err() {
        return;
    }
    // The headers, up to the empty line (GETs have no body).
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
        line.clear();
    }
    let path = request.split_whitespace().nth(1).unwrap_or("/");
    let path = path.split('?').next().unwrap_or(path);
    let (code, ctype, body) = if request.starts_with("GET ") {
        handler(path)
    } else {
        (405, "text/plain", b"only GET".to_vec())
    };
    let mut conn = conn;
    let _ = write!(
        conn,
        "HTTP/1.1 {code} X\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = conn.write_all(&body);
}

/// The release directory as a static web site; `tamper` replaces one file's content on the way out.
fn serve_release(root: PathBuf, tamper: Option<(&'static str, &'static [u8])>) -> SocketAddr {
    serve(move |path| {
        let rel = path.trim_start_matches('/');
        if let Some((p, body)) = tamper
            && p == rel
        {
            return (200, "application/octet-stream", body.to_vec());
        }
        if rel.split('/').any(|c| c == ".." || c.is_empty()) {
            return (404, "text/plain", b"not found".to_vec());
        }
        match std::fs::read(root.join(rel)) {
            Ok(bytes) => (200, "application/octet-stream", bytes),
            Err(_) => (404, "text/plain", b"not found".to_vec()),
        }
    })
}

/// What `clusterctl init list-images` asks of a cluster, answered as an empty cluster (an empty provider inventory,
/// so clusterctl adds the core provider) that already runs cert-manager (so it lists no cert-manager images and
/// fetches no cert-manager manifest): discovery of core/v1, apiextensions and clusterctl's inventory group, the
/// empty list of Providers, the cert-manager Namespace; every other object is NotFound.
fn serve_api_stand_in() -> SocketAddr {
    serve(|path| {
        let body = match path {
            "/api" => serde_json::json!({"kind": "APIVersions", "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
            "/apis" => serde_json::json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{
                "name": "apiextensions.k8s.io",
                "versions": [{"groupVersion": "apiextensions.k8s.io/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "apiextensions.k8s.io/v1", "version": "v1"}}, {
                "name": "clusterctl.cluster.x-k8s.io",
                "versions": [{"groupVersion": "clusterctl.cluster.x-k8s.io/v1alpha3", "version": "v1alpha3"}],
                "preferredVersion": {"groupVersion": "clusterctl.cluster.x-k8s.io/v1alpha3", "version": "v1alpha3"}}]}),
            "/apis/clusterctl.cluster.x-k8s.io/v1alpha3" => serde_json::json!({"kind": "APIResourceList",
                "apiVersion": "v1", "groupVersion": "clusterctl.cluster.x-k8s.io/v1alpha3", "resources": [
                {"name": "providers", "singularName": "provider", "namespaced": true, "kind": "Provider",
                 "verbs": ["get", "list"]}]}),
            // The inventory: no provider installed (clusterctl retries for seconds when it cannot list it).
            "/apis/clusterctl.cluster.x-k8s.io/v1alpha3/providers" => {
                serde_json::json!({"kind": "ProviderList",
                "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3", "metadata": {"resourceVersion": "1"},
                "items": []})
            }
            "/api/v1" => serde_json::json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                {"name": "namespaces", "singularName": "namespace", "namespaced": false, "kind": "Namespace",
                 "verbs": ["get", "list"]}]}),
            "/apis/apiextensions.k8s.io/v1" => {
                serde_json::json!({"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": "apiextensions.k8s.io/v1", "resources": [
                {"name": "customresourcedefinitions", "singularName": "customresourcedefinition",
                 "namespaced": false, "kind": "CustomResourceDefinition", "verbs": ["get", "list"]}]})
            }
            "/api/v1/namespaces/cert-manager" => serde_json::json!({"kind": "Namespace", "apiVersion": "v1",
                "metadata": {"name": "cert-manager", "uid": "1"}, "status": {"phase": "Active"}}),
            _ => {
                let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "NotFound", "code": 404, "message": format!("{path} not found")});
                return (404, "application/json", status.to_string().into_bytes());
            }
        };
        (200, "application/json", body.to_string().into_bytes())
    })
}

/// A user's machine: a home directory of its own and a working directory outside the release and the source tree.
struct Machine {
    base: PathBuf,
    home: PathBuf,
    work: PathBuf,
    path: String,
}

impl Machine {
    fn new(name: &str, r: &Release) -> Self {
        let base = std::env::temp_dir().join(format!("capkk-release-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let (home, work) = (base.join("home"), base.join("work"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        let path = format!(
            "{}:{}",
            r.clusterctl.parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Machine {
            base,
            home,
            work,
            path,
        }
    }

    fn config(&self) -> PathBuf {
        self.home.join(".config/cluster-api/clusterctl.yaml")
    }

    /// Runs `program args` in the working directory with this machine's environment.
    fn run(&self, program: &str, args: &[&str]) -> Output {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(&self.work)
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .env_remove("XDG_DATA_HOME")
            .env_remove("KUBECONFIG")
            .env_remove("MAKEFLAGS")
            .env_remove("MAKELEVEL")
            .env("PATH", &self.path)
            .env("CLUSTERCTL_DISABLE_VERSIONCHECK", "true")
            // A dead proxy for everything but 127.0.0.1: a fetch from GitHub fails at once instead of leaving.
            .env("HTTPS_PROXY", "http://127.0.0.1:9")
            .env("https_proxy", "http://127.0.0.1:9")
            .env("HTTP_PROXY", "http://127.0.0.1:9")
            .env("http_proxy", "http://127.0.0.1:9")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost");
        cmd.output().unwrap_or_else(|e| panic!("{program}: {e}"))
    }

    /// `run` that must succeed; its stdout.
    fn ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.run(program, args);
        assert!(
            out.status.success(),
            "{program} {args:?} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        eprintln!(
            "$ {program} {}\n{text}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    /// The URL clusterctl resolves the infrastructure provider `kubekey` to (`clusterctl config repositories`,
    /// which reads the configuration and fetches nothing).
    fn kubekey_url(&self) -> String {
        let out = self.run("clusterctl", &["config", "repositories"]);
        assert!(
            out.status.success(),
            "clusterctl config repositories: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let table = String::from_utf8_lossy(&out.stdout);
        let rows: Vec<&str> = table
            .lines()
            .filter(|l| l.starts_with("kubekey ") || l.starts_with("cluster-api "))
            .collect();
        eprintln!(
            "$ clusterctl config repositories | grep -E '^(kubekey|cluster-api) '\n{}",
            rows.join("\n")
        );
        repositories(&table)
            .remove(&("kubekey".to_owned(), "InfrastructureProvider".to_owned()))
            .unwrap_or_else(|| panic!("no kubekey InfrastructureProvider in:\n{table}"))
    }

    /// A core provider repository of its own (`init list-images` adds the core provider to an empty cluster; the
    /// built-in one is on GitHub) and the user's configuration naming it, with an image override of theirs.
    fn user_config_with_local_core(&self) -> String {
        let core = self.base.join("core/cluster-api/v1.14.2");
        std::fs::create_dir_all(&core).unwrap();
        std::fs::write(
            core.join("core-components.yaml"),
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: capi-system\n---\napiVersion: apps/v1\n\
             kind: Deployment\nmetadata:\n  name: capi-controller-manager\n  namespace: capi-system\nspec:\n  \
             selector:\n    matchLabels: {app: capi}\n  template:\n    metadata:\n      labels: {app: capi}\n    \
             spec:\n      containers:\n        - name: manager\n          \
             image: registry.k8s.io/cluster-api/cluster-api-controller:v1.14.2\n",
        )
        .unwrap();
        std::fs::write(
            core.join("metadata.yaml"),
            "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n  \
             - major: 1\n    minor: 14\n    contract: v1beta2\n",
        )
        .unwrap();
        let text = format!(
            "# the user's own clusterctl configuration, written before ours\nproviders:\n  - name: cluster-api\n    \
             type: CoreProvider\n    url: file://{}/core-components.yaml\nimages:\n  cluster-api:\n    \
             repository: mirror.example.test/cluster-api\n",
            core.display()
        );
        std::fs::create_dir_all(self.config().parent().unwrap()).unwrap();
        std::fs::write(self.config(), &text).unwrap();
        text
    }

    fn kubeconfig(&self, api: SocketAddr) -> String {
        let path = self.base.join("stand-in.kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{api}\n\
                 users:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\n\
                 current-context: c\n"
            ),
        )
        .unwrap();
        path.to_str().unwrap().to_owned()
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }
}

/// `clusterctl config repositories` as (name, type) -> URL.
fn repositories(table: &str) -> BTreeMap<(String, String), String> {
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.len() >= 3).then(|| ((cols[0].to_owned(), cols[1].to_owned()), cols[2].to_owned()))
        })
        .collect()
}

/// The one image of the components (the manager's).
fn components_image(r: &Release) -> String {
    let comp = r.out.join(format!(
        "infrastructure-kubekey/{}/infrastructure-components.yaml",
        r.version
    ));
    let text = std::fs::read_to_string(&comp).expect("infrastructure-components.yaml");
    let images: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("image: "))
        .collect();
    assert_eq!(images.len(), 1, "the components name one image: {images:?}");
    images[0].to_owned()
}

/// The reference the release's image archive was saved under (its index.json annotation).
fn archive_reference(r: &Release) -> String {
    let archive = r.out.join(format!("capkk-manager-{}.oci.tar", r.version));
    let out = Command::new("tar")
        .arg("-xOf")
        .arg(&archive)
        .arg("index.json")
        .output()
        .expect("tar");
    assert!(
        out.status.success(),
        "tar -xOf {} index.json: {}",
        archive.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let index: serde_json::Value = serde_json::from_slice(&out.stdout).expect("index.json is JSON");
    index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
        .as_str()
        .expect("the archive names its image")
        .to_owned()
}

/// `clusterctl generate provider --describe`'s "Images:" list.
fn described_images(describe: &str) -> Vec<String> {
    describe
        .lines()
        .skip_while(|l| !l.starts_with("Images:"))
        .skip(1)
        .map_while(|l| l.trim().strip_prefix("- ").map(str::to_owned))
        .collect()
}

#[test]
fn a_served_release_registers_from_another_directory_and_clusterctl_resolves_describes_and_lists_it() {
    let r = release();
    let image = components_image(&r);
    let web = serve_release(r.out.clone(), None);
    let api = serve_api_stand_in();
    let m = Machine::new("served", &r);
    let users = m.user_config_with_local_core();

    // Before: `kubekey` is clusterctl's built-in entry, KubeSphere's CAPKK, and the script's check says so.
    assert_eq!(
        m.kubekey_url(),
        BUILT_IN_KUBEKEY,
        "without our entry kubekey is KubeSphere's"
    );
    m.ok(
        "curl",
        &[
            "-fsS",
            "-o",
            "clusterctl-kubekey.sh",
            &format!("http://{web}/clusterctl-kubekey.sh"),
        ],
    );
    let check = m.run("bash", &["clusterctl-kubekey.sh", "--check"]);
    assert!(!check.status.success(), "--check passes before the registration");
    assert!(
        String::from_utf8_lossy(&check.stderr).contains(BUILT_IN_KUBEKEY),
        "--check names what kubekey is now"
    );

    // The registration: the repository downloaded from the server into the user's data directory.
    m.ok(
        "bash",
        &["clusterctl-kubekey.sh", "--from", &format!("http://{web}/")],
    );
    let repo = m.home.join(".local/share/capkk-rs/clusterctl");
    let ours = format!("file://{}/infrastructure-kubekey/latest/", repo.display());
    assert_eq!(
        m.kubekey_url(),
        ours,
        "after the registration kubekey is the downloaded repository"
    );
    m.ok("bash", &["clusterctl-kubekey.sh", "--check"]);
    for e in std::fs::read_dir(r.out.join("infrastructure-kubekey").join(&r.version)).unwrap() {
        let name = e.unwrap().file_name();
        let rel = Path::new("infrastructure-kubekey").join(&r.version).join(&name);
        assert_eq!(
            std::fs::read(repo.join(&rel)).ok(),
            std::fs::read(r.out.join(&rel)).ok(),
            "{}",
            rel.display()
        );
    }
    // The user's file is kept: their lines are all still there, in order, around our entry.
    let config = std::fs::read_to_string(m.config()).unwrap();
    let mut rest = config.lines();
    for l in users.lines() {
        assert!(
            rest.any(|c| c == l),
            "the user's line {l:?} is gone or moved:\n{config}"
        );
    }
    let table = m.run("clusterctl", &["config", "repositories"]).stdout;
    assert!(
        repositories(&String::from_utf8_lossy(&table))
            .contains_key(&("cluster-api".to_owned(), "CoreProvider".to_owned())),
        "the user's provider entry is still read"
    );

    // What the release ships, without a cluster: the provider, its version, variables and the image.
    let describe = m.ok(
        "clusterctl",
        &[
            "generate",
            "provider",
            "--infrastructure",
            "kubekey",
            "--describe",
        ],
    );
    // clusterctl shows the repository's directory, without "latest/".
    let shown = ours.strip_suffix("latest/").unwrap();
    assert!(
        describe.contains(&format!("URL:                {shown}\n")),
        "{describe}"
    );
    assert!(
        describe.contains(&format!("Version:            {}", r.version)),
        "{describe}"
    );
    assert_eq!(described_images(&describe), vec![image.clone()], "{describe}");

    // What `clusterctl init` would pull (the stand-in cluster: empty, cert-manager already there).
    let kc = m.kubeconfig(api);
    let list = [
        "init",
        "list-images",
        "--infrastructure",
        "kubekey",
        "--bootstrap",
        "-",
        "--control-plane",
        "-",
    ];
    let images = m.ok("clusterctl", &[&list[..], &["--kubeconfig", &kc]].concat());
    assert_eq!(
        images.lines().collect::<BTreeSet<_>>(),
        BTreeSet::from([
            "mirror.example.test/cluster-api/cluster-api-controller:v1.14.2",
            image.as_str()
        ]),
        "init list-images: the user's core provider (their override) and our manager"
    );

    // The user's registry: clusterctl's image override, written by the same script.
    m.ok(
        "bash",
        &[
            "clusterctl-kubekey.sh",
            "--from",
            &format!("http://{web}/"),
            "--image-repository",
            "registry.example.test:5000/capkk",
        ],
    );
    let tag = image.rsplit_once(':').expect("a tagged image").1;
    let pushed = format!("registry.example.test:5000/capkk/capkk-manager:{tag}");
    let images = m.ok("clusterctl", &[&list[..], &["--kubeconfig", &kc]].concat());
    assert!(
        images.lines().any(|l| l == pushed),
        "list-images after --image-repository: {images}"
    );
    let describe = m.ok(
        "clusterctl",
        &[
            "generate",
            "provider",
            "--infrastructure",
            "kubekey",
            "--describe",
        ],
    );
    assert_eq!(described_images(&describe), vec![pushed], "{describe}");
    assert_eq!(m.kubekey_url(), ours, "a second run keeps one entry");
    assert_eq!(
        std::fs::read_to_string(m.config())
            .unwrap()
            .matches("name: kubekey")
            .count(),
        1
    );

    // Nothing the user now has names the build box.
    for f in walk(&m.home) {
        let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned();
        assert!(
            !text.contains(r.out.to_str().unwrap()),
            "{} names the release directory",
            f.display()
        );
    }
}

#[test]
fn a_file_that_does_not_match_the_release_checksums_is_refused() {
    let r = release();
    let tampered = Box::leak(format!("infrastructure-kubekey/{}/metadata.yaml", r.version).into_boxed_str());
    let web = serve_release(r.out.clone(), Some((tampered, b"releaseSeries: []\n")));
    let m = Machine::new("tampered", &r);
    m.ok(
        "curl",
        &[
            "-fsS",
            "-o",
            "clusterctl-kubekey.sh",
            &format!("http://{web}/clusterctl-kubekey.sh"),
        ],
    );
    let out = m.run(
        "bash",
        &["clusterctl-kubekey.sh", "--from", &format!("http://{web}/")],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a tampered metadata.yaml was accepted");
    assert!(err.contains("metadata.yaml does not match"), "{err}");
    assert!(!m.config().exists(), "the configuration was written all the same");
    assert!(
        !m.home
            .join(format!(
                ".local/share/capkk-rs/clusterctl/infrastructure-kubekey/{}",
                r.version
            ))
            .exists(),
        "the tampered repository was kept"
    );
}

#[test]
fn make_clusterctl_register_makes_kubekey_ours_and_without_it_kubekey_is_kubesphere_s() {
    let r = release();
    let m = Machine::new("make", &r);
    assert_eq!(m.kubekey_url(), BUILT_IN_KUBEKEY, "a machine without our entry");
    let root = repo_root();
    m.ok(
        "make",
        &[
            "-C",
            root.to_str().unwrap(),
            "--no-print-directory",
            "clusterctl-register",
            &format!("OUT={}", r.out.display()),
        ],
    );
    assert_eq!(
        m.kubekey_url(),
        format!("file://{}/infrastructure-kubekey/latest/", r.out.display()),
        "after make clusterctl-register"
    );
    let other = Machine::new("make-none", &r);
    assert_eq!(other.kubekey_url(), BUILT_IN_KUBEKEY, "another home without it");
}

#[test]
fn no_file_of_the_release_names_the_build_box_and_the_archive_holds_the_image_the_components_name() {
    let r = release();
    let root = repo_root();
    let home = std::env::var("HOME").unwrap_or_default();
    let mut names = vec![
        r.out.to_str().unwrap().to_owned(),
        root.to_str().unwrap().to_owned(),
    ];
    if home.len() > 1 {
        names.push(format!("{home}/"));
    }
    let files = walk(&r.out);
    assert!(
        files.iter().any(|f| f.ends_with("clusterctl-kubekey.sh")),
        "the release has its registration script"
    );
    assert!(
        !r.out.join("clusterctl.yaml").exists(),
        "a release has no clusterctl.yaml (it would name this machine)"
    );
    for f in files
        .iter()
        .filter(|f| !f.to_string_lossy().ends_with(".oci.tar"))
    {
        let text = String::from_utf8_lossy(&std::fs::read(f).unwrap()).into_owned();
        for n in &names {
            assert!(!text.contains(n.as_str()), "{} names {n}", f.display());
        }
    }
    // The image the release ships is the image it built and saved.
    let image = components_image(&r);
    assert!(!image.contains("${"), "the image is a literal reference: {image}");
    assert_eq!(
        archive_reference(&r),
        image,
        "the archive holds the components' image"
    );
    // The shipped default (config/default) is the tag `make release` builds by default: VERSION's.
    let makefile = std::fs::read_to_string(root.join("Makefile")).unwrap();
    let version = makefile
        .lines()
        .find_map(|l| l.strip_prefix("VERSION ?= "))
        .expect("Makefile: VERSION ?=");
    let patch = std::fs::read_to_string(root.join("config/default/manager_args_patch.yaml")).unwrap();
    assert!(
        patch.contains(&format!("value: ghcr.io/capkk-rs/capkk-manager:{version}\n")),
        "config/default's image is not ghcr.io/capkk-rs/capkk-manager:{version}"
    );
    assert!(
        makefile.contains("RELEASE_IMG ?= ghcr.io/capkk-rs/capkk-manager:$(VERSION)"),
        "make release builds ghcr.io/capkk-rs/capkk-manager:$(VERSION) by default"
    );
}

/// README's provider upgrade: a later version built into the same release directory (`make release-manifests
/// VERSION=<next>`) sits beside the first; the registered `latest` URL makes clusterctl take it by default and
/// still find the first by name, which is what `clusterctl upgrade plan` compares.
#[test]
fn a_later_version_beside_the_first_is_the_one_clusterctl_takes() {
    let r = release();
    let m = Machine::new("next", &r);
    let out = m.base.join("release");
    let repo = Path::new("infrastructure-kubekey");
    std::fs::create_dir_all(out.join(repo)).unwrap();
    let status = Command::new("cp")
        .arg("-a")
        .arg(r.out.join(repo).join(&r.version))
        .arg(out.join(repo))
        .status()
        .unwrap();
    assert!(status.success(), "copying the release");
    let (base, patch) = r.version.rsplit_once('.').expect("vX.Y.Z");
    let next = format!("{base}.{}", patch.parse::<u32>().expect("a patch number") + 1);
    let image = components_image(&r);
    let next_image = format!("{}:{next}", image.rsplit_once(':').unwrap().0);
    let script = repo_root().join("test/release/release-manifests.sh");
    let kubectl = r.clusterctl.with_file_name("kubectl");
    let built = Command::new(&script)
        .args([out.to_str().unwrap(), &next, &next_image])
        .env("KUBECTL", &kubectl)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "release-manifests.sh {next}: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    m.ok("bash", &[out.join("clusterctl-kubekey.sh").to_str().unwrap()]);
    let describe = m.ok(
        "clusterctl",
        &[
            "generate",
            "provider",
            "--infrastructure",
            "kubekey",
            "--describe",
        ],
    );
    assert!(
        describe.contains(&format!("Version:            {next}\n")),
        "{describe}"
    );
    assert_eq!(described_images(&describe), vec![next_image]);
    let first = format!("kubekey:{}", r.version);
    let describe = m.ok(
        "clusterctl",
        &["generate", "provider", "--infrastructure", &first, "--describe"],
    );
    assert_eq!(described_images(&describe), vec![image], "{describe}");
}

/// The registration edits whatever clusterctl configuration the user has, keeping it: the shapes of `providers:`
/// YAML allows (indented or not, empty, `[]`), the legacy `~/.cluster-api/` location, and a rerun. A `kubekey`
/// entry of the user's own, or a flow-style list, is refused with the file untouched. clusterctl reads every result.
#[test]
fn the_registration_merges_into_the_configuration_the_user_has() {
    let r = release();
    let script = r.out.join("clusterctl-kubekey.sh");
    let script = script.to_str().unwrap();
    let ours = format!("file://{}/infrastructure-kubekey/latest/", r.out.display());
    let other = "  url: file:///opt/x/infrastructure-other/v1.0.0/infrastructure-components.yaml\n  type: InfrastructureProvider\n";
    let accepted = [
        (
            "indented",
            format!(
                "providers:\n  - name: other\n  {}",
                other.replace("\n  ", "\n    ")
            ),
        ),
        (
            "unindented",
            format!(
                "# mine\nproviders:\n- name: other\n{other}images:\n  all:\n    repository: mirror.example.test\n"
            ),
        ),
        ("empty-list", "providers: []\nimages: {}\n".to_owned()),
        (
            "null-key",
            "providers:\nimages:\n  all:\n    repository: mirror.example.test\n".to_owned(),
        ),
        (
            "no-providers",
            "images:\n  all:\n    repository: mirror.example.test\n".to_owned(),
        ),
    ];
    for (name, text) in accepted {
        let m = Machine::new(&format!("merge-{name}"), &r);
        std::fs::create_dir_all(m.config().parent().unwrap()).unwrap();
        std::fs::write(m.config(), &text).unwrap();
        m.ok("bash", &[script]);
        m.ok("bash", &[script]);
        assert_eq!(m.kubekey_url(), ours, "{name}");
        let after = std::fs::read_to_string(m.config()).unwrap();
        assert_eq!(
            after.matches("name: kubekey").count(),
            1,
            "{name}: one entry after two runs:\n{after}"
        );
        if text.contains("name: other") {
            let table = String::from_utf8_lossy(&m.run("clusterctl", &["config", "repositories"]).stdout)
                .into_owned();
            assert!(
                table.lines().any(|l| l.starts_with("other ")),
                "{name}: the user's provider is gone:\n{after}"
            );
        }
        let backup = std::fs::read_to_string(m.config().with_extension("yaml.capkk-rs.bak")).unwrap();
        assert_eq!(backup, text, "{name}: the backup is the user's file");
    }

    // The legacy location is the one clusterctl reads when it is the only one: written there.
    let m = Machine::new("merge-legacy", &r);
    let legacy = m.home.join(".cluster-api/clusterctl.yaml");
    std::fs::create_dir_all(legacy.parent().unwrap()).unwrap();
    std::fs::write(&legacy, "images:\n  all:\n    repository: mirror.example.test\n").unwrap();
    m.ok("bash", &[script]);
    assert!(
        !m.config().exists(),
        "a second configuration would hide the user's ~/.cluster-api one"
    );
    assert!(
        std::fs::read_to_string(&legacy)
            .unwrap()
            .contains(&ours[..ours.len() - 1])
    );
    assert_eq!(m.kubekey_url(), ours, "legacy");

    let refused = [
        (
            "hand-written",
            "providers:\n  - name: kubekey\n    type: InfrastructureProvider\n    url: https://github.com/kubesphere/kubekey/releases/latest/infrastructure-components.yaml\n",
            "already names a provider",
        ),
        (
            "flow",
            "providers: [{name: other, type: InfrastructureProvider, url: \"file:///opt/x/infrastructure-other/v1.0.0/infrastructure-components.yaml\"}]\n",
            "flow style",
        ),
    ];
    for (name, text, why) in refused {
        let m = Machine::new(&format!("merge-{name}"), &r);
        std::fs::create_dir_all(m.config().parent().unwrap()).unwrap();
        std::fs::write(m.config(), text).unwrap();
        let out = m.run("bash", &[script]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(why), "{name}: {err}");
        assert_eq!(
            std::fs::read_to_string(m.config()).unwrap(),
            text,
            "{name}: the file was changed"
        );
    }
}

/// Every file under `dir`, recursively.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}
