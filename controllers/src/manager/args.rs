//! The manager's flags, with environment fallbacks.
//!
//! Besides our own names, the manager accepts the flags the Cluster API Operator writes from an
//! `InfrastructureProvider`'s `spec.manager` and those CAPI's providers conventionally take
//! (`--metrics-bind-addr`, `--health-addr`, `--leader-elect-*`, `--sync-period`, `--v`, `--diagnostics-address`,
//! `--<kind>-concurrency`, ...). Each either means what it means there or is listed by [`Args::ignored`],
//! which the manager logs at startup: an accepted flag is never dropped silently.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use anyhow::Context as _;
use capkk_executor::address::AddressPolicy;
use capkk_service::binary::{AllowEntry, Cidr, DownloadPolicy};
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

fn parse_host_alias(s: &str) -> Result<(String, std::net::IpAddr), String> {
    let (name, ip) = s.split_once('=').ok_or_else(|| format!("{s:?} is not NAME=IP"))?;
    let name = name.trim().to_ascii_lowercase();
    if !capkk_api::is_dns_subdomain(&name) {
        return Err(format!("{name:?} (in {s:?}) is not a DNS name"));
    }
    let ip = ip
        .trim()
        .parse()
        .map_err(|_| format!("{ip:?} (in {s:?}) is not an IP address"))?;
    Ok((name, ip))
}

/// `--download-deny-cidr`'s and `--ssh-deny-cidr`'s default: kubeadm's default Service range and kind's
/// default Pod range.
pub(crate) const DEFAULT_DOWNLOAD_DENY_CIDRS: [&str; 2] = ["10.96.0.0/12", "10.244.0.0/16"];

fn parse_deny_cidr(s: &str) -> Result<Option<Cidr>, String> {
    if s.trim().is_empty() {
        Ok(None)
    } else {
        s.parse().map(Some)
    }
}

fn parse_cidr(s: &str) -> Result<Cidr, String> {
    s.parse()
}

fn parse_allow(s: &str) -> Result<AllowEntry, String> {
    s.parse()
}

/// `--max-concurrent-hosts-per-namespace`'s default: the whole bound for a manager of one namespace, else
/// three quarters of it (rounded down) and at least one slot less than the whole when it has more than one.
pub(crate) fn default_hosts_per_namespace(max: usize, one_namespace: bool) -> usize {
    let max = max.max(1);
    if one_namespace || max == 1 {
        max
    } else {
        (max * 3 / 4).clamp(1, max - 1)
    }
}

