//! The load-balancer service: a control-plane endpoint the provider serves on the control-plane hosts
//! (`controlPlaneLoadBalancer.type: Keepalived`, docs/ha.md).
//!
//! Every control-plane host runs haproxy, a TCP frontend on [`LoadBalancerConfig::port`] balanced over every
//! control plane's API server (health-checked on `/readyz`), and keepalived, which holds the VIP on one of
//! them: VRRP with unicast peers (it works where multicast does not), a priority of its own for each host and a
//! check of the local API server that lowers the priority of a host whose API server does not answer (never a
//! fault state: a lone first control plane must hold the VIP before its API server runs, as `kubeadm init`
//! reaches the endpoint through it).
//!
//! [`ensure`] installs the packages through the repository service ([`crate::repository::ensure`], the hosts'
//! package source), writes the files (each only when its content differs) and reloads a service only when one
//! of its files changed, so a membership that did not change leaves the VIP and the connections alone.
//! [`status`] reads whether the host holds the VIP and whether both services run. [`remove`] (on reset) undoes
//! what [`ensure`] did; a keepalived or haproxy whose configuration capkk did not write is left alone, by
//! [`HEADER`], the first line of every file capkk writes (as [`crate::containermanager::CONTAINERD_STAMP`]
//! marks the containerd capkk installed).

use std::{net::Ipv4Addr, time::Duration};

use capkk_executor::{ExecRequest, Executor};
use tracing::instrument;

use crate::{
    Error, Result,
    binary::ArtifactCache,
    facts::{
        HostFacts, PackageManager,
        script::{Script, put_file},
    },
    host::{Vars, tpl},
    journal::{Progress, Redactor, StepRunner},
    repository::{self, LOADBALANCER_APT_PACKAGES, LOADBALANCER_RPM_PACKAGES, RepositoryConfig},
};

/// The first line of every file capkk writes for the load balancer: [`remove`] takes away only those.
pub const HEADER: &str = "# Managed by capkk-rs (controlPlaneLoadBalancer.type: Keepalived); rewritten when the control plane changes.";
/// keepalived's configuration.
pub const KEEPALIVED_CONF: &str = "/etc/keepalived/keepalived.conf";
/// haproxy's configuration.
pub const HAPROXY_CFG: &str = "/etc/haproxy/haproxy.cfg";
/// keepalived's check of the local API server.
pub const CHECK_SCRIPT: &str = "/etc/keepalived/capkk-check-apiserver.sh";
/// What capkk keeps about the load balancer on the host: the packages it installed, the VIP it configured.
pub const STATE_DIR: &str = "/var/lib/capkk/loadbalancer";
/// The VRRP priority of the first control-plane host by name; each next one has [`PRIORITY_STEP`] less
/// ([`LoadBalancerConfig::priority`]).
pub const PRIORITY: u8 = 200;
/// The priority between two control-plane hosts next to each other by name. Distinct priorities matter: with
/// equal ones, every backup's master-down timer ends at the same instant when the holder dies, two of them take
/// the VIP at once and the one that loses the tie (the lower address) goes back to backup after its gratuitous
/// ARP — the machines of the segment then send to a host without the VIP until their ARP entry expires (5 s
/// more of the API's outage in the first 3-control-plane run, 2026-12-07). 20 apart, the next host's timer ends
/// 78 ms sooner (VRRP's skew time is (256 - priority)/256 s).
pub const PRIORITY_STEP: u8 = 20;
/// The lowest priority a healthy host gets (the 8th and later by name).
pub const PRIORITY_FLOOR: u8 = 60;
/// What a host whose API server does not answer loses of its priority: more than the spread of the healthy
/// ones ([`PRIORITY`] - [`PRIORITY_FLOOR`]), so any host whose API server answers wins over one whose does not.
pub const CHECK_WEIGHT: u8 = 150;
/// The phase name the service's steps are journaled under.
pub const PHASE: &str = "loadbalancer";

/// Bound on the probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on writing the files and (re)loading the services.
const CONFIGURE_TIMEOUT: Duration = Duration::from_secs(120);

/// One control-plane host behind the endpoint.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Member {
    /// Host name (a lower-case DNS label): haproxy's server name.
    pub name: String,
    /// Internal address (IPv4): keepalived's unicast peer, haproxy's server address.
    pub address: String,
}

/// What one control-plane host's load balancer is configured with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadBalancerConfig {
    /// The KKCluster, `namespace/name` (comments in the files, keepalived's router id).
    pub cluster: String,
    /// The VIP (IPv4).
    pub vip: String,
    /// haproxy's frontend port (the published endpoint's port).
    pub port: u16,
    /// The API servers' bind port (haproxy's backends, the health check).
    pub api_server_port: u16,
    /// The VIP's interface; `None`: the one holding [`Self::this`]'s address, found on the host.
    pub interface: Option<String>,
    /// VRRP virtual router id.
    pub virtual_router_id: u8,
    /// This host.
    pub this: Member,
    /// Every control-plane host, this one included.
    pub members: Vec<Member>,
}

/// What [`status`] (and [`ensure`]'s probe) saw on the host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadBalancerStatus {
    /// The interface the VIP goes on (`None`: none holds the host's address, or the named one is missing).
    pub interface: Option<String>,
    /// The named interface that does not exist on the host.
    pub interface_missing: Option<String>,
    /// Who wrote keepalived's configuration.
    pub keepalived: Ownership,
    /// Who wrote haproxy's configuration.
    pub haproxy: Ownership,
    /// keepalived runs.
    pub keepalived_active: bool,
    /// haproxy runs.
    pub haproxy_active: bool,
    /// The packages capkk installed (recorded on the host).
    pub owned_packages: Vec<String>,
    /// The host holds the VIP.
    pub vip_held: bool,
}

