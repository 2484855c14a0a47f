//! Background SSH probes of a KKCluster's hosts: architecture, OS, reachability and the host key seen first
//! (trust on first use). A probe runs in a tracked task; its result is kept in the probe registry and
//! reported by the next reconcile.

use std::sync::Arc;

use capkk_api::{
    Bastion, HostProbe, InstanceInfo, KKCluster, KKClusterStatus, KKInstance,
    consts::{conditions as cond, reasons},
};
use capkk_executor::ExecRequest;
use futures::{StreamExt, stream};
use kube::ResourceExt;

use crate::{
    conditions,
    context::Context,
    hosts::{self, HostDial},
};

/// Start a probe of `kkc` when one is due, and report the latest result in `status` (`HostsReachable` and
/// `status.hosts`).
pub(crate) async fn probe_and_report(kkc: &Arc<KKCluster>, ctx: &Arc<Context>, status: &mut KKClusterStatus) {
    let ns = kkc.namespace().unwrap_or_default();
    let name = kkc.name_any();
    let gen_ = kkc.metadata.generation;
    // This KKCluster's claims (the probes keep the host keys they pinned).
    let all: Vec<Arc<KKInstance>> = ctx
        .stores
        .instances_in(&ns)
        .await
        .into_iter()
        .filter(|i| i.spec.cluster_name.as_deref() == Some(name.as_str()))
        .collect();

    let uid = kkc.uid().unwrap_or_default();
    if ctx.probes.due(&uid, gen_, ctx.settings.probe_interval) {
        start_probes(ctx, kkc, &all);
    }
    match ctx.probes.latest(&uid) {
        Some(probes) => {
            let bad: Vec<String> = probes
                .iter()
                .filter(|p| !p.reachable || p.message.is_some())
                .map(|p| {
                    format!(
                        "{}: {}",
                        p.name,
                        p.message.clone().unwrap_or_else(|| "unreachable".into())
                    )
                })
                .collect();
            if bad.is_empty() {
                conditions::set_ready(
                    &mut status.conditions,
                    cond::HOSTS_REACHABLE,
                    format!("{} hosts answered", probes.len()),
                    gen_,
                );
            } else {
                conditions::set(
                    &mut status.conditions,
                    cond::HOSTS_REACHABLE,
                    false,
                    reasons::UNREACHABLE,
                    bad.join("; "),
                    gen_,
                );
            }
            status.hosts = probes;
        }
        None if conditions::get(&status.conditions, cond::HOSTS_REACHABLE).is_none() => {
            conditions::set_raw(
                &mut status.conditions,
                cond::HOSTS_REACHABLE,
                "Unknown",
                reasons::IN_PROGRESS,
                format!("probing {} hosts", kkc.spec.nodes.instances.len()),
                gen_,
            );
        }
        None => {}
    }
}

fn go_arch(uname_m: &str) -> &str {
    match uname_m {
        "x86_64" => "amd64",
        "aarch64" | "arm64" => "arm64",
        other => other,
    }
}

async fn probe_host(
    ctx: &Context,
    kkc: &KKCluster,
    host: &InstanceInfo,
    recorded: Option<String>,
    bastion: Option<&Bastion>,
) -> HostProbe {
    let ns = kkc.namespace().unwrap_or_default();
    let host_name = host.host_name();
    let mut probe = HostProbe {
        name: host_name.clone(),
        ..Default::default()
    };
    let auth = hosts::host_auth(kkc, host);
    let dial = HostDial {
        name: &host_name,
        address: &host.address,
        auth: &auth,
        pinned: &host.host_keys,
        recorded: recorded.as_deref(),
        bastion,
    };
    // The recorded key stays recorded whatever this probe sees (a mismatch must not re-trust next time).
    probe.host_key = recorded.clone();
    let target = match hosts::target(&ctx.client, &ns, &dial).await {
        Ok(t) => t,
        Err(e) => {
            probe.message = Some(e.to_string());
            return probe;
        }
    };
    let exec = ctx.ssh.executor(&target);
    let req = ExecRequest::new("uname -m; . /etc/os-release 2>/dev/null && echo \"$ID $VERSION_ID\"")
        .timeout(ctx.settings.probe_timeout);
    let start = std::time::Instant::now();
    let res = tokio::time::timeout(ctx.settings.probe_timeout, exec.exec(req)).await;
    ctx.metrics.ssh_command(start.elapsed());
    probe.host_key = recorded.or_else(|| ctx.ssh.observed_fingerprint(&target));
    match res {
        Err(_) => probe.message = Some(format!("no answer within {:?}", ctx.settings.probe_timeout)),
        Ok(Err(e)) => {
            let field = format!("spec.nodes.instances[{host_name}].address");
            probe.message = Some(
                hosts::address_refused(&e, &field, "spec.nodes.bastion.address")
                    .unwrap_or_else(|| e.to_string()),
            );
        }
        Ok(Ok(out)) if !out.success() => {
            probe.reachable = true;
            probe.message = Some(format!("probe command exited {:?}", out.exit_code));
        }
        Ok(Ok(out)) => {
            probe.reachable = true;
            let text = out.stdout_str();
            let mut lines = text.lines();
            let arch = lines.next().map(|a| go_arch(a.trim()).to_owned());
            probe.os = lines
                .next()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty());
            let declared = host.arch.as_deref().unwrap_or("amd64");
            if let Some(a) = arch.as_deref()
                && a != declared
            {
                probe.message = Some(format!(
                    "host architecture is {a} but spec.nodes.instances[{host_name}].arch is {declared}"
                ));
            }
            probe.arch = arch;
        }
    }
    probe
}