/// Command-line flags of the manager.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "manager",
    version,
    about = "capkk-rs: Cluster API infrastructure provider for SSH hosts",
    // A flag given twice takes its last value, as in Go's flag package: the Operator appends its args to
    // the manifest's (`--leader-elect` then `--leader-elect=true`).
    args_override_self = true
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
    /// Serve /metrics here as plain HTTP without authentication ("0" disables /metrics). Given, it wins over
    /// --diagnostics-address, which is then not served (CAPI's deprecated --metrics-bind-addr did the same).
    /// Alias: --metrics-bind-addr.
    #[arg(long, alias = "metrics-bind-addr", env = "CAPKK_METRICS_BIND_ADDRESS")]
    pub metrics_bind_address: Option<String>,
    /// The diagnostics endpoint, CAPI's convention: /metrics over HTTPS with a self-signed certificate made at
    /// start, every request authenticated by a TokenReview of its bearer token and authorized by a
    /// SubjectAccessReview (non-resource URL, verb from the method): 401 or 403 otherwise ("0" disables it)
    /// [default: :8443].
    #[arg(long)]
    pub diagnostics_address: Option<String>,
    /// Serve --diagnostics-address as plain HTTP without authentication (CAPI's opt-out).
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub insecure_diagnostics: bool,
    /// Minimum TLS version of the HTTPS endpoints (the diagnostics endpoint, the runtime extension's hooks),
    /// CAPI's flag: VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13. Versions below 1.2 are never
    /// offered, so the first two mean VersionTLS12.
    #[arg(long, default_value = "VersionTLS12")]
    pub tls_min_version: String,
    /// Comma-separated cipher suites of the HTTPS endpoints for TLS 1.2, CAPI's flag with Go's (IANA) names,
    /// e.g. TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 (empty: the defaults). TLS 1.3's suites are not
    /// configurable; their names are accepted. A name this manager does not support is refused at start.
    #[arg(long, value_delimiter = ',')]
    pub tls_cipher_suites: Vec<String>,
    /// Address of the /healthz and /readyz endpoints ("0" disables them). Alias: --health-addr.
    #[arg(
        long,
        alias = "health-addr",
        env = "CAPKK_HEALTH_PROBE_BIND_ADDRESS",
        default_value = ":8081"
    )]
    pub health_probe_bind_address: String,
    /// Run only while holding the leader Lease.
    #[arg(long, env = "CAPKK_LEADER_ELECT", default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the leader Lease (default: $POD_NAMESPACE, else --namespace, else capkk-system).
    #[arg(long, env = "CAPKK_LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader Lease, or namespace/name (the Operator's form) [default: capkk-manager-leader;
    /// with --watch-filter, capkk-manager-leader-<filter>: each shard elects its own leader].
    #[arg(long, env = "CAPKK_LEADER_ELECTION_ID")]
    pub leader_election_id: Option<String>,
    /// Lease duration. Alias: --leader-elect-lease-duration.
    #[arg(long, alias = "leader-elect-lease-duration", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// Give up leadership when renewing fails this long. Alias: --leader-elect-renew-deadline.
    #[arg(long, alias = "leader-elect-renew-deadline", default_value = "10s", value_parser = parse_duration)]
    pub renew_deadline: Duration,
    /// Interval between lease attempts. Alias: --leader-elect-retry-period.
    #[arg(long, alias = "leader-elect-retry-period", default_value = "2s", value_parser = parse_duration)]
    pub retry_period: Duration,
    /// Namespace of the host-identity Leases (one per host key and per address a KKInstance works on). Every
    /// manager sharing the management cluster must use the same one: exclusivity of a host lives there.
    #[arg(long, env = "CAPKK_HOST_CLAIM_NAMESPACE", default_value = "capkk-system")]
    pub host_claim_namespace: String,
    /// Reconcile every object again at least this often, also when nothing changed (default: only each
    /// kind's own requeues, e.g. the KKCluster re-probe every --probe-interval).
    #[arg(long, value_parser = parse_duration)]
    pub sync_period: Option<Duration>,
    /// Reconciles run at once per controller (default: unbounded); --<kind>-concurrency overrides it for
    /// one kind.
    #[arg(long)]
    pub max_concurrent_reconciles: Option<u16>,
    /// KKCluster reconciles run at once.
    #[arg(long, alias = "kkcluster.infrastructure.cluster.x-k8s.io-concurrency")]
    pub kkcluster_concurrency: Option<u16>,
    /// KKMachine reconciles run at once.
    #[arg(long, alias = "kkmachine.infrastructure.cluster.x-k8s.io-concurrency")]
    pub kkmachine_concurrency: Option<u16>,
    /// KKInstance reconciles run at once.
    #[arg(long, alias = "kkinstance.infrastructure.cluster.x-k8s.io-concurrency")]
    pub kkinstance_concurrency: Option<u16>,
    /// Hosts worked on at once (SSH host tasks).
    #[arg(long, env = "CAPKK_MAX_CONCURRENT_HOSTS", default_value_t = 10)]
    pub max_concurrent_hosts: usize,
    /// Of --max-concurrent-hosts, at most this many for the hosts of one namespace, so that one tenant's long
    /// runs cannot hold every slot [default: all of them with --namespace (one tenant), else three quarters,
    /// leaving at least one slot to the other namespaces].
    #[arg(long, env = "CAPKK_MAX_CONCURRENT_HOSTS_PER_NAMESPACE")]
    pub max_concurrent_hosts_per_namespace: Option<usize>,
    /// Bound on one phase of a host's work (bootstrap, container runtime, provisioning): every command has
    /// its own bound, this bounds how many of them bootstrap data may chain while holding a slot. Past it the
    /// phase fails terminally; the retry annotation resumes it from the host's journal. It bounds a
    /// remediation attempt (each stretch it holds a slot) and an in-place upgrade alike.
    #[arg(long, env = "CAPKK_MAX_HOST_PHASE_DURATION", default_value = "2h", value_parser = parse_duration)]
    pub max_host_phase_duration: Duration,
    /// Prepare a host (facts and bootstrap, binaries, containerd and the image pre-pull, OS packages) as soon
    /// as its Machine names a Kubernetes version, before the bootstrap provider writes the bootstrap data;
    /// only running that data waits for it. A worker's host is then ready when the control plane is.
    /// `false`: claim a host only once `Machine.spec.bootstrap.dataSecretName` is set, as before.
    #[arg(long, env = "CAPKK_PREPARE_BEFORE_BOOTSTRAP_DATA", default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub prepare_before_bootstrap_data: bool,
    /// Hosts probed at once per KKCluster.
    #[arg(long, default_value_t = 8)]
    pub probe_concurrency: usize,
    /// Read the metadata of each Secret a KKInstance names this often (one GET per Secret per interval, spread
    /// over it): a changed Secret wakes its readers. The manager never lists or watches Secrets.
    #[arg(long, env = "CAPKK_SECRET_POLL_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub secret_poll_interval: Duration,
    /// Re-probe the inventory this often.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub probe_interval: Duration,
    /// Quarantine a host that stays unreachable this long while being reset on release.
    #[arg(long, env = "CAPKK_QUARANTINE_AFTER", default_value = "10m", value_parser = parse_duration)]
    pub quarantine_after: Duration,
    /// Bound on TCP connect + SSH handshake + authentication.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub ssh_connect_timeout: Duration,
    /// A static address for a host name on direct SSH dials, NAME=IP (repeatable), consulted before DNS: for
    /// sites whose hosts have no DNS entries. The address reached is what a host claim is keyed by, so a name
    /// and its IP listed in two namespaces are still one host. The alias's address is checked like any other
    /// (--ssh-deny-cidr, --ssh-allow-cidr).
    #[arg(long = "ssh-host-alias", value_parser = parse_host_alias)]
    pub ssh_host_aliases: Vec<(String, std::net::IpAddr)>,
    /// Controller-side cache of downloaded artifacts (content-addressed).
    #[arg(long, env = "CAPKK_ARTIFACT_CACHE_DIR", default_value_os_t = default_cache_dir())]
    pub artifact_cache_dir: PathBuf,
    /// Largest artifact (binary, archive, ISO) a download may bring into the cache, in bytes.
    #[arg(long, env = "CAPKK_MAX_ARTIFACT_BYTES", default_value_t = capkk_service::binary::cache::DEFAULT_MAX_ARTIFACT_BYTES)]
    pub max_artifact_bytes: u64,
    /// Bound on the whole artifact cache in bytes, downloads in progress included: the least recently used
    /// artifacts are evicted to make room (keep it below the cache volume's size; config/manager's is 4 GiB).
    #[arg(long, env = "CAPKK_MAX_CACHE_BYTES", default_value_t = capkk_service::binary::cache::DEFAULT_MAX_CACHE_BYTES)]
    pub max_cache_bytes: u64,
    /// Ranges controller-side downloads never connect to: the management cluster's Service and Pod ranges
    /// (repeat the flag or separate by commas; an empty value clears the list) [default: 10.96.0.0/12,
    /// 10.244.0.0/16: kubeadm's Service and kind's Pod defaults]. Loopback, link-local (cloud metadata),
    /// unspecified and multicast addresses are refused whatever this says.
    #[arg(
        long = "download-deny-cidr",
        value_delimiter = ',',
        action = clap::ArgAction::Append,
        default_values = DEFAULT_DOWNLOAD_DENY_CIDRS,
        value_parser = parse_deny_cidr
    )]
    pub download_deny_cidrs: Vec<Option<Cidr>>,
    /// Host names (`mirror.example`, `*.example`) and ranges (`10.20.0.0/16`) controller-side downloads are
    /// limited to (repeat or separate by commas; default: any destination not refused). A name or range here
    /// never makes a refused address reachable.
    #[arg(long = "download-allow", value_delimiter = ',', action = clap::ArgAction::Append, value_parser = parse_allow)]
    pub download_allow: Vec<AllowEntry>,
    /// Let controller-side downloads reach loopback addresses (a mirror in the manager's own Pod).
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub download_allow_loopback: bool,
    /// Ranges SSH dials (hosts, bastions, KKCluster probes) never connect to: the management cluster's
    /// Service and Pod ranges (repeat the flag or separate by commas; an empty value clears the list)
    /// [default: 10.96.0.0/12, 10.244.0.0/16, as --download-deny-cidr]. Its own flag, not
    /// --download-deny-cidr's list: mirrors and hosts are different destinations, and clearing one guard
    /// must not clear the other. Loopback, link-local (cloud metadata), unspecified and multicast addresses
    /// are refused whatever this says; a host name is resolved once and every address it has is checked.
    #[arg(
        long = "ssh-deny-cidr",
        value_delimiter = ',',
        action = clap::ArgAction::Append,
        default_values = DEFAULT_DOWNLOAD_DENY_CIDRS,
        value_parser = parse_deny_cidr
    )]
    pub ssh_deny_cidrs: Vec<Option<Cidr>>,
    /// Ranges SSH dials may reach although they are loopback or in --ssh-deny-cidr (repeat or separate by
    /// commas; default: none, so loopback is refused): hosts on a subnet inside a deny range, or sshd on the
    /// manager's loopback in tests (127.0.0.0/8). Never opens link-local, metadata, unspecified or
    /// multicast addresses.
    #[arg(long = "ssh-allow-cidr", value_delimiter = ',', action = clap::ArgAction::Append, value_parser = parse_cidr)]
    pub ssh_allow_cidrs: Vec<Cidr>,
    /// The directory `privateKeyPath` keys are read from, one subdirectory per namespace
    /// (`<dir>/<namespace>/`: a namespace cannot name another's key); unset or empty (default) refuses
    /// `privateKeyPath` (a path in a tenant's object must not read the manager's files).
    #[arg(long, env = "CAPKK_PRIVATE_KEY_DIR")]
    pub private_key_dir: Option<PathBuf>,
    /// Address of the Runtime Extension serving CAPI's in-place update hooks over HTTPS ("0", the default,
    /// disables it; docs/upgrades.md).
    #[arg(long, env = "CAPKK_RUNTIME_EXTENSION_BIND_ADDRESS", default_value = "0")]
    pub runtime_extension_bind_address: String,
    /// Directory holding the Runtime Extension's `tls.crt` and `tls.key` (cert-manager's Secret, mounted).
    #[arg(
        long,
        env = "CAPKK_RUNTIME_EXTENSION_CERT_DIR",
        default_value = "/tmp/runtime-extension/serving-certs"
    )]
    pub runtime_extension_cert_dir: PathBuf,
    /// Log format. Alias: --logging-format.
    #[arg(
        long,
        alias = "logging-format",
        env = "CAPKK_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// klog-style verbosity: 0-1 info, 2-4 debug, 5 and more trace (RUST_LOG, when set, wins).
    #[arg(long = "v", short = 'v')]
    pub verbosity: Option<u8>,
    /// Accepted, ignored and logged: this manager serves no profiler.
    #[arg(long)]
    pub profiler_address: Option<String>,
    /// Accepted, ignored and logged: this manager has no feature gates.
    #[arg(long)]
    pub feature_gates: Option<String>,
    /// Accepted, ignored and logged: this provider serves no webhooks.
    #[arg(long)]
    pub webhook_host: Option<String>,
    /// Accepted, ignored and logged: this provider serves no webhooks.
    #[arg(long)]
    pub webhook_port: Option<u16>,
    /// Accepted, ignored and logged: this provider serves no webhooks.
    #[arg(long)]
    pub webhook_cert_dir: Option<String>,
    /// Accepted, ignored and logged: the Kubernetes client here has no client-side rate limit.
    #[arg(long)]
    pub kube_api_qps: Option<f32>,
    /// Accepted, ignored and logged: the Kubernetes client here has no client-side rate limit.
    #[arg(long)]
    pub kube_api_burst: Option<u32>,
    /// Identity in the leader Lease (default: $POD_NAME, else hostname_pid).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
}