/// Who wrote a configuration file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ownership {
    /// There is none.
    #[default]
    Absent,
    /// capkk ([`HEADER`]).
    Ours,
    /// Someone else: capkk leaves it alone.
    Foreign,
}

/// The VRRP router id of KKCluster `namespace/name` when `virtualRouterID` is unset: a hash of the two, in
/// 1..=255. Stable across restarts and managers (FNV-1a, no random seed).
pub fn default_virtual_router_id(namespace: &str, name: &str) -> u8 {
    let mut h: u32 = 0x811c_9dc5;
    for b in namespace.bytes().chain([b'/']).chain(name.bytes()) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    (h % 255) as u8 + 1
}

/// True for a Linux interface name: 1-15 bytes of letters, digits, `_`, `.`, `-`, not starting with `.` or
/// `-` (the CRD pattern [`capkk_api`]'s `INTERFACE`).
pub fn is_interface_name(s: &str) -> bool {
    (1..=15).contains(&s.len())
        && s.as_bytes()
            .first()
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

fn ipv4(field: &str, v: &str) -> Result<Ipv4Addr> {
    v.parse::<Ipv4Addr>().map_err(|_| Error::InvalidInput {
        field: field.into(),
        message: format!("{v:?} is not an IPv4 address"),
    })
}

fn dns_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

impl LoadBalancerConfig {
    /// Check every value that reaches a file on the host (defence in depth: the CRD checks them too); the
    /// error names the field.
    pub fn validate(&self) -> Result<()> {
        ipv4("spec.controlPlaneLoadBalancer.host", &self.vip)?;
        if self.port == 0 {
            return Err(Error::InvalidInput {
                field: "spec.controlPlaneLoadBalancer.port".into(),
                message: "must be 1-65535".into(),
            });
        }
        if self.port == self.api_server_port {
            return Err(Error::InvalidInput {
                field: "spec.controlPlaneLoadBalancer.port".into(),
                message: format!(
                    "{} is also the API server's port (the Cluster's spec.clusterNetwork.apiServerPort): haproxy and the API server listen on the same hosts",
                    self.port
                ),
            });
        }
        if self.api_server_port == 0 {
            return Err(Error::InvalidInput {
                field: "Cluster spec.clusterNetwork.apiServerPort".into(),
                message: "must be 1-65535".into(),
            });
        }
        if let Some(i) = self.interface.as_deref().filter(|i| !is_interface_name(i)) {
            return Err(Error::InvalidInput {
                field: "spec.controlPlaneLoadBalancer.interface".into(),
                message: format!("{i:?} is not a network interface name"),
            });
        }
        if self.virtual_router_id == 0 {
            return Err(Error::InvalidInput {
                field: "spec.controlPlaneLoadBalancer.virtualRouterID".into(),
                message: "must be 1-255".into(),
            });
        }
        if !self.members.contains(&self.this) {
            return Err(Error::InvalidInput {
                field: "spec.nodes.instances".into(),
                message: format!("host {} is not among the control-plane hosts", self.this.name),
            });
        }
        for m in &self.members {
            if !dns_label(&m.name) {
                return Err(Error::InvalidInput {
                    field: "spec.nodes.instances[].name".into(),
                    message: format!("{:?} is not a lower-case DNS label", m.name),
                });
            }
            let a = ipv4(
                &format!("spec.nodes.instances[name={}].internalAddress", m.name),
                &m.address,
            )?;
            if a.to_string() == self.vip {
                return Err(Error::InvalidInput {
                    field: "spec.controlPlaneLoadBalancer.host".into(),
                    message: format!("the VIP {} is host {}'s own address", self.vip, m.name),
                });
            }
        }
        Ok(())
    }

    /// The other control-plane hosts (keepalived's unicast peers), in a stable order.
    /// This host's VRRP priority: [`PRIORITY`] less [`PRIORITY_STEP`] for each member before it by name, at
    /// least [`PRIORITY_FLOOR`]. Every host computes it from the same membership, so no two get the same one
    /// (up to 8 control planes).
    pub fn priority(&self) -> u8 {
        let mut members: Vec<&Member> = self.members.iter().collect();
        members.sort();
        members.dedup();
        let rank = members.iter().position(|m| **m == self.this).unwrap_or(0);
        let step = u32::from(PRIORITY_STEP) * rank as u32;
        u32::from(PRIORITY)
            .saturating_sub(step)
            .max(u32::from(PRIORITY_FLOOR)) as u8
    }

    fn peers(&self) -> Vec<&Member> {
        let mut p: Vec<&Member> = self.members.iter().filter(|m| **m != self.this).collect();
        p.sort();
        p.dedup();
        p
    }
}

/// `{{NAME}}` placeholders of `template` replaced by validated values.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut s = template.to_owned();
    for (k, v) in values {
        s = s.replace(&format!("{{{{{k}}}}}"), v);
    }
    s
}

/// A comment line's text: the cluster's `namespace/name` is DNS-shaped, but a comment must not end early.
fn comment_safe(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).collect()
}

