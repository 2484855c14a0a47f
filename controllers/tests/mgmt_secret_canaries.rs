//! Secret canaries through a whole host run: a KKCluster whose hosts are reached as a non-root user with an
//! encrypted private key (`passphrase`) and password sudo (`sudoPassword`), with a private registry whose
//! credentials come from a Secret; the bootstrap command prints the registry's `hosts.toml` and the decoded
//! credentials, once whole and once cut by the host's output-tail limit, and fails. None of the credentials
//! (nor any 8-byte piece of them) may reach the manager's logs, events, or any object's status; the SSH
//! credentials reach no file on the host, and the registry credentials only root-only (0600) files.
//! A second run goes through a bastion with a password of its own and gives the workload cluster's kubeconfig
//! a bearer token, with the manager logging at trace level: neither reaches its log, events or statuses.
//! The manager runs as a separate process with exactly the ClusterRole of config/rbac.

mod common;

use std::{path::Path, time::Duration};

use anyhow::{Context, ensure};
use base64::Engine as _;
use common::*;
use serde_json::json;

const REGISTRY: &str = "registry.canary.test:5000";
const REGISTRY_USER: &str = "reg";
const REGISTRY_CANARY: &str = "canary-regpw-5b1e94d7a2";
const LEAK_END: &str = "capkk-leak-end";

