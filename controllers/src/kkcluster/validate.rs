//! The inventory checks of a KKCluster. A refusal names the field to fix and carries its condition reason
//! (an unsupported distribution is `Unsupported`, anything else `InvalidSpec`).

use std::{collections::HashSet, fmt};

use capkk_api::{Distribution, KKCluster, consts::reasons};

use crate::hosts;

/// Why an inventory is refused.
#[derive(Debug)]
pub(crate) struct Refusal {
    reason: &'static str,
    field: String,
    message: String,
}

impl Refusal {
    fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            reason: reasons::INVALID_SPEC,
            field: field.into(),
            message: message.into(),
        }
    }

    /// The condition reason to report.
    pub(crate) fn reason(&self) -> &'static str {
        self.reason
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.field, self.message)
    }
}

/// Why a host or address field is refused.
fn not_a_host_address(host: &str) -> String {
    format!(
        "{host:?} is not an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number (no port, path or space)"
    )
}

/// Validate the inventory; the refusal names the field.
pub(crate) fn validate(kkc: &KKCluster) -> Result<(), Refusal> {
    let invalid = |field: String, message: String| Err(Refusal::invalid(field, message));
    match Distribution::parse(kkc.spec.distribution.as_deref()) {
        Ok(Distribution::Kubernetes) => {}
        Ok(Distribution::K3s) => {
            return Err(Refusal {
                reason: reasons::UNSUPPORTED,
                field: "spec.distribution".into(),
                message: "k3s is not supported by capkk-rs; use kubernetes".into(),
            });
        }
        Err(other) => {
            return invalid(
                "spec.distribution".into(),
                format!("unknown distribution {other:?}"),
            );
        }
    }
    // Hosts that become the control-plane endpoint (the Cluster's, the kubeconfig's URL, kubeadm's
    // `controlPlaneEndpoint`) and the bastion dialled: checked as the CRD does, for objects written before the
    // rules existed.
    let endpoint = kkc
        .spec
        .control_plane_endpoint
        .as_ref()
        .and_then(|e| e.host.as_deref());
    let balancer = kkc
        .spec
        .control_plane_load_balancer
        .as_ref()
        .and_then(|l| l.host.as_deref());
    let bastion = kkc.spec.nodes.bastion.as_ref().map(|b| b.address.as_str());
    for (field, host) in [
        (
            "spec.controlPlaneEndpoint.host",
            endpoint.filter(|h| !h.is_empty()),
        ),
        (
            "spec.controlPlaneLoadBalancer.host",
            balancer.filter(|h| !h.is_empty()),
        ),
        ("spec.nodes.bastion.address", bastion),
    ] {
        if let Some(h) = host.filter(|h| !capkk_api::is_host_address(h)) {
            return invalid(field.into(), not_a_host_address(h));
        }
    }
    if let Some(lb) = kkc.spec.control_plane_load_balancer.as_ref() {
        validate_load_balancer(lb)?;
    }
    let mut names = HashSet::new();
    let mut addrs = HashSet::new();
    if kkc.spec.nodes.instances.is_empty() {
        return invalid(
            "spec.nodes.instances".into(),
            "the inventory lists no hosts".into(),
        );
    }
    for (i, h) in kkc.spec.nodes.instances.iter().enumerate() {
        let f = format!("spec.nodes.instances[{i}]");
        // The effective name: the declared one, else the one derived from the address (never written back).
        let name = h.host_name();
        if !capkk_api::is_dns_label(&name) {
            return invalid(
                format!("{f}.name"),
                format!("{name:?} is not a lower-case DNS label"),
            );
        }
        if !names.insert(name.clone()) {
            let how = if h.name.as_deref().is_some_and(|n| !n.is_empty()) {
                "duplicate host name"
            } else {
                "the host name derived from the address collides with another host's"
            };
            return invalid(format!("{f}.name"), format!("{how}: {name:?}"));
        }
        if h.address.trim().is_empty() {
            return invalid(format!("{f}.address"), "must be set".into());
        }
        if !capkk_api::is_host_address(&h.address) {
            return invalid(format!("{f}.address"), not_a_host_address(&h.address));
        }
        if let Some(a) = h.internal_address.as_deref().filter(|a| !a.is_empty())
            && a.parse::<std::net::IpAddr>().is_err()
        {
            return invalid(
                format!("{f}.internalAddress"),
                format!("{a:?} is not an IP address"),
            );
        }
        if !addrs.insert(h.address.as_str()) {
            return invalid(
                format!("{f}.address"),
                format!("duplicate address {:?}", h.address),
            );
        }
        if h.roles().is_empty() {
            return invalid(format!("{f}.roles"), "must name at least one role".into());
        }
        if !hosts::host_auth(kkc, h).has_credentials() {
            return invalid(
                format!("{f}.auth"),
                "no credentials: set spec.nodes.auth or the host's auth (password, privateKey, privateKeyPath, secret or secretRef)".into(),
            );
        }
        if let Some(arch) = h.arch.as_deref()
            && !matches!(arch, "amd64" | "arm64")
        {
            return invalid(format!("{f}.arch"), format!("{arch:?} is not amd64 or arm64"));
        }
    }
    Ok(())
}