/// keepalived's configuration on the host whose VIP interface is `interface` (pure; golden-tested).
pub fn keepalived_conf(cfg: &LoadBalancerConfig, interface: &str) -> Result<String> {
    cfg.validate()?;
    if !is_interface_name(interface) {
        return Err(Error::HostMismatch {
            message: format!("the VIP's interface {interface:?} is not a network interface name"),
        });
    }
    // keepalived refuses unicast without a peer (its config test fails, and it falls back to multicast): a lone
    // control plane gets no unicast lines at all.
    let peers = cfg.peers();
    let unicast = if peers.is_empty() {
        String::new()
    } else {
        let mut s = format!("    unicast_src_ip {}\n    unicast_peer {{\n", cfg.this.address);
        for p in peers {
            s.push_str(&format!("        {}\n", p.address));
        }
        s.push_str("    }\n");
        s
    };
    Ok(fill(
        tpl::LB_KEEPALIVED_CONF,
        &[
            ("HEADER", HEADER),
            ("CLUSTER", &comment_safe(&cfg.cluster)),
            ("WEIGHT", &CHECK_WEIGHT.to_string()),
            ("ROUTER_ID", &cfg.this.name),
            ("CHECK", CHECK_SCRIPT),
            ("INTERFACE", interface),
            ("VRID", &cfg.virtual_router_id.to_string()),
            ("PRIORITY", &cfg.priority().to_string()),
            ("UNICAST", &unicast),
            ("VIP_CIDR", &format!("{}/32", cfg.vip)),
        ],
    ))
}

/// haproxy's configuration (pure; golden-tested).
pub fn haproxy_cfg(cfg: &LoadBalancerConfig) -> Result<String> {
    cfg.validate()?;
    let mut members: Vec<&Member> = cfg.members.iter().collect();
    members.sort();
    members.dedup();
    let servers: Vec<String> = members
        .iter()
        .map(|m| format!("    server {} {}:{}", m.name, m.address, cfg.api_server_port))
        .collect();
    Ok(fill(
        tpl::LB_HAPROXY_CFG,
        &[
            ("HEADER", HEADER),
            ("CLUSTER", &comment_safe(&cfg.cluster)),
            ("PORT", &cfg.port.to_string()),
            ("SERVERS", &servers.join("\n")),
        ],
    ))
}

/// keepalived's check of the local API server (pure; golden-tested).
pub fn check_script(cfg: &LoadBalancerConfig) -> String {
    fill(
        tpl::LB_CHECK,
        &[
            ("HEADER", HEADER),
            ("API_SERVER_PORT", &cfg.api_server_port.to_string()),
        ],
    )
}

/// The probe command (pure).
pub fn probe_command(address: &str, interface: Option<&str>, vip: &str) -> String {
    Vars::new()
        .var("ADDRESS", address)
        .var("INTERFACE", interface.unwrap_or_default())
        .var("VIP", vip)
        .var("HEADER", HEADER)
        .var("STATE_DIR", STATE_DIR)
        .render(tpl::LB_PROBE)
}

/// Parse the probe's output.
pub fn parse_probe(out: &str) -> LoadBalancerStatus {
    let mut s = LoadBalancerStatus::default();
    let own = |v: &str| match v {
        "ours" => Ownership::Ours,
        "foreign" => Ownership::Foreign,
        _ => Ownership::Absent,
    };
    for line in out.lines() {
        let Some((k, v)) = line.trim().split_once('=') else {
            continue;
        };
        match k {
            "iface" => s.interface = Some(v.to_owned()).filter(|v| !v.is_empty()),
            "iface-missing" => s.interface_missing = Some(v.to_owned()),
            "keepalived" => s.keepalived = own(v),
            "haproxy" => s.haproxy = own(v),
            "keepalived-active" => s.keepalived_active = v == "yes",
            "haproxy-active" => s.haproxy_active = v == "yes",
            "owned" => s.owned_packages = v.split_whitespace().map(str::to_owned).collect(),
            "vip" => s.vip_held = v == "held",
            _ => {}
        }
    }
    s
}

/// The script writing the files and (re)loading what changed (pure; golden-tested). `installed`: the
/// packages capkk installed in this run (recorded, so that [`remove`] knows them).
pub fn configure_script(cfg: &LoadBalancerConfig, interface: &str, installed: &[String]) -> Result<Script> {
    let keepalived = keepalived_conf(cfg, interface)?;
    let haproxy = haproxy_cfg(cfg)?;
    let check = check_script(cfg);
    for p in installed {
        if !p
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-._:".contains(&b))
        {
            return Err(Error::InvalidInput {
                field: "packages".into(),
                message: format!("{p:?} is not a package name"),
            });
        }
    }
    let mut s = Script::new();
    s.step(
        "configure-loadbalancer",
        Vars::new()
            .var("STATE_DIR", STATE_DIR)
            .var("VIP_CIDR", format!("{}/32", cfg.vip))
            .var("INTERFACE", interface)
            .var("PORT", cfg.port.to_string())
            .var("INSTALLED", installed.join(" "))
            .raw(&format!(
                "HAPROXY_FILES() {{\n{}}}\nKEEPALIVED_FILES() {{\n{}{}}}\n",
                put_file(HAPROXY_CFG, 0o644, haproxy.as_bytes()),
                put_file(CHECK_SCRIPT, 0o755, check.as_bytes()),
                put_file(KEEPALIVED_CONF, 0o644, keepalived.as_bytes()),
            ))
            .render(tpl::LB_CONFIGURE),
    );
    Ok(s)
}