/// `--diagnostics-address`'s default, CAPI's.
pub(crate) const DEFAULT_DIAGNOSTICS_ADDRESS: &str = ":8443";

/// How the manager serves `/metrics` ([`Args::metrics_endpoint`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MetricsEndpoint {
    /// Not served.
    Off,
    /// Plain HTTP, no authentication.
    Plain(SocketAddr),
    /// HTTPS with a self-signed certificate; TokenReview and SubjectAccessReview for every request.
    Secure(SocketAddr),
}

/// Lease name used without --leader-election-id and without --watch-filter.
const DEFAULT_LEASE: &str = "capkk-manager-leader";

impl Args {
    /// The HTTPS endpoints' TLS settings (--tls-min-version, --tls-cipher-suites).
    pub(crate) fn tls_options(&self) -> anyhow::Result<crate::tls_listener::TlsOptions> {
        crate::tls_listener::TlsOptions::new(&self.tls_min_version, &self.tls_cipher_suites)
            .map_err(anyhow::Error::msg)
    }

    /// How /metrics is served: --metrics-bind-address (plain HTTP) when given, else --diagnostics-address
    /// (default :8443), HTTPS with authentication unless --insecure-diagnostics.
    pub(crate) fn metrics_endpoint(&self) -> anyhow::Result<MetricsEndpoint> {
        if let Some(plain) = &self.metrics_bind_address {
            return Ok(parse_bind(plain)?.map_or(MetricsEndpoint::Off, MetricsEndpoint::Plain));
        }
        let addr = self
            .diagnostics_address
            .as_deref()
            .unwrap_or(DEFAULT_DIAGNOSTICS_ADDRESS);
        Ok(match parse_bind(addr)? {
            None => MetricsEndpoint::Off,
            Some(a) if self.insecure_diagnostics => MetricsEndpoint::Plain(a),
            Some(a) => MetricsEndpoint::Secure(a),
        })
    }

