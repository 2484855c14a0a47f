//! The manager's flags, with environment fallbacks.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::Context as _;
use clap::{Parser, ValueEnum};

/// Log output format.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    capkk_api::parse_duration_seconds(s)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{s:?} is not a duration like 30s, 10m or 1h"))
}

/// Command-line flags of the manager.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "manager",
    version,
    about = "capkk-rs: Cluster API infrastructure provider for SSH hosts"
)]
pub struct Args {
    /// Kubeconfig of the management cluster (default: in-cluster config or $KUBECONFIG / ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "CAPKK_NAMESPACE")]
    pub namespace: Option<String>,
    /// Only reconcile objects labelled cluster.x-k8s.io/watch-filter=<value> (empty: all).
    #[arg(long, env = "CAPKK_WATCH_FILTER", default_value = "")]
    pub watch_filter: String,
    /// Address of the /metrics endpoint ("0" disables it).
    #[arg(long, env = "CAPKK_METRICS_BIND_ADDRESS", default_value = "127.0.0.1:8080")]
    pub metrics_bind_address: String,
    /// Address of the /healthz and /readyz endpoints ("0" disables them).
    #[arg(long, env = "CAPKK_HEALTH_PROBE_BIND_ADDRESS", default_value = ":8081")]
    pub health_probe_bind_address: String,
    /// Run only while holding the leader Lease.
    #[arg(long, env = "CAPKK_LEADER_ELECT", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the leader Lease (default: $POD_NAMESPACE, else --namespace, else capkk-system).
    #[arg(long, env = "CAPKK_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader Lease.
    #[arg(
        long,
        env = "CAPKK_LEADER_ELECTION_ID",
        default_value = "capkk-manager-leader"
    )]
    pub leader_election_id: String,
    /// Lease duration.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// Give up leadership when renewing fails this long.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub renew_deadline: Duration,
    /// Interval between lease attempts.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub retry_period: Duration,
    /// Hosts worked on at once (SSH host tasks).
    #[arg(long, env = "CAPKK_MAX_CONCURRENT_HOSTS", default_value_t = 10)]
    pub max_concurrent_hosts: usize,
    /// Hosts probed at once per KKCluster.
    #[arg(long, default_value_t = 8)]
    pub probe_concurrency: usize,
    /// Re-probe the inventory this often.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub probe_interval: Duration,
    /// Quarantine a host that stays unreachable this long while being reset on release.
    #[arg(long, env = "CAPKK_QUARANTINE_AFTER", default_value = "10m", value_parser = parse_duration)]
    pub quarantine_after: Duration,
    /// Bound on TCP connect + SSH handshake + authentication.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub ssh_connect_timeout: Duration,
    /// Controller-side cache of downloaded artifacts (content-addressed).
    #[arg(long, env = "CAPKK_ARTIFACT_CACHE_DIR", default_value_os_t = default_cache_dir())]
    pub artifact_cache_dir: PathBuf,
    /// Largest artifact (binary, archive, ISO) a download may bring into the cache, in bytes.
    #[arg(long, env = "CAPKK_MAX_ARTIFACT_BYTES", default_value_t = capkk_service::binary::cache::DEFAULT_MAX_ARTIFACT_BYTES)]
    pub max_artifact_bytes: u64,
    /// The only directory `privateKeyPath` keys may be read from; unset or empty (default) refuses
    /// `privateKeyPath` (a path in a tenant's object must not read the manager's files).
    #[arg(long, env = "CAPKK_PRIVATE_KEY_DIR")]
    pub private_key_dir: Option<PathBuf>,
    /// Log format.
    #[arg(long, env = "CAPKK_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Identity in the leader Lease (default: $POD_NAME, else hostname_pid).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
}

fn default_cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir)
        .join("capkk-rs/artifacts")
}

/// Parse `host:port`, `:port` (all interfaces) or `0` (disabled).
pub(super) fn parse_bind(s: &str) -> anyhow::Result<Option<SocketAddr>> {
    let s = s.trim();
    if s.is_empty() || s == "0" {
        return Ok(None);
    }
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_owned()
    };
    Ok(Some(full.parse().with_context(|| {
        format!("bind address {s:?} is not host:port")
    })?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_addresses() {
        assert_eq!(parse_bind(":8081").unwrap().unwrap().to_string(), "0.0.0.0:8081");
        assert_eq!(
            parse_bind("127.0.0.1:8080").unwrap().unwrap().to_string(),
            "127.0.0.1:8080"
        );
        assert!(parse_bind("0").unwrap().is_none());
        assert!(parse_bind("nonsense").is_err());
    }

    #[test]
    fn flags_parse_with_defaults() {
        let a = Args::try_parse_from([
            "manager",
            "--leader-elect",
            "--max-concurrent-hosts=3",
            "--quarantine-after=20s",
        ])
        .unwrap();
        assert!(a.leader_elect);
        assert_eq!(a.max_concurrent_hosts, 3);
        assert_eq!(a.quarantine_after, Duration::from_secs(20));
        assert_eq!(a.log_format, LogFormat::Text);
        assert_eq!(
            a.private_key_dir, None,
            "privateKeyPath is off unless the operator names a directory"
        );
        assert_eq!(
            a.max_artifact_bytes,
            capkk_service::binary::cache::DEFAULT_MAX_ARTIFACT_BYTES
        );
        let a = Args::try_parse_from([
            "manager",
            "--private-key-dir=/etc/capkk/keys",
            "--max-artifact-bytes=1024",
        ])
        .unwrap();
        assert_eq!(a.private_key_dir, Some(PathBuf::from("/etc/capkk/keys")));
        assert_eq!(a.max_artifact_bytes, 1024);
        let a = Args::try_parse_from(["manager", "--leader-elect=false", "--log-format=json"]).unwrap();
        assert!(!a.leader_elect);
        assert_eq!(a.log_format, LogFormat::Json);
        assert!(Args::try_parse_from(["manager", "--quarantine-after=soon"]).is_err());
    }
}