/// The reset's script (pure; golden-tested).
pub fn remove_script() -> Script {
    let mut s = Script::new();
    s.step(
        "remove-loadbalancer",
        Vars::new()
            .var("STATE_DIR", STATE_DIR)
            .var("HEADER", HEADER)
            .var("CHECK", CHECK_SCRIPT)
            .render(tpl::LB_REMOVE),
    );
    s
}

/// What [`ensure`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnsureOutcome {
    /// Packages capkk installed in this run.
    pub installed: Vec<String>,
    /// A file changed (and its service was reloaded), or a service was started.
    pub changed: bool,
    /// The interface the VIP goes on.
    pub interface: String,
}

/// The probe, run on the host.
async fn probe(cfg: &LoadBalancerConfig, runner: &StepRunner<'_>) -> Result<LoadBalancerStatus> {
    let out = runner
        .run(
            "probe-loadbalancer",
            ExecRequest::new(probe_command(
                &cfg.this.address,
                cfg.interface.as_deref(),
                &cfg.vip,
            ))
            .sudo()
            .timeout(PROBE_TIMEOUT),
        )
        .await?;
    Ok(parse_probe(&out.stdout_str()))
}

/// Whether capkk may write `service`'s configuration: it wrote it before, there is none, or capkk installed the
/// package (its packaged default is no one's configuration). Otherwise the host had its own: left alone.
fn may_configure(service: &str, own: Ownership, capkk_installed: &[String]) -> Result<()> {
    match own {
        Ownership::Ours | Ownership::Absent => Ok(()),
        Ownership::Foreign if capkk_installed.iter().any(|p| p == service) => Ok(()),
        Ownership::Foreign => Err(Error::HostMismatch {
            message: format!(
                "the host has a {service} configuration capkk did not write ({}); capkk leaves it alone: remove it, or use controlPlaneLoadBalancer.type External",
                if service == "haproxy" {
                    HAPROXY_CFG
                } else {
                    KEEPALIVED_CONF
                }
            ),
        }),
    }
}

/// Install keepalived and haproxy (through the repository service, from `repo`'s source) and configure them
/// for `cfg`; reload a service only when its files changed.
#[instrument(skip_all, fields(host = %exec.target()))]
pub async fn ensure(
    exec: &dyn Executor,
    cfg: &LoadBalancerConfig,
    repo: &RepositoryConfig,
    facts: &HostFacts,
    cache: &ArtifactCache,
    progress: &dyn Progress,
    redactor: &Redactor,
) -> Result<EnsureOutcome> {
    cfg.validate()?;
    let runner = StepRunner {
        exec,
        progress,
        redactor,
        phase: PHASE,
    };
    let before = probe(cfg, &runner).await?;
    let pm = facts.require_package_manager()?;
    let packages = match pm {
        PackageManager::Apt => LOADBALANCER_APT_PACKAGES,
        PackageManager::Dnf | PackageManager::Yum => LOADBALANCER_RPM_PACKAGES,
    };
    // A configuration someone else wrote, or no interface for the VIP, is refused before anything is installed.
    let owned = before.owned_packages.clone();
    may_configure("keepalived", before.keepalived, &owned)?;
    may_configure("haproxy", before.haproxy, &owned)?;
    let interface = match (&before.interface, &before.interface_missing) {
        (_, Some(missing)) => {
            return Err(Error::InvalidInput {
                field: "spec.controlPlaneLoadBalancer.interface".into(),
                message: format!("the host {} has no interface {missing:?}", cfg.this.name),
            });
        }
        (Some(i), None) => i.clone(),
        (None, None) => {
            return Err(Error::HostMismatch {
                message: format!(
                    "no interface of host {} holds its internal address {}: set spec.controlPlaneLoadBalancer.interface",
                    cfg.this.name, cfg.this.address
                ),
            });
        }
    };
    let repo = RepositoryConfig {
        packages: packages.iter().map(|p| (*p).to_owned()).collect(),
        ..repo.clone()
    };
    let installed = repository::ensure(exec, &repo, facts, cache, progress, redactor)
        .await?
        .installed;
    let out = configure_script(cfg, &interface, &installed)?
        .run(exec, PHASE, progress, redactor, CONFIGURE_TIMEOUT)
        .await?;
    Ok(EnsureOutcome {
        installed,
        changed: out.any_changed(),
        interface,
    })
}

/// What the host's load balancer does now: does it hold the VIP, do keepalived and haproxy run.
pub async fn status(exec: &dyn Executor, cfg: &LoadBalancerConfig) -> Result<LoadBalancerStatus> {
    let out = exec
        .exec(
            ExecRequest::new(probe_command(
                &cfg.this.address,
                cfg.interface.as_deref(),
                &cfg.vip,
            ))
            .sudo()
            .timeout(PROBE_TIMEOUT),
        )
        .await
        .map_err(|e| Error::exec("loadbalancer/status", e))?;
    if !out.success() {
        return Err(Error::CommandFailed {
            step: "loadbalancer/status".into(),
            command: "loadbalancer probe".into(),
            exit_code: out.exit_code,
            output_tail: out.tail(1024),
        });
    }
    Ok(parse_probe(&out.stdout_str()))
}