    /// The leader Lease: (namespace from `--leader-election-id=namespace/name`, if given that way; name).
    /// Without an id, a manager with a watch filter gets a Lease of its own (see [`lease_for_filter`]).
    pub(crate) fn lease(&self) -> (Option<String>, String) {
        match self.leader_election_id.as_deref().map(str::trim) {
            Some(id) if !id.is_empty() => match id.split_once('/') {
                Some((ns, name)) if !ns.is_empty() => (Some(ns.to_owned()), name.to_owned()),
                Some((_, name)) => (None, name.to_owned()),
                None => (None, id.to_owned()),
            },
            _ if self.watch_filter.is_empty() => (None, DEFAULT_LEASE.to_owned()),
            _ => (None, lease_for_filter(&self.watch_filter)),
        }
    }

    /// Reconciles at once per controller: --<kind>-concurrency, else --max-concurrent-reconciles, else
    /// unbounded (0).
    pub(crate) fn concurrency(&self) -> crate::context::Concurrency {
        let all = self.max_concurrent_reconciles.unwrap_or(0);
        crate::context::Concurrency {
            kkcluster: self.kkcluster_concurrency.unwrap_or(all),
            kkmachine: self.kkmachine_concurrency.unwrap_or(all),
            kkinstance: self.kkinstance_concurrency.unwrap_or(all),
        }
    }

    /// Where controller-side downloads may connect: --download-deny-cidr, --download-allow,
    /// --download-allow-loopback.
    pub(crate) fn download_policy(&self) -> DownloadPolicy {
        DownloadPolicy {
            deny: self.download_deny_cidrs.iter().flatten().copied().collect(),
            allow: self.download_allow.clone(),
            allow_loopback: self.download_allow_loopback,
        }
    }

    /// Where SSH dials may connect: --ssh-deny-cidr, --ssh-allow-cidr.
    pub(crate) fn ssh_address_policy(&self) -> AddressPolicy {
        AddressPolicy {
            deny: self.ssh_deny_cidrs.iter().flatten().copied().collect(),
            allow: self.ssh_allow_cidrs.clone(),
            allow_loopback: false,
        }
    }