/// The load balancer's own fields, checked as the CRD does (objects written before the rules existed, clients
/// that skip validation): a `Keepalived` VIP is an IPv4 address, the interface a Linux interface name, the port
/// and the router id in range. That the port differs from the API servers' is checked with the Cluster
/// ([`check_load_balancer_port`]).
fn validate_load_balancer(lb: &capkk_api::LoadBalancer) -> Result<(), Refusal> {
    let f = "spec.controlPlaneLoadBalancer";
    let kind = lb.kind().map_err(|t| {
        Refusal::invalid(
            format!("{f}.type"),
            format!("{t:?} is not External or Keepalived"),
        )
    })?;
    if kind == capkk_api::LoadBalancerType::External {
        return Ok(());
    }
    match lb.host() {
        Some(h) if h.parse::<std::net::Ipv4Addr>().is_ok() => {}
        Some(h) => {
            return Err(Refusal::invalid(
                format!("{f}.host"),
                format!("{h:?} is not an IPv4 address: with type Keepalived it is the VIP"),
            ));
        }
        None => {
            return Err(Refusal::invalid(
                format!("{f}.host"),
                "type Keepalived needs the VIP (an IPv4 address) in host",
            ));
        }
    }
    if let Some(p) = lb.port.filter(|p| !(1..=65535).contains(p)) {
        return Err(Refusal::invalid(
            format!("{f}.port"),
            format!("{p} is not 1-65535"),
        ));
    }
    if let Some(i) = lb
        .interface
        .as_deref()
        .filter(|i| !capkk_service::loadbalancer::is_interface_name(i))
    {
        return Err(Refusal::invalid(
            format!("{f}.interface"),
            format!("{i:?} is not a network interface name (1-15 letters, digits, '_', '.', '-')"),
        ));
    }
    if let Some(v) = lb.virtual_router_id.filter(|v| !(1..=255).contains(v)) {
        return Err(Refusal::invalid(
            format!("{f}.virtualRouterID"),
            format!("{v} is not 1-255"),
        ));
    }
    Ok(())
}