/// Undo [`ensure`] (on reset): stop and disable the keepalived and haproxy capkk configured, remove their files
/// and the VIP if it is still on the host. A host capkk never configured, or whose keepalived/haproxy are
/// someone else's, is left as it is. Idempotent.
pub async fn remove(exec: &dyn Executor, progress: &dyn Progress, redactor: &Redactor) -> Result<()> {
    remove_script()
        .run(exec, "reset", progress, redactor, Duration::from_secs(60))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn config() -> LoadBalancerConfig {
        let m = |n: &str, a: &str| Member {
            name: n.into(),
            address: a.into(),
        };
        LoadBalancerConfig {
            cluster: "default/ha".into(),
            vip: "198.18.5.200".into(),
            port: 8443,
            api_server_port: 6443,
            interface: None,
            virtual_router_id: 51,
            this: m("cp-1", "198.18.5.11"),
            members: vec![
                m("cp-2", "198.18.5.12"),
                m("cp-1", "198.18.5.11"),
                m("cp-3", "198.18.5.13"),
            ],
        }
    }

    #[test]
    fn keepalived_peers_with_every_other_control_plane_by_unicast_from_its_own_address() {
        let c = keepalived_conf(&config(), "eth0").unwrap();
        assert!(c.starts_with(HEADER), "{c}");
        assert!(c.contains("unicast_src_ip 198.18.5.11\n"), "{c}");
        assert!(
            c.contains("    unicast_peer {\n        198.18.5.12\n        198.18.5.13\n    }\n"),
            "{c}"
        );
        assert!(c.contains("198.18.5.200/32 dev eth0"), "{c}");
        assert!(c.contains("virtual_router_id 51\n"), "{c}");
        assert!(c.contains("advert_int 1\n"), "{c}");
        assert!(c.contains("weight -150\n"), "the check lowers the priority: {c}");
        assert!(c.contains("priority 200\n"), "cp-1 is the first by name: {c}");
        assert!(!c.contains("{{"), "every placeholder filled: {c}");
        // A lone first control plane: no peers block at all.
        let mut lone = config();
        lone.members = vec![lone.this.clone()];
        let c = keepalived_conf(&lone, "eth0").unwrap();
        assert!(
            !c.contains("unicast_"),
            "keepalived refuses unicast without peers: {c}"
        );
    }

    #[test]
    fn each_control_plane_gets_its_own_priority_by_name_and_a_failing_check_puts_it_below_every_healthy_one()
    {
        let mut c = config();
        let mut seen = Vec::new();
        for this in c.members.clone() {
            c.this = this;
            seen.push((c.this.name.clone(), c.priority()));
        }
        seen.sort();
        assert_eq!(
            seen,
            [("cp-1".into(), 200), ("cp-2".into(), 180), ("cp-3".into(), 160)]
        );
        // Nine members: the 8th and 9th share the floor, and a failing check still ends below it.
        c.members = (1..=9)
            .map(|i| Member {
                name: format!("cp-{i}"),
                address: format!("198.18.5.{}", 10 + i),
            })
            .collect();
        c.this = c.members[8].clone();
        assert_eq!(c.priority(), PRIORITY_FLOOR);
        c.this = c.members[0].clone();
        assert!(u32::from(c.priority()) < u32::from(PRIORITY_FLOOR) + u32::from(CHECK_WEIGHT));
        assert!(
            i32::from(PRIORITY) - i32::from(CHECK_WEIGHT) < i32::from(PRIORITY_FLOOR),
            "a failing first host must end below the lowest healthy one"
        );
        // The same membership in any order gives the same priorities.
        let mut r = config();
        r.members.reverse();
        assert_eq!(r.priority(), config().priority());
    }

    #[test]
    fn haproxy_balances_over_every_control_planes_api_server_with_readyz_checks() {
        let c = haproxy_cfg(&config()).unwrap();
        assert!(c.starts_with(HEADER));
        assert!(c.contains("    bind :8443\n"), "{c}");
        for (n, a) in [
            ("cp-1", "198.18.5.11"),
            ("cp-2", "198.18.5.12"),
            ("cp-3", "198.18.5.13"),
        ] {
            assert!(c.contains(&format!("    server {n} {a}:6443\n")), "{c}");
        }
        assert!(c.contains("option httpchk GET /readyz"), "{c}");
        assert!(c.contains("check check-ssl verify none inter 1s"), "{c}");
        assert!(!c.contains("{{"), "{c}");
        assert!(check_script(&config()).contains("https://127.0.0.1:6443/readyz"));
    }

    #[test]
    fn hostile_values_are_refused_naming_the_field_before_anything_is_rendered() {
        type Edit = fn(&mut LoadBalancerConfig);
        let cases: Vec<(&str, Edit)> = vec![
            ("spec.controlPlaneLoadBalancer.host", |c| {
                c.vip = "vip.example".into()
            }),
            ("spec.controlPlaneLoadBalancer.host", |c| {
                c.vip = "198.18.5.200/32 dev lo\n}".into()
            }),
            ("spec.controlPlaneLoadBalancer.port", |c| c.port = 6443),
            ("spec.controlPlaneLoadBalancer.port", |c| c.port = 0),
            ("spec.controlPlaneLoadBalancer.interface", |c| {
                c.interface = Some("eth0\n}\nglobal_defs {".into())
            }),
            ("spec.controlPlaneLoadBalancer.interface", |c| {
                c.interface = Some("a-very-long-name0".into())
            }),
            ("spec.controlPlaneLoadBalancer.virtualRouterID", |c| {
                c.virtual_router_id = 0
            }),
            ("internalAddress", |c| {
                c.members[0].address = "198.18.5.12\n}".into()
            }),
            ("spec.nodes.instances[].name", |c| {
                c.members[0].name = "cp 2; rm".into()
            }),
            ("spec.controlPlaneLoadBalancer.host", |c| {
                c.vip = "198.18.5.11".into()
            }),
            ("spec.nodes.instances", |c| c.members.retain(|m| m.name != "cp-1")),
        ];
        for (field, edit) in cases {
            let mut c = config();
            edit(&mut c);
            let e = keepalived_conf(&c, "eth0").expect_err(field);
            assert!(e.to_string().contains(field), "{field}: {e}");
            assert!(haproxy_cfg(&c).is_err(), "{field}");
        }
        assert!(matches!(
            keepalived_conf(&config(), "eth0 dev lo").unwrap_err(),
            Error::HostMismatch { .. }
        ));
    }

    #[test]
    fn the_default_router_id_is_stable_in_range_and_differs_between_clusters() {
        let a = default_virtual_router_id("default", "ha");
        assert_eq!(a, default_virtual_router_id("default", "ha"));
        assert!(a >= 1);
        assert_ne!(a, default_virtual_router_id("default", "ha2"));
        let ids: std::collections::BTreeSet<u8> = (0..40)
            .map(|i| default_virtual_router_id("default", &format!("c{i}")))
            .collect();
        assert!(ids.len() > 30, "spread over the range: {ids:?}");
    }

    #[test]
    fn the_probe_output_is_read_into_a_status() {
        let s = parse_probe(
            "iface=eth0\nkeepalived=ours\nkeepalived-active=yes\nhaproxy=foreign\nhaproxy-active=no\nowned=haproxy keepalived \nvip=held\n",
        );
        assert_eq!(s.interface.as_deref(), Some("eth0"));
        assert_eq!((s.keepalived, s.haproxy), (Ownership::Ours, Ownership::Foreign));
        assert!(s.keepalived_active && !s.haproxy_active && s.vip_held);
        assert_eq!(s.owned_packages, ["haproxy", "keepalived"]);
        let s = parse_probe("iface=\nkeepalived=absent\nvip=free\n");
        assert_eq!(s.interface, None);
        assert!(!s.vip_held);
    }

    #[test]
    fn a_configuration_capkk_did_not_write_is_left_alone_unless_capkk_installed_the_package() {
        assert!(may_configure("haproxy", Ownership::Absent, &[]).is_ok());
        assert!(may_configure("haproxy", Ownership::Ours, &[]).is_ok());
        assert!(may_configure("haproxy", Ownership::Foreign, &["haproxy".into()]).is_ok());
        let e = may_configure("keepalived", Ownership::Foreign, &["haproxy".into()]).unwrap_err();
        assert!(e.to_string().contains(KEEPALIVED_CONF), "{e}");
    }

    /// Runs the rendered reset script under `sh` with stand-ins for `systemctl` and `ip` on PATH and the files
    /// at temporary paths; returns (success, output, the stand-ins' calls, the paths left).
    fn remove_with_stand_ins(ours: bool) -> (bool, String, Vec<String>, Vec<bool>) {
        let dir = tempfile::tempdir().unwrap();
        let tools = crate::stand_ins::StandIns::new(dir.path());
        for tool in ["systemctl", "ip"] {
            tools.tool(
                tool,
                &format!("echo \"{tool} $*\" >> '{}'\n", tools.log().display()),
            );
        }
        let ka = dir.path().join("keepalived.conf");
        let ha = dir.path().join("haproxy.cfg");
        let check = dir.path().join("check.sh");
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(state.join("vip"), "198.18.5.200/32 eth0\n").unwrap();
        let first = if ours { HEADER } else { "# the operator's own" };
        std::fs::write(&ka, format!("{first}\nvrrp_instance x {{}}\n")).unwrap();
        std::fs::write(&ha, format!("{first}\nglobal\n")).unwrap();
        std::fs::write(&check, format!("#!/bin/sh\n{HEADER}\n")).unwrap();
        let text = remove_script()
            .render()
            .replace(KEEPALIVED_CONF, &ka.display().to_string())
            .replace(HAPROXY_CFG, &ha.display().to_string())
            .replace(CHECK_SCRIPT, &check.display().to_string())
            .replace(STATE_DIR, &state.display().to_string());
        let (ok, out, calls) = tools.run(&text);
        let left = [&ka, &ha, &check, &state].iter().map(|p| p.exists()).collect();
        (ok, out, calls, left)
    }

    #[test]
    fn the_reset_stops_and_removes_what_capkk_configured_and_drops_the_vip() {
        let (ok, out, calls, left) = remove_with_stand_ins(true);
        assert!(ok, "{out}");
        assert!(
            calls.contains(&"systemctl disable --now keepalived".to_owned()),
            "{calls:?}"
        );
        assert!(
            calls.contains(&"systemctl disable --now haproxy".to_owned()),
            "{calls:?}"
        );
        assert!(
            calls.contains(&"ip addr del 198.18.5.200/32 dev eth0".to_owned()),
            "{calls:?}"
        );
        assert_eq!(left, [false, false, false, false], "{out}");
    }

    #[test]
    fn the_reset_leaves_a_keepalived_and_haproxy_the_host_had_before_alone() {
        let (ok, out, calls, left) = remove_with_stand_ins(false);
        assert!(ok, "{out}");
        assert!(!calls.iter().any(|c| c.starts_with("systemctl")), "{calls:?}");
        assert_eq!(&left[..2], [true, true], "their files stay: {out}");
        assert!(out.contains("left keepalived alone"), "{out}");
    }

    /// A host answering the probe with `probe`, the package probe with nothing missing and the configuration
    /// script with a changed step; it records every command and the configuration script's stdin.
    struct Host {
        probe: &'static str,
        calls: std::sync::Mutex<Vec<(String, String)>>,
    }

    #[async_trait::async_trait]
    impl Executor for Host {
        async fn exec(
            &self,
            req: ExecRequest,
        ) -> std::result::Result<capkk_executor::ExecOutput, capkk_executor::ExecError> {
            assert!(req.timeout > Duration::ZERO, "every call carries a timeout");
            let stdin = String::from_utf8_lossy(req.stdin.as_deref().unwrap_or_default()).into_owned();
            self.calls.lock().unwrap().push((req.command.clone(), stdin));
            let out = if req.command.contains("iface=") {
                self.probe.to_owned()
            } else if req.command == "sh -s" {
                "\n@@capkk begin configure-loadbalancer\nreloaded haproxy\n@@capkk changed\n\n@@capkk end configure-loadbalancer 0 5 0\n".to_owned()
            } else {
                // The repository service's package probe: nothing missing.
                String::new()
            };
            Ok(capkk_executor::ExecOutput {
                exit_code: Some(0),
                stdout: out.into_bytes(),
                ..Default::default()
            })
        }

        async fn put(
            &self,
            _req: capkk_executor::PutRequest,
        ) -> std::result::Result<u64, capkk_executor::ExecError> {
            panic!("nothing is uploaded")
        }

        async fn get(
            &self,
            _path: &str,
            _limit: usize,
            _privileged: bool,
        ) -> std::result::Result<Vec<u8>, capkk_executor::ExecError> {
            panic!("nothing is read")
        }

        fn target(&self) -> String {
            "198.18.5.11".into()
        }
    }

    async fn ensure_on(probe: &'static str) -> (Result<EnsureOutcome>, Vec<(String, String)>) {
        let host = Host {
            probe,
            calls: Default::default(),
        };
        let dir = tempfile::tempdir().unwrap();
        let cache = ArtifactCache::new(dir.path()).unwrap();
        let facts = crate::facts::parse(
            "@@os-release\nID=debian\nVERSION_ID=12\n@@end\nmachine=x86_64\npm=apt-get\n",
        )
        .unwrap();
        let repo = RepositoryConfig::from_api(Some("none"), false, vec![], Default::default()).unwrap();
        let out = ensure(
            &host,
            &config(),
            &repo,
            &facts,
            &cache,
            &crate::journal::NoProgress,
            &Redactor::default(),
        )
        .await;
        let calls = host.calls.lock().unwrap().clone();
        (out, calls)
    }

    #[tokio::test]
    async fn ensure_installs_through_the_repository_service_and_writes_the_files_on_the_interface_found() {
        let (out, calls) = ensure_on("iface=eth0\nkeepalived=absent\nhaproxy=ours\nvip=free\n").await;
        let out = out.expect("configured");
        assert_eq!(out.interface, "eth0");
        assert!(out.changed && out.installed.is_empty());
        assert_eq!(calls.len(), 3, "probe, package probe, configuration: {calls:#?}");
        assert!(
            calls[1].0.contains("keepalived") && calls[1].0.contains("haproxy"),
            "the packages are asked of the repository service: {}",
            calls[1].0
        );
        let script = &calls[2].1;
        assert!(
            script.contains("INTERFACE='eth0'") || script.contains("INTERFACE=eth0"),
            "{script}"
        );
        assert!(
            script.contains(&format!("put_file {KEEPALIVED_CONF} 644")),
            "{script}"
        );
        assert!(
            script.contains(&format!("put_file {HAPROXY_CFG} 644")),
            "{script}"
        );
    }

    #[tokio::test]
    async fn a_foreign_configuration_or_no_interface_is_refused_before_anything_is_installed() {
        let (out, calls) = ensure_on("iface=eth0\nkeepalived=foreign\nhaproxy=absent\nvip=free\n").await;
        let e = out.expect_err("someone else's keepalived");
        assert!(e.to_string().contains(KEEPALIVED_CONF), "{e}");
        assert_eq!(calls.len(), 1, "only the probe ran: {calls:#?}");
        let (out, calls) = ensure_on("iface=\nkeepalived=absent\nhaproxy=absent\nvip=free\n").await;
        let e = out.expect_err("no interface holds the address");
        assert!(
            e.to_string().contains("spec.controlPlaneLoadBalancer.interface"),
            "{e}"
        );
        assert_eq!(calls.len(), 1, "only the probe ran: {calls:#?}");
    }

    /// Runs the rendered configuration script under `sh` with stand-ins for `systemctl`, `haproxy` and
    /// `keepalived` on PATH (a unit is active once started) and the files at temporary paths under `dir`;
    /// returns (success, output, the stand-ins' calls of this run).
    fn configure_with_stand_ins(
        dir: &std::path::Path,
        cfg: &LoadBalancerConfig,
    ) -> (bool, String, Vec<String>) {
        // haproxy's frontend listening, as /proc/net/tcp shows it (8443 = 0x20FB, state 0A).
        let tcp = format!(
            "  sl  local_address rem_address   st\n   0: 00000000:{:04X} 00000000:0000 0A\n",
            cfg.port
        );
        configure_with_stand_ins_and_sockets(dir, cfg, &tcp)
    }

    /// [`configure_with_stand_ins`] with `tcp` as the host's `/proc/net/tcp`.
    fn configure_with_stand_ins_and_sockets(
        dir: &std::path::Path,
        cfg: &LoadBalancerConfig,
        tcp: &str,
    ) -> (bool, String, Vec<String>) {
        let sockets = dir.join("tcp");
        std::fs::write(&sockets, tcp).unwrap();
        let tools = crate::stand_ins::StandIns::new(dir);
        let log = tools.log().display().to_string();
        let d = dir.display();
        tools
            .tool(
                "systemctl",
                &format!(
                    "echo \"systemctl $*\" >> '{log}'\ncase \"$1\" in\n  is-active) [ -e '{d}/active-'\"$3\" ]; exit $? ;;\n  restart) touch '{d}/active-'\"$2\" ;;\nesac\n"
                ),
            )
            .tool("haproxy", &format!("echo \"haproxy $*\" >> '{log}'\n"))
            .tool(
                "keepalived",
                &format!("[ \"$1\" = --help ] && echo '  -t, --config-test'\necho \"keepalived $*\" >> '{log}'\n"),
            );
        let text = configure_script(cfg, "eth0", &["keepalived".into()])
            .unwrap()
            .render()
            .replace(
                KEEPALIVED_CONF,
                &dir.join("keepalived.conf").display().to_string(),
            )
            .replace(HAPROXY_CFG, &dir.join("haproxy.cfg").display().to_string())
            .replace(CHECK_SCRIPT, &dir.join("check.sh").display().to_string())
            .replace(STATE_DIR, &dir.join("state").display().to_string())
            .replace("/proc/net/tcp /proc/net/tcp6", &sockets.display().to_string())
            .replace("sleep 0.5", "sleep 0.01");
        let (ok, out, calls) = tools.run(&text);
        let calls = calls
            .into_iter()
            .filter(|l| !l.starts_with("systemctl is-active") && !l.contains("--help"))
            .collect();
        (ok, out, calls)
    }

    #[test]
    fn an_active_haproxy_with_nothing_listening_on_the_endpoint_port_fails_the_configuration_naming_the_port()
    {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config();
        // Something else listens (the API server on 6443 = 0x192B); haproxy loaded nothing.
        let tcp = "  sl  local_address rem_address   st\n   0: 00000000:192B 00000000:0000 0A\n";
        let (ok, out, _) = configure_with_stand_ins_and_sockets(dir.path(), &cfg, tcp);
        assert!(!ok, "a frontend that does not listen is no endpoint: {out}");
        assert!(
            out.contains("haproxy is active but nothing listens on port 8443"),
            "{out}"
        );
        // A connection to 8443 (not a listener: state 01) is not the frontend either.
        let tcp = "  sl  local_address rem_address   st\n   0: 0A000001:20FB 0A000002:9C40 01\n";
        let (ok, out, _) = configure_with_stand_ins_and_sockets(dir.path(), &cfg, tcp);
        assert!(!ok, "{out}");
        let (ok, out, _) = configure_with_stand_ins(dir.path(), &cfg);
        assert!(ok, "{out}");
        assert!(out.contains("haproxy listens on port 8443"), "{out}");
    }

    #[test]
    fn the_services_are_started_once_then_reloaded_only_when_the_membership_changed_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config();
        let (ok, out, calls) = configure_with_stand_ins(dir.path(), &cfg);
        assert!(ok, "{out}");
        let acts: Vec<&String> = calls
            .iter()
            .filter(|c| c.starts_with("systemctl restart") || c.starts_with("systemctl reload"))
            .collect();
        assert_eq!(
            acts,
            ["systemctl restart haproxy", "systemctl restart keepalived"],
            "{calls:?}"
        );
        assert!(
            calls.iter().any(|c| c.starts_with("haproxy -c")),
            "validated: {calls:?}"
        );
        assert!(
            calls.iter().any(|c| c.starts_with("keepalived --config-test")),
            "{calls:?}"
        );
        let owned = std::fs::read_to_string(dir.path().join("state/packages")).unwrap();
        assert_eq!(
            owned, "keepalived\n",
            "what capkk installed is recorded for the reset"
        );
        // The same membership again: nothing is reloaded (the VIP and the connections stay).
        let (ok, out, calls) = configure_with_stand_ins(dir.path(), &cfg);
        assert!(ok, "{out}");
        assert!(
            !calls
                .iter()
                .any(|c| c.starts_with("systemctl restart") || c.starts_with("systemctl reload")),
            "{calls:?}"
        );
        // A control plane leaves: both files change, both services are reloaded, not restarted.
        let mut two = cfg.clone();
        two.members.retain(|m| m.name != "cp-3");
        let (ok, out, calls) = configure_with_stand_ins(dir.path(), &two);
        assert!(ok, "{out}");
        let acts: Vec<&String> = calls
            .iter()
            .filter(|c| c.starts_with("systemctl restart") || c.starts_with("systemctl reload"))
            .collect();
        assert_eq!(
            acts,
            ["systemctl reload haproxy", "systemctl reload keepalived"],
            "{calls:?}"
        );
        let haproxy = std::fs::read_to_string(dir.path().join("haproxy.cfg")).unwrap();
        assert!(!haproxy.contains("cp-3"), "{haproxy}");
    }
}