/// Prints what a careless bootstrap command could: the registry's hosts.toml (the basic-auth token) and the
/// decoded `user:password`, arranged so that the host's cut of the output (the last 2048 bytes) starts in the
/// middle of one copy of the credentials and keeps another whole; then fails.
const LEAK_SCRIPT: &str = r#"f=$(ls /etc/containerd/certs.d/*/hosts.toml | head -n 1)
tok=$(sed -n 's/.*Basic \([A-Za-z0-9+/=]*\).*/\1/p' "$f" | head -n 1)
cred=$(printf '%s' "$tok" | base64 -d)
end=capkk-leak-end
h=$(wc -c < "$f")
l=${#cred}
n=$(( 2048 - (l - l / 2) - h - (l + 1) - (${#end} + 2) ))
head -c 3000 /dev/zero | tr '\0' x
printf '%s' "$cred"
head -c "$n" /dev/zero | tr '\0' y
cat "$f"
printf '%s\n' "$cred"
printf '\n%s\n' "$end"
exit 7
"#;

fn bootstrap_data() -> String {
    let body: String = LEAK_SCRIPT.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "#cloud-config\nwrite_files:\n- path: /usr/local/sbin/capkk-leak.sh\n  permissions: '0700'\n  content: |\n{body}runcmd:\n- sh /usr/local/sbin/capkk-leak.sh\n"
    )
}

/// Every 8-byte window of `s`: a cut secret must not survive in pieces either.
fn pieces(s: &str) -> Vec<String> {
    (0..=s.len().saturating_sub(8))
        .map(|i| s[i..i + 8].to_owned())
        .collect()
}

/// `(path inside the host, contents)` of every regular file under `root` (the host's overlay upper dir: all
/// the host wrote); output tails kept on the host are base64 and are decoded too.
fn host_files(root: &Path) -> anyhow::Result<Vec<(String, u32, Vec<u8>)>> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let ft = e.file_type()?;
            if ft.is_dir() {
                dirs.push(e.path());
            } else if ft.is_file() {
                let inner = format!("/{}", e.path().strip_prefix(root)?.display());
                let mode = e.metadata()?.permissions().mode() & 0o7777;
                let mut data = std::fs::read(e.path())?;
                if inner.ends_with(".tail")
                    && let Ok(d) = base64::engine::general_purpose::STANDARD.decode(data.trim_ascii())
                {
                    data = d;
                }
                out.push((inner, mode, data));
            }
        }
    }
    Ok(out)
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_credential_reaches_logs_status_events_or_host_files_even_cut_at_the_tail() -> anyhow::Result<()> {
    let Some((env, hosts)) = TestEnv::with_hosts("canary", "ctl-canary", 1).await? else {
        return Ok(());
    };
    let ns = env.ns.clone();
    let host = hosts.sb.hosts().remove(0);
    let creds = hosts.sb.credentials().clone();
    // The sandbox password is kkuser's login and sudo password and the private key's passphrase.
    let ssh_canary = creds.password.clone();
    let encrypted_key = std::fs::read_to_string(&creds.ed25519_key_with_passphrase)?;
    let key_line = encrypted_key.lines().nth(2).unwrap_or("-").to_owned();
    env.merge(
        "v1",
        "Secret",
        "ssh-auth",
        json!({"stringData": {
            "privateKey": encrypted_key,
            "passphrase": ssh_canary,
            "sudoPassword": ssh_canary,
        }}),
    )
    .await?;
    env.secret(
        "registry-auth",
        &[("username", REGISTRY_USER), ("password", REGISTRY_CANARY)],
    )
    .await?;
    let token =
        base64::engine::general_purpose::STANDARD.encode(format!("{REGISTRY_USER}:{REGISTRY_CANARY}"));
    env.bootstrap_data("leaky-data", &bootstrap_data()).await?;
    let mut kkc = kkcluster(
        &ns,
        "c",
        &hosts.inventory(),
        json!({
            "component": hosts.component,
            "registry": {"privateRegistry": REGISTRY, "auth": {"secretRef": {"name": "registry-auth"}}},
        }),
    );
    kkc["spec"]["nodes"]["auth"]["user"] = json!(capkk_sandbox::PASSWD_USER);
    env.apply(cluster(&ns, "c", json!({}))).await?;
    env.apply(kkc).await?;
    env.machine("c", "m", "worker", Some("leaky-data")).await?;
    let instance = format!("c.{}", host.info.name);

    let mut mgr = env.manager("manager", &["--ssh-connect-timeout=10s"])?;
    let failed = eventually(
        "the leaky bootstrap command fails (CommandFailed)",
        Duration::from_secs(240),
        || async {
            let i = env
                .get(INFRA_V, "KKInstance", &instance)
                .await?
                .unwrap_or_default();
            Ok((cond_state(&i, "Provisioned").1 == "CommandFailed").then_some(i))
        },
    )
    .await?;
    // The failure got this far through the host (so every phase ran as kkuser with the key and sudo),
    // and its output tail, cut on the host inside the credentials, reached the condition.
    let msg = condition(&failed, "Provisioned")
        .and_then(|c| c["message"].as_str())
        .unwrap_or("")
        .to_owned();
    ensure!(
        msg.contains("exited with 7") && msg.contains(LEAK_END) && msg.contains("<redacted>"),
        "failure message with the redacted tail: {msg}"
    );
    ensure!(
        host_files(&host.upper_dir())?
            .iter()
            .any(|(p, _, d)| p.ends_with("/hosts.toml") && contains(d, &token)),
        "the registry credentials reached the host (so the command could print them)"
    );
    // Let the manager write events and status about the failure, then stop it and check everything.
    tokio::time::sleep(Duration::from_secs(3)).await;
    mgr.terminate();
    let logs = vec![mgr.logs()];
    let mut canaries = vec![
        ssh_canary.clone(),
        key_line.clone(),
        REGISTRY_CANARY.to_owned(),
        token.clone(),
    ];
    canaries.extend(pieces(REGISTRY_CANARY));
    canaries.extend(pieces(&token));
    canaries.extend(pieces(&ssh_canary));
    let refs: Vec<&str> = canaries.iter().map(String::as_str).collect();
    env.assert_no_canary(&refs, &logs)
        .await
        .context("credentials in logs, events or status")?;

    // Files on the host: the SSH credentials nowhere; the registry's only in root-only files.
    let files = host_files(&host.upper_dir())?;
    ensure!(
        files
            .iter()
            .any(|(p, _, _)| p.starts_with("/var/lib/capkk/provisioning/")),
        "the provisioning journal is on the host"
    );
    for (path, mode, data) in &files {
        for c in [&ssh_canary, &key_line] {
            ensure!(!contains(data, c), "an SSH credential is in host file {path}");
        }
        let registry = contains(data, REGISTRY_CANARY) || contains(data, &token);
        ensure!(
            !registry || mode & 0o077 == 0,
            "host file {path} holds the registry credentials with mode {mode:o}"
        );
    }
    env.finish().await;
    Ok(())
}

/// The bastion's own password (set on the bastion for this test): nothing else knows it, and no 8-byte
/// piece of it occurs in a log by chance.
const BASTION_CANARY: &str = "Bq7xW2pz9Rk4mVt8Lf3";
/// The workload cluster kubeconfig's bearer token.
const TOKEN_CANARY: &str = "Tk3f8nYq6Hd1sZw5Lc0Jm";

/// A workload API server that refuses every request (401) and counts those that carried
/// `Authorization: Bearer <token>`.
async fn refusing_workload_api_server(
    token: &'static str,
) -> anyhow::Result<(u16, std::sync::Arc<std::sync::atomic::AtomicUsize>)> {
    use std::sync::{Arc, atomic::AtomicUsize, atomic::Ordering};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                let mut head = Vec::new();
                loop {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                    if head.windows(4).any(|w| w == b"\r\n\r\n") {
                        let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                        if text.contains(&format!("authorization: bearer {}", token.to_ascii_lowercase())) {
                            counter.fetch_add(1, Ordering::Relaxed);
                        }
                        head.clear();
                        let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#;
                        let resp = format!(
                            "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if conn.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    Ok((port, seen))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_bastion_password_and_the_workload_token_reach_no_log_at_trace_level_nor_any_event_or_status()
-> anyhow::Result<()> {
    use std::sync::atomic::Ordering;
    let Some((env, hosts)) = TestEnv::with_hosts("canary-b", "ctl-canary-b", 2).await? else {
        return Ok(());
    };
    let ns = env.ns.clone();
    let all = hosts.sb.hosts();
    let (bastion, node) = (&all[0], &all[1]);
    // The bastion takes root with a password of its own, which no node knows.
    bastion
        .sh_inside(&format!("echo 'root:{BASTION_CANARY}' | chpasswd"))
        .map_err(|e| anyhow::anyhow!("setting the bastion's password: {e}"))?;
    env.secret("bastion-auth", &[("password", BASTION_CANARY)])
        .await?;
    let (port, token_seen) = refusing_workload_api_server(TOKEN_CANARY).await?;
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: w\n  cluster:\n    server: http://127.0.0.1:{port}\n\
         users:\n- name: u\n  user:\n    token: {TOKEN_CANARY}\ncontexts:\n- name: w\n  context:\n    cluster: w\n    \
         user: u\ncurrent-context: w\n"
    );
    env.secret("c-kubeconfig", &[("value", &kubeconfig)]).await?;
    env.bootstrap_data("data", &common::sandbox::cloud_config(&[]))
        .await?;
    let mut kkc = kkcluster(
        &ns,
        "c",
        &[(node.info.name.clone(), node.address().to_owned(), 22)],
        json!({"component": hosts.component}),
    );
    kkc["spec"]["nodes"]["bastion"] = json!({
        "address": bastion.address(),
        "auth": {"user": "root", "secretRef": {"name": "bastion-auth"}},
    });
    env.apply(cluster(&ns, "c", json!({}))).await?;
    env.apply(kkc).await?;
    env.machine("c", "m", "worker", Some("data")).await?;

    // Every crate at its most verbose: the SSH client, the HTTP stacks, kube, the manager.
    let mut mgr = env.manager_logging("manager", &["--ssh-connect-timeout=10s"], "trace")?;
    eventually(
        "m provisioned through the bastion",
        Duration::from_secs(240),
        || async {
            let k = env.get(INFRA_V, "KKMachine", "m").await?.unwrap_or_default();
            Ok((k["status"]["initialization"]["provisioned"] == true).then_some(()))
        },
    )
    .await?;
    eventually(
        "the workload API server was asked with the kubeconfig's token",
        Duration::from_secs(60),
        || async { Ok((token_seen.load(Ordering::Relaxed) > 0).then_some(())) },
    )
    .await?;
    let bastion_log = bastion
        .sh_inside("cat /var/log/capkk-sshd.log")
        .map_err(|e| anyhow::anyhow!("the bastion's sshd log: {e}"))?;
    ensure!(
        bastion_log.contains("Accepted password for root"),
        "the manager logged in to the bastion with its password"
    );
    // Let the manager log, write events and status about the refusing workload cluster, then stop it.
    tokio::time::sleep(Duration::from_secs(5)).await;
    mgr.terminate();
    let logs = vec![mgr.logs()];
    ensure!(
        logs[0].contains(" TRACE "),
        "the manager logged at trace level ({} bytes of log)",
        logs[0].len()
    );
    let mut canaries = vec![BASTION_CANARY.to_owned(), TOKEN_CANARY.to_owned()];
    canaries.extend(pieces(BASTION_CANARY));
    canaries.extend(pieces(TOKEN_CANARY));
    let refs: Vec<&str> = canaries.iter().map(String::as_str).collect();
    env.assert_no_canary(&refs, &logs)
        .await
        .context("the bastion password or the workload token in logs, events or status")?;
    env.finish().await;
    Ok(())
}