/// Probe every host of `kkc` in a tracked background task; the result is kept in the probe registry and
/// the KKCluster is reconciled again to report it.
fn start_probes(ctx: &Arc<Context>, kkc: &KKCluster, claims: &[Arc<KKInstance>]) {
    let uid = kkc.uid().unwrap_or_default();
    let recorded: Vec<Option<String>> = kkc
        .spec
        .nodes
        .instances
        .iter()
        .map(|h| {
            claims
                .iter()
                .find(|i| i.spec.name == h.host_name())
                .and_then(|i| i.spec.host_key.clone())
                // An unclaimed host keeps the key its first probe saw (no re-trust on every probe).
                .or_else(|| hosts::probed_host_key(kkc, h))
        })
        .collect();
    // The bastion key the claims recorded is pinned here too: a probe after a restart must not trust a new one.
    let bastion = hosts::effective_bastion(kkc).map(|mut b| {
        hosts::pin_recorded_bastion_key(&mut b, claims.iter().map(|c| c.as_ref()));
        b
    });
    let task_ctx = ctx.clone();
    let task_kkc = kkc.clone();
    let task_uid = uid.clone();
    let handle = tokio::spawn(async move {
        let ctx = task_ctx;
        let kkc = task_kkc;
        let futs: Vec<_> = kkc
            .spec
            .nodes
            .instances
            .iter()
            .zip(recorded)
            .map(|(h, r)| probe_host(&ctx, &kkc, h, r, bastion.as_ref()))
            .collect();
        let probes: Vec<HostProbe> = stream::iter(futs)
            .buffered(ctx.settings.probe_concurrency.max(1))
            .collect()
            .await;
        ctx.probes.finish(&task_uid, probes);
        ctx.trigger_cluster(&kkc.name_any(), &kkc.namespace().unwrap_or_default());
    });
    ctx.probes.start(&uid, kkc.metadata.generation, handle);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use capkk_api::{Auth, KKClusterSpec, KKInstanceSpec, Nodes};
    use capkk_ssh::HostKeyPolicy;

    use super::*;
    use crate::fixtures::{TestContext, stored};

    const RECORDED: &str = "SHA256:recordedBastionKeyOfTheClaim00000000000000";

    fn behind_bastion(host_keys: &[&str]) -> KKCluster {
        let password = |p: &str| Auth {
            password: Some(p.into()),
            ..Default::default()
        };
        stored(KKCluster::new(
            "c",
            KKClusterSpec {
                nodes: Nodes {
                    auth: password("fixture-password"),
                    bastion: Some(Bastion {
                        address: "198.18.0.1".into(),
                        auth: Some(password("bastion-password")),
                        host_keys: host_keys.iter().map(|k| (*k).into()).collect(),
                    }),
                    instances: vec![InstanceInfo {
                        name: Some("node1".into()),
                        address: "10.0.0.1".into(),
                        ..Default::default()
                    }],
                },
                ..Default::default()
            },
        ))
    }

    /// The claim of node1, which recorded `bastion_key` for the bastion at `address`.
    fn claim(address: &str, bastion_key: &str) -> Arc<KKInstance> {
        Arc::new(stored(KKInstance::new(
            "c.node1",
            KKInstanceSpec {
                name: "node1".into(),
                address: "10.0.0.1".into(),
                cluster_name: Some("c".into()),
                bastion: Some(Bastion {
                    address: address.into(),
                    auth: None,
                    host_keys: vec![bastion_key.into()],
                }),
                ..Default::default()
            },
        )))
    }

    /// The bastion host-key policy the probes of `kkc` dialled with, given `claims`.
    async fn probed_bastion_policy(kkc: &KKCluster, claims: &[Arc<KKInstance>]) -> HostKeyPolicy {
        let t = TestContext::new();
        start_probes(&t.ctx, kkc, claims);
        let uid = kkc.uid().unwrap_or_default();
        tokio::time::timeout(Duration::from_secs(10), async {
            while t.ctx.probes.latest(&uid).is_none() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the probe finished");
        let targets = t.ssh.targets();
        assert_eq!(targets.len(), 1, "one host probed");
        targets[0]
            .bastion
            .as_ref()
            .expect("dialled through the bastion")
            .host_key
            .clone()
    }

    #[tokio::test]
    async fn a_probe_after_a_restart_pins_the_bastion_key_its_claims_recorded_instead_of_trusting_a_new_one()
    {
        let kkc = behind_bastion(&[]);
        let policy = probed_bastion_policy(&kkc, &[claim("198.18.0.1", RECORDED)]).await;
        assert_eq!(policy, HostKeyPolicy::Pinned(vec![RECORDED.into()]));
        // A key recorded for another bastion pins nothing; nothing recorded yet is trust on first use.
        let policy = probed_bastion_policy(&kkc, &[claim("198.18.0.2", RECORDED)]).await;
        assert_eq!(policy, HostKeyPolicy::TrustOnFirstUse);
        assert_eq!(
            probed_bastion_policy(&kkc, &[]).await,
            HostKeyPolicy::TrustOnFirstUse
        );
        // Keys pinned in the spec win over recorded ones.
        let spec_key = "SHA256:pinnedInTheKKClusterSpec0000000000000000000";
        let kkc = behind_bastion(&[spec_key]);
        let policy = probed_bastion_policy(&kkc, &[claim("198.18.0.1", RECORDED)]).await;
        assert_eq!(policy, HostKeyPolicy::Pinned(vec![spec_key.into()]));
    }
}