/// A `Keepalived` load balancer's port must differ from the API servers' (`api_server_port`, the Cluster's
/// `spec.clusterNetwork.apiServerPort`): haproxy and the API server listen on the same hosts.
pub(crate) fn check_load_balancer_port(kkc: &KKCluster, api_server_port: u16) -> Result<(), Refusal> {
    let Some(lb) = kkc
        .spec
        .control_plane_load_balancer
        .as_ref()
        .filter(|l| l.is_keepalived())
    else {
        return Ok(());
    };
    let port = lb.port.unwrap_or(i32::from(capkk_api::DEFAULT_LOADBALANCER_PORT));
    if port == i32::from(api_server_port) {
        return Err(Refusal::invalid(
            "spec.controlPlaneLoadBalancer.port",
            format!(
                "{port} is the API servers' port too (the Cluster's spec.clusterNetwork.apiServerPort): haproxy listens beside the API server on every control-plane host; choose another port"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kkcluster::test_objects::*;
    use capkk_api::Auth;

    #[test]
    fn hosts_without_a_name_validate_and_a_derived_name_collision_is_named() {
        assert!(validate(&kkc(vec![host("", "10.0.0.1"), host("", "10.0.0.2")])).is_ok());
        let e = validate(&kkc(vec![host("10-0-0-1", "10.0.0.9"), host("", "10.0.0.1")])).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("spec.nodes.instances[1].name"), "{msg}");
        assert!(msg.contains("derived from the address"), "{msg}");
    }

    #[test]
    fn endpoint_and_address_fields_that_are_no_host_are_refused_naming_the_field() {
        use capkk_api::{ApiEndpoint, Bastion, LoadBalancer};
        let ok = kkc(vec![host("a", "198.18.0.1")]);
        assert!(validate(&ok).is_ok());
        /// Makes one field of a valid KKCluster invalid.
        type Edit = fn(&mut KKCluster);
        let cases: Vec<(&str, Edit)> = vec![
            ("spec.controlPlaneEndpoint.host", |k| {
                k.spec.control_plane_endpoint = Some(ApiEndpoint {
                    host: Some("vip.example/path#x".into()),
                    port: Some(6443),
                })
            }),
            ("spec.controlPlaneLoadBalancer.host", |k| {
                k.spec.control_plane_load_balancer = Some(LoadBalancer {
                    host: Some("vip example".into()),
                    ..Default::default()
                })
            }),
            ("spec.nodes.bastion.address", |k| {
                k.spec.nodes.bastion = Some(Bastion {
                    address: "0x7f.1".into(),
                    ..Default::default()
                })
            }),
            ("spec.nodes.instances[0].address", |k| {
                k.spec.nodes.instances[0].address = "0x7f000001".into()
            }),
            ("spec.nodes.instances[0].internalAddress", |k| {
                k.spec.nodes.instances[0].internal_address = Some("0177.0.0.1".into())
            }),
        ];
        for (field, edit) in cases {
            let mut k = ok.clone();
            edit(&mut k);
            let e = validate(&k).expect_err(field);
            assert_eq!(e.reason(), reasons::INVALID_SPEC);
            assert!(e.to_string().contains(field), "{field}: {e}");
        }
        // The zero endpoint CAPKK writes (`host: ""`) is unset, not invalid.
        let mut zero = ok.clone();
        zero.spec.control_plane_endpoint = Some(ApiEndpoint {
            host: Some(String::new()),
            port: Some(0),
        });
        assert!(validate(&zero).is_ok());
    }

    #[test]
    fn a_keepalived_load_balancer_is_refused_naming_the_field_unless_its_values_are_safe() {
        use capkk_api::LoadBalancer;
        let keepalived = |edit: fn(&mut LoadBalancer)| {
            let mut lb = LoadBalancer {
                host: Some("198.18.5.200".into()),
                type_: Some("Keepalived".into()),
                ..Default::default()
            };
            edit(&mut lb);
            let mut k = kkc(vec![host("a", "198.18.5.11")]);
            k.spec.control_plane_load_balancer = Some(lb);
            k
        };
        assert!(validate(&keepalived(|_| {})).is_ok());
        assert!(validate(&keepalived(|l| l.interface = Some("enp0s1.100".into()))).is_ok());
        type Edit = fn(&mut LoadBalancer);
        let cases: Vec<(&str, Edit)> = vec![
            ("spec.controlPlaneLoadBalancer.host", |l| {
                l.host = Some("vip.example".into())
            }),
            ("spec.controlPlaneLoadBalancer.host", |l| l.host = None),
            ("spec.controlPlaneLoadBalancer.host", |l| {
                l.host = Some("fd00::1".into())
            }),
            ("spec.controlPlaneLoadBalancer.type", |l| {
                l.type_ = Some("kube-vip".into())
            }),
            ("spec.controlPlaneLoadBalancer.port", |l| l.port = Some(70000)),
            ("spec.controlPlaneLoadBalancer.interface", |l| {
                l.interface = Some("eth0\n}\nvrrp_script x {".into())
            }),
            ("spec.controlPlaneLoadBalancer.interface", |l| {
                l.interface = Some("sixteen-chars-xx".into())
            }),
            ("spec.controlPlaneLoadBalancer.virtualRouterID", |l| {
                l.virtual_router_id = Some(0)
            }),
            ("spec.controlPlaneLoadBalancer.virtualRouterID", |l| {
                l.virtual_router_id = Some(256)
            }),
        ];
        for (field, edit) in cases {
            let e = validate(&keepalived(edit)).expect_err(field);
            assert_eq!(e.reason(), reasons::INVALID_SPEC);
            assert!(e.to_string().contains(field), "{field}: {e}");
        }
        // An external load balancer may be a DNS name, as before.
        let mut ext = kkc(vec![host("a", "198.18.5.11")]);
        ext.spec.control_plane_load_balancer = Some(LoadBalancer {
            host: Some("lb.example".into()),
            ..Default::default()
        });
        assert!(validate(&ext).is_ok());
        // The port is the API servers' too.
        let k = keepalived(|l| l.port = Some(6443));
        let e = check_load_balancer_port(&k, 6443).expect_err("same port");
        assert!(
            e.to_string().contains("spec.controlPlaneLoadBalancer.port"),
            "{e}"
        );
        assert!(check_load_balancer_port(&keepalived(|_| {}), 6443).is_ok());
        let e = check_load_balancer_port(&keepalived(|_| {}), 8443).expect_err("8443 is the default");
        assert!(e.to_string().contains("8443"), "{e}");
    }

    #[test]
    fn validation_names_the_field() {
        let e = validate(&kkc(vec![host("a", "1.1.1.1"), host("a", "1.1.1.2")])).unwrap_err();
        assert!(e.to_string().contains("spec.nodes.instances[1].name"), "{e}");
        let e = validate(&kkc(vec![host("a", "1.1.1.1"), host("b", "1.1.1.1")])).unwrap_err();
        assert!(e.to_string().contains("spec.nodes.instances[1].address"), "{e}");
        let e = validate(&kkc(vec![host("A_x", "1.1.1.1")])).unwrap_err();
        assert!(e.to_string().contains("spec.nodes.instances[0].name"), "{e}");
        let mut k = kkc(vec![host("a", "1.1.1.1")]);
        k.spec.nodes.auth = Auth::default();
        let e = validate(&k).unwrap_err();
        assert!(e.to_string().contains("spec.nodes.instances[0].auth"), "{e}");
        k.spec.distribution = Some("k3s".into());
        let e = validate(&k).unwrap_err();
        assert!(e.to_string().contains("spec.distribution"), "{e}");
        assert_eq!(e.reason(), reasons::UNSUPPORTED, "k3s is known but not supported");
        k.spec.distribution = Some("k0s".into());
        assert_eq!(validate(&k).unwrap_err().reason(), reasons::INVALID_SPEC);
        assert!(validate(&kkc(vec![host("a", "1.1.1.1")])).is_ok());
    }
}
