//! The control-plane endpoint a KKCluster publishes.

use capkk_api::{ApiEndpoint, KKCluster, Role};

use crate::capi::Cluster;

/// The endpoint to publish: the user's, else the load balancer's, else the first control-plane host's. The
/// load balancer the provider serves (`type: Keepalived`) is the VIP and haproxy's port (default 8443); an
/// external one's port is the API servers' (or the user's endpoint port).
pub(crate) fn desired_endpoint(kkc: &KKCluster, cluster: &Cluster) -> Option<ApiEndpoint> {
    if let Some(ep) = kkc.spec.control_plane_endpoint.as_ref().filter(|e| e.is_set()) {
        return Some(ep.clone());
    }
    if let Some(lb) = kkc
        .spec
        .control_plane_load_balancer
        .as_ref()
        .filter(|l| l.is_keepalived())
        && let Some(vip) = lb.host()
    {
        return Some(ApiEndpoint {
            host: Some(vip.to_owned()),
            port: Some(
                lb.port
                    .filter(|p| *p > 0)
                    .unwrap_or(i32::from(capkk_api::DEFAULT_LOADBALANCER_PORT)),
            ),
        });
    }
    let port = cluster
        .spec
        .cluster_network
        .as_ref()
        .and_then(|n| n.api_server_port)
        .filter(|p| *p > 0)
        .unwrap_or(6443);
    let user_port = kkc
        .spec
        .control_plane_endpoint
        .as_ref()
        .and_then(|e| e.port)
        .filter(|p| *p > 0);
    let host = kkc
        .spec
        .control_plane_load_balancer
        .as_ref()
        .and_then(|lb| lb.host.clone())
        .filter(|h| !h.is_empty())
        .or_else(|| {
            kkc.spec
                .nodes
                .instances
                .iter()
                .find(|h| Role::ControlPlane.served_by(&h.roles()))
                .map(|h| h.internal_address().to_owned())
        })?;
    Some(ApiEndpoint {
        host: Some(host),
        port: Some(user_port.unwrap_or(port)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kkcluster::test_objects::*;
    use capkk_api::{InstanceInfo, LoadBalancer};

    #[test]
    fn endpoint_prefers_user_then_lb_then_first_control_plane() {
        let cluster = Cluster::new("c", Default::default());
        let mut k = kkc(vec![
            InstanceInfo {
                roles: Some(vec![Role::Worker]),
                ..host("w", "10.0.0.2")
            },
            host("cp", "10.0.0.1"),
        ]);
        let ep = desired_endpoint(&k, &cluster).unwrap();
        assert_eq!((ep.host.as_deref(), ep.port), (Some("10.0.0.1"), Some(6443)));
        k.spec.control_plane_load_balancer = Some(LoadBalancer {
            host: Some("vip.example".into()),
            ..Default::default()
        });
        let mut c2 = cluster.clone();
        c2.spec.cluster_network = Some(crate::capi::ClusterNetwork {
            api_server_port: Some(7443),
        });
        let ep = desired_endpoint(&k, &c2).unwrap();
        assert_eq!((ep.host.as_deref(), ep.port), (Some("vip.example"), Some(7443)));
        k.spec.control_plane_endpoint = Some(ApiEndpoint {
            host: Some("user".into()),
            port: Some(1),
        });
        assert_eq!(desired_endpoint(&k, &c2).unwrap().host.as_deref(), Some("user"));
    }

    #[test]
    fn a_keepalived_endpoint_is_the_vip_and_haproxys_port_not_the_api_servers() {
        let cluster = Cluster::new("c", Default::default());
        let mut k = kkc(vec![host("cp", "10.0.0.1")]);
        k.spec.control_plane_load_balancer = Some(LoadBalancer {
            host: Some("198.18.5.200".into()),
            type_: Some("Keepalived".into()),
            ..Default::default()
        });
        let ep = desired_endpoint(&k, &cluster).unwrap();
        assert_eq!((ep.host.as_deref(), ep.port), (Some("198.18.5.200"), Some(8443)));
        k.spec.control_plane_load_balancer.as_mut().unwrap().port = Some(9443);
        assert_eq!(desired_endpoint(&k, &cluster).unwrap().port, Some(9443));
    }
}