    /// The log filter --v asks for (`None`: the default, info).
    pub(crate) fn log_level(&self) -> Option<&'static str> {
        self.verbosity.map(|v| match v {
            0..=1 => "info",
            2..=4 => "debug",
            _ => "trace",
        })
    }

    /// The flags given that this manager accepts but does not act on: (flag, value, why). The manager logs
    /// each at startup.
    pub(crate) fn ignored(&self) -> Vec<(&'static str, String, &'static str)> {
        let mut out = Vec::new();
        let mut add = |flag, value: Option<String>, why| {
            if let Some(v) = value {
                out.push((flag, v, why));
            }
        };
        const NO_WEBHOOKS: &str = "this provider serves no webhooks";
        const NO_RATE_LIMIT: &str = "the Kubernetes client here has no client-side rate limit";
        add(
            "--profiler-address",
            self.profiler_address.clone(),
            "this manager serves no profiler",
        );
        add(
            "--feature-gates",
            self.feature_gates.clone(),
            "this manager has no feature gates",
        );
        add("--webhook-host", self.webhook_host.clone(), NO_WEBHOOKS);
        add(
            "--webhook-port",
            self.webhook_port.map(|p| p.to_string()),
            NO_WEBHOOKS,
        );
        add("--webhook-cert-dir", self.webhook_cert_dir.clone(), NO_WEBHOOKS);
        add(
            "--kube-api-qps",
            self.kube_api_qps.map(|q| q.to_string()),
            NO_RATE_LIMIT,
        );
        add(
            "--kube-api-burst",
            self.kube_api_burst.map(|b| b.to_string()),
            NO_RATE_LIMIT,
        );
        if self.metrics_bind_address.is_some() {
            const PLAIN: &str = "--metrics-bind-address is given: /metrics is served there as plain HTTP without \
                                 authentication, and no diagnostics endpoint";
            add("--diagnostics-address", self.diagnostics_address.clone(), PLAIN);
            add(
                "--insecure-diagnostics",
                self.insecure_diagnostics.then(|| "true".to_owned()),
                PLAIN,
            );
        }
        out
    }
}

/// The Lease name of a manager sharded by `--watch-filter=filter`: `capkk-manager-leader-<filter>` as a
/// DNS subdomain (lower case; any other character becomes `-`). When that changed the value, a hash of the
/// original is appended, so `Shard_A` and `shard-a` still elect separate leaders. The hash is FNV-1a, fixed
/// here, so managers of different builds agree on the name.
pub(crate) fn lease_for_filter(filter: &str) -> String {
    let mut clean: String = filter
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            l @ ('a'..='z' | '0'..='9' | '-' | '.') => l,
            _ => '-',
        })
        .collect();
    let changed = clean != filter;
    clean = clean
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned();
    let mut name = format!("{DEFAULT_LEASE}-{clean}");
    name.truncate(DEFAULT_LEASE.len() + 1 + 63);
    let mut name = name
        .trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_owned();
    if changed {
        let hash = filter.bytes().fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        name.push_str(&format!("-{hash:08x}"));
    }
    name
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
    fn a_namespace_gets_three_quarters_of_the_host_slots_unless_the_manager_serves_only_it() {
        assert_eq!(default_hosts_per_namespace(10, false), 7);
        assert_eq!(default_hosts_per_namespace(4, false), 3);
        assert_eq!(default_hosts_per_namespace(2, false), 1);
        assert_eq!(default_hosts_per_namespace(1, false), 1);
        assert_eq!(default_hosts_per_namespace(10, true), 10);
    }

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
        assert_eq!(
            a.download_policy(),
            DownloadPolicy {
                deny: DEFAULT_DOWNLOAD_DENY_CIDRS
                    .iter()
                    .map(|c| c.parse().unwrap())
                    .collect(),
                allow: vec![],
                allow_loopback: false,
            },
            "the cluster's default ranges are refused, loopback is not allowed, no allow-list"
        );
        let a = Args::try_parse_from(["manager", "--leader-elect=false", "--log-format=json"]).unwrap();
        assert!(!a.leader_elect);
        assert_eq!(a.log_format, LogFormat::Json);
        assert!(Args::try_parse_from(["manager", "--quarantine-after=soon"]).is_err());
    }

    #[test]
    fn download_flags_repeat_take_comma_lists_and_refuse_what_is_not_a_range_or_a_name() {
        let a = Args::try_parse_from([
            "manager",
            "--download-deny-cidr=10.43.0.0/16",
            "--download-deny-cidr=10.42.0.0/16,fd00:10:96::/112",
            "--download-allow=mirror.example,*.corp.example",
            "--download-allow",
            "198.18.0.0/15",
            "--download-allow-loopback",
        ])
        .unwrap();
        let p = a.download_policy();
        let shown: Vec<String> = p.deny.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["10.43.0.0/16", "10.42.0.0/16", "fd00:10:96::/112"]);
        assert_eq!(
            p.allow,
            [
                AllowEntry::Host("mirror.example".into()),
                AllowEntry::Host("*.corp.example".into()),
                AllowEntry::Range("198.18.0.0/15".parse().unwrap()),
            ]
        );
        assert!(p.allow_loopback);
        let cleared = Args::try_parse_from(["manager", "--download-deny-cidr="]).unwrap();
        assert!(
            cleared.download_policy().deny.is_empty(),
            "an empty value clears the list"
        );
        for bad in [
            "--download-deny-cidr=10.0.0.0/40",
            "--download-deny-cidr=mirror.example",
            "--download-allow=http://mirror.example/",
            "--download-allow-loopback=maybe",
        ] {
            assert!(Args::try_parse_from(["manager", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn ssh_dials_refuse_loopback_and_the_cluster_ranges_by_default_and_the_flags_change_that() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let default = Args::try_parse_from(["manager"]).unwrap().ssh_address_policy();
        let shown: Vec<String> = default.deny.iter().map(ToString::to_string).collect();
        assert_eq!(shown, DEFAULT_DOWNLOAD_DENY_CIDRS);
        assert!(default.allow.is_empty() && !default.allow_loopback);
        for refused in ["127.0.0.1", "::1", "10.96.0.1", "10.244.1.2", "169.254.169.254"] {
            assert!(default.refusal(ip(refused)).is_some(), "{refused}");
        }
        for allowed in [
            "10.0.0.5",
            "172.16.0.1",
            "192.168.1.10",
            "198.18.0.11",
            "198.19.1.1",
        ] {
            assert_eq!(default.refusal(ip(allowed)), None, "{allowed}");
        }
        let a = Args::try_parse_from([
            "manager",
            "--ssh-deny-cidr=10.43.0.0/16,10.42.0.0/16",
            "--ssh-allow-cidr=127.0.0.0/8",
            "--ssh-allow-cidr",
            "10.42.7.0/24,::1",
        ])
        .unwrap();
        let p = a.ssh_address_policy();
        let shown: Vec<String> = p.deny.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["10.43.0.0/16", "10.42.0.0/16"]);
        assert_eq!(p.refusal(ip("127.0.0.1")), None);
        assert_eq!(p.refusal(ip("::1")), None);
        assert_eq!(
            p.refusal(ip("10.42.7.9")),
            None,
            "an exception inside a deny range"
        );
        assert!(p.refusal(ip("10.42.8.9")).is_some());
        assert_eq!(p.refusal(ip("10.96.0.1")), None, "the default list was replaced");
        assert_eq!(
            a.download_policy().deny.len(),
            2,
            "the download list keeps its own default"
        );
        let cleared = Args::try_parse_from(["manager", "--ssh-deny-cidr="]).unwrap();
        assert!(
            cleared.ssh_address_policy().deny.is_empty(),
            "an empty value clears the list"
        );
        for bad in [
            "--ssh-deny-cidr=10.0.0.0/40",
            "--ssh-allow-cidr=localhost",
            "--ssh-allow-cidr=",
        ] {
            assert!(Args::try_parse_from(["manager", bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn host_claims_have_a_shared_namespace_and_host_aliases_map_names_to_addresses() {
        let a = Args::try_parse_from(["manager"]).unwrap();
        assert_eq!(
            a.host_claim_namespace,
            crate::context::DEFAULT_HOST_CLAIM_NAMESPACE
        );
        assert!(a.ssh_host_aliases.is_empty());
        let a = Args::try_parse_from([
            "manager",
            "--host-claim-namespace=claims",
            "--ssh-host-alias=Node5.Example=198.18.5.11",
            "--ssh-host-alias",
            "n6=fd00::6",
        ])
        .unwrap();
        assert_eq!(a.host_claim_namespace, "claims");
        assert_eq!(
            a.ssh_host_aliases,
            [
                ("node5.example".to_owned(), "198.18.5.11".parse().unwrap()),
                ("n6".to_owned(), "fd00::6".parse().unwrap()),
            ]
        );
        for bad in [
            "--ssh-host-alias=n5",
            "--ssh-host-alias=n5=host",
            "--ssh-host-alias=a/b=10.0.0.1",
        ] {
            assert!(Args::try_parse_from(["manager", bad]).is_err(), "{bad}");
        }
    }

    /// What the Cluster API Operator (v0.29) writes into the manager container's args from an
    /// InfrastructureProvider's `spec.manager` (every field set), after the args of our own manifest.
    pub(crate) const OPERATOR_ARGS: &[&str] = &[
        "--leader-elect",
        "--metrics-bind-address=127.0.0.1:8080",
        "--kkmachine.infrastructure.cluster.x-k8s.io-concurrency=7",
        "--max-concurrent-reconciles=5",
        "--namespace=tenant-a",
        "--health-addr=:9440",
        "--leader-elect=true",
        "--leader-election-id=capkk-system/capkk-leader",
        "--leader-elect-lease-duration=137s",
        "--leader-elect-renew-deadline=107s",
        "--leader-elect-retry-period=26s",
        "--metrics-bind-addr=127.0.0.1:9090",
        "--webhook-host=0.0.0.0",
        "--webhook-port=9443",
        "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs",
        "--sync-period=600s",
        "--profiler-address=localhost:6060",
        "--v=4",
        "--feature-gates=MachinePool=true,ClusterTopology=false",
    ];

    #[test]
    fn the_cluster_api_operators_arguments_parse_with_their_meaning() {
        let a =
            Args::try_parse_from(std::iter::once("manager").chain(OPERATOR_ARGS.iter().copied())).unwrap();
        assert!(a.leader_elect);
        assert_eq!(
            a.metrics_endpoint().unwrap(),
            MetricsEndpoint::Plain("127.0.0.1:9090".parse().unwrap()),
            "the later alias wins, as Go's flag does"
        );
        assert_eq!(a.health_probe_bind_address, ":9440");
        assert_eq!(a.namespace.as_deref(), Some("tenant-a"));
        assert_eq!(a.lease(), (Some("capkk-system".into()), "capkk-leader".into()));
        assert_eq!(a.lease_duration, Duration::from_secs(137));
        assert_eq!(a.renew_deadline, Duration::from_secs(107));
        assert_eq!(a.retry_period, Duration::from_secs(26));
        assert_eq!(a.sync_period, Some(Duration::from_secs(600)));
        assert_eq!(a.log_level(), Some("debug"));
        let c = a.concurrency();
        assert_eq!((c.kkcluster, c.kkmachine, c.kkinstance), (5, 7, 5));
        let ignored: Vec<_> = a.ignored().into_iter().map(|(f, _, _)| f).collect();
        assert_eq!(
            ignored,
            [
                "--profiler-address",
                "--feature-gates",
                "--webhook-host",
                "--webhook-port",
                "--webhook-cert-dir"
            ]
        );
    }

    #[test]
    fn capi_provider_conventions_parse_with_their_meaning() {
        let a = Args::try_parse_from([
            "manager",
            "--leader-elect",
            "--diagnostics-address=:8443",
            "--insecure-diagnostics=false",
            "--watch-filter=shard-1",
            "--kkinstance-concurrency=20",
            "--logging-format=json",
            "--kube-api-qps=20",
            "--kube-api-burst=30",
            "--sync-period=10m0s",
            "-v=6",
        ])
        .unwrap();
        assert_eq!(
            a.metrics_endpoint().unwrap(),
            MetricsEndpoint::Secure("0.0.0.0:8443".parse().unwrap())
        );
        assert_eq!(a.log_format, LogFormat::Json);
        assert_eq!(a.log_level(), Some("trace"));
        assert_eq!(a.sync_period, Some(Duration::from_secs(600)));
        assert_eq!(a.concurrency().kkinstance, 20);
        assert_eq!(a.concurrency().kkcluster, 0, "unbounded unless asked");
        let ignored: Vec<_> = a.ignored().into_iter().map(|(f, _, _)| f).collect();
        assert_eq!(ignored, ["--kube-api-qps", "--kube-api-burst"]);
        let quiet = Args::try_parse_from(["manager"]).unwrap();
        assert!(quiet.ignored().is_empty(), "nothing given, nothing to report");
        assert_eq!(
            quiet.metrics_endpoint().unwrap(),
            MetricsEndpoint::Secure("0.0.0.0:8443".parse().unwrap()),
            "CAPI's default: authenticated HTTPS on :8443"
        );
        assert_eq!(quiet.log_level(), None);
    }

    #[test]
    fn capis_tls_flags_are_taken_and_a_bad_value_fails_the_start_naming_the_flag() {
        let tls = |args: &[&str]| {
            Args::try_parse_from(std::iter::once("manager").chain(args.iter().copied()))
                .unwrap()
                .tls_options()
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        assert_eq!(tls(&[]), Ok(()));
        assert_eq!(
            tls(&[
                "--tls-min-version=VersionTLS13",
                "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            ]),
            Ok(())
        );
        assert!(
            tls(&["--tls-min-version=1.2"])
                .unwrap_err()
                .contains("--tls-min-version")
        );
        assert!(
            tls(&["--tls-cipher-suites=TLS_NULL"])
                .unwrap_err()
                .contains("--tls-cipher-suites")
        );
    }

    /// The container args of a shipped manifest (`- --flag` lines), clusterctl's `${VAR:=default}` set to
    /// their defaults.
    fn shipped_args(manifest: &str) -> Vec<String> {
        manifest
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- --"))
            .map(|a| {
                let mut out = format!("--{a}");
                while let Some(start) = out.find("${") {
                    let end = out[start..]
                        .find('}')
                        .map(|e| start + e)
                        .expect("a closed ${...}");
                    let default = out[start..end].split_once(":=").map_or("", |(_, d)| d).to_owned();
                    out.replace_range(start..=end, &default);
                }
                out
            })
            .collect()
    }

    #[test]
    fn the_shipped_manifests_args_serve_metrics_over_authenticated_https_on_8443() {
        for (what, manifest) in [
            (
                "config/default (clusterctl's defaults)",
                include_str!("../../../config/default/manager_args_patch.yaml"),
            ),
            (
                "config/manager",
                include_str!("../../../config/manager/manager.yaml"),
            ),
        ] {
            let args = shipped_args(manifest);
            assert!(
                args.iter().any(|a| a.starts_with("--diagnostics-address=")),
                "{what}: {args:?}"
            );
            let parsed =
                Args::try_parse_from(std::iter::once("manager".to_owned()).chain(args.iter().cloned()))
                    .unwrap_or_else(|e| panic!("{what}: {args:?}: {e}"));
            assert_eq!(
                parsed.metrics_endpoint().unwrap(),
                MetricsEndpoint::Secure("0.0.0.0:8443".parse().unwrap()),
                "{what} serves /metrics over HTTPS with TokenReview and SubjectAccessReview: {args:?}"
            );
        }
    }

    #[test]
    fn metrics_are_served_plain_only_when_asked_and_an_explicit_metrics_bind_address_wins() {
        let endpoint = |args: &[&str]| {
            Args::try_parse_from(std::iter::once("manager").chain(args.iter().copied()))
                .unwrap()
                .metrics_endpoint()
        };
        let secure = |a: &str| MetricsEndpoint::Secure(a.parse().unwrap());
        let plain = |a: &str| MetricsEndpoint::Plain(a.parse().unwrap());
        assert_eq!(endpoint(&[]).unwrap(), secure("0.0.0.0:8443"));
        assert_eq!(
            endpoint(&["--diagnostics-address=127.0.0.1:9443"]).unwrap(),
            secure("127.0.0.1:9443")
        );
        assert_eq!(
            endpoint(&["--insecure-diagnostics"]).unwrap(),
            plain("0.0.0.0:8443"),
            "the opt-out keeps the address and drops TLS and authentication"
        );
        assert_eq!(
            endpoint(&["--diagnostics-address=:9000", "--insecure-diagnostics=true"]).unwrap(),
            plain("0.0.0.0:9000")
        );
        assert_eq!(
            endpoint(&["--diagnostics-address=0"]).unwrap(),
            MetricsEndpoint::Off
        );
        assert_eq!(
            endpoint(&["--metrics-bind-address=:8080"]).unwrap(),
            plain("0.0.0.0:8080"),
            "what the test harnesses and make image-test pass"
        );
        assert_eq!(
            endpoint(&["--diagnostics-address=:8080", "--insecure-diagnostics=true"]).unwrap(),
            plain("0.0.0.0:8080"),
            "config/default with CAPKK_DIAGNOSTICS_ADDRESS=:8080 CAPKK_INSECURE_DIAGNOSTICS=true: the opt-out"
        );
        assert_eq!(
            endpoint(&[
                "--diagnostics-address=:8443",
                "--metrics-bind-address=127.0.0.1:8080"
            ])
            .unwrap(),
            plain("127.0.0.1:8080"),
            "an explicit plain address wins, whatever the order"
        );
        assert_eq!(
            endpoint(&["--metrics-bind-address=0", "--diagnostics-address=:8443"]).unwrap(),
            MetricsEndpoint::Off,
            "--metrics-bind-address=0 turns /metrics off; it does not fall back to diagnostics"
        );
        assert!(endpoint(&["--diagnostics-address=everywhere"]).is_err());
        assert!(
            Args::try_parse_from(["manager", "--insecure-diagnostics=maybe"]).is_err(),
            "a boolean or nothing"
        );
        // Both given: the unused diagnostics flags are said at startup, never dropped silently.
        let both = Args::try_parse_from([
            "manager",
            "--metrics-bind-address=:8080",
            "--diagnostics-address=:8443",
            "--insecure-diagnostics",
        ])
        .unwrap();
        let ignored: Vec<_> = both.ignored().into_iter().map(|(f, v, _)| (f, v)).collect();
        assert_eq!(
            ignored,
            [
                ("--diagnostics-address", ":8443".to_owned()),
                ("--insecure-diagnostics", "true".to_owned())
            ]
        );
    }

    #[test]
    fn a_watch_filter_without_a_lease_id_elects_its_own_leader() {
        let lease = |args: &[&str]| {
            Args::try_parse_from(std::iter::once("manager").chain(args.iter().copied()))
                .unwrap()
                .lease()
        };
        assert_eq!(lease(&[]), (None, "capkk-manager-leader".into()));
        assert_eq!(
            lease(&["--watch-filter=shard-1"]),
            (None, "capkk-manager-leader-shard-1".into())
        );
        assert_eq!(
            lease(&["--watch-filter=shard-1", "--leader-election-id=mine"]),
            (None, "mine".into()),
            "an explicit id wins"
        );
        // Label values allow upper case and `_`; Lease names do not. Sanitized names carry a hash of the
        // value, so two filters never share a Lease.
        let a = lease_for_filter("Shard_A");
        let b = lease_for_filter("shard-a");
        assert_eq!(b, "capkk-manager-leader-shard-a");
        assert!(a.starts_with("capkk-manager-leader-shard-a-") && a != b, "{a}");
        for f in ["Shard_A", "_x_", "___", &"a".repeat(63), &"B".repeat(63), "a.b-c"] {
            let n = lease_for_filter(f);
            assert!(n.len() <= 253, "{n}");
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'),
                "{n}"
            );
            assert!(
                n.starts_with(char::is_alphanumeric) && n.ends_with(char::is_alphanumeric),
                "{n}"
            );
        }
        assert_eq!(lease_for_filter("Shard_A"), a, "stable");
    }
}
