//! The inputs of host work, resolved at use time: the SSH connection (credentials from the KKCluster or
//! the Secrets the KKInstance references), the bootstrap data and the phases' inputs.

use std::{sync::Arc, time::Duration};

use capkk_api::{KKCluster, KKInstance, consts::reasons};
use capkk_executor::{ExecRequest, Executor};
use capkk_service::journal::Redactor;
use k8s_openapi::api::core::v1::Secret as K8sSecret;
use kube::{Api, ResourceExt};
use tracing::debug;

use super::failure::{Failure, exec_failure};
use crate::{
    context::Context,
    error::Error,
    host_claims::{self, Holder, HostIdentity, Outcome},
    hosts,
    metrics::MeteredExecutor,
    object_name::ObjectName,
    services::{BootstrapData, PhaseInput},
};

/// Bound on the first command that proves a connection works.
const CONNECT_CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// A connection to a host this KKInstance holds.
pub(crate) struct Connected {
    /// Runs the work.
    pub exec: Arc<dyn Executor>,
    /// Who was dialled.
    pub target: capkk_ssh::HostTarget,
    /// The host-identity Leases held (see [`crate::host_claims`]).
    pub claims: Vec<String>,
}

/// Connect to the host, make sure this KKInstance is its only claim, then run `true` (credentials and host
/// key are checked here). A host held by another KKInstance (any namespace, any manager) is refused as
/// [`reasons::HOST_IN_USE`] before anything runs on it.
pub(crate) async fn connect(
    ctx: &Context,
    inst: &KKInstance,
    kkc: Option<&KKCluster>,
) -> Result<Connected, Failure> {
    let start = std::time::Instant::now();
    check_addresses(inst)?;
    let target = hosts::instance_target(&ctx.client, inst, kkc)
        .await
        .map_err(|e| match e {
            Error::ResolveCredentials(m) => Failure::Terminal {
                reason: reasons::CREDENTIALS_UNAVAILABLE,
                message: m,
            },
            Error::InvalidSpec { .. } => Failure::Terminal {
                reason: reasons::INVALID_SPEC,
                message: e.to_string(),
            },
            e => Failure::Transient(e.to_string()),
        })?;
    // Who answers is learned from the handshake alone; the claim on that identity is settled before the
    // first command (a refused claim has run nothing on the host).
    let resolved = start.elapsed();
    let seen = ctx.ssh.observe(&target).await.map_err(|e| exec_failure(&e))?;
    let observed = start.elapsed();
    let id = HostIdentity::new(
        &seen.host_key_fingerprint,
        &target.address,
        seen.peer,
        target.bastion.as_deref().map(|b| b.address.as_str()),
    );
    let outcome = host_claims::claim(
        &ctx.client,
        &ctx.settings.host_claim_namespace,
        &id,
        &Holder::of(inst),
    )
    .await
    .map_err(|e| {
        Failure::Transient(format!(
            "claiming the host's identity (Leases in namespace {}): {e}",
            ctx.settings.host_claim_namespace
        ))
    })?;
    let claimed = start.elapsed();
    let claims = match outcome {
        Outcome::Held(names) => names,
        refused => {
            return Err(Failure::Terminal {
                reason: reasons::HOST_IN_USE,
                message: refused.refusal().unwrap_or_default(),
            });
        }
    };
    let exec: Arc<dyn Executor> = Arc::new(MeteredExecutor::new(
        ctx.ssh.executor(&target),
        ctx.metrics.clone(),
    ));
    let out = exec
        .exec(ExecRequest::new("true").timeout(CONNECT_CHECK_TIMEOUT))
        .await
        .map_err(|e| exec_failure(&e))?;
    if !out.success() {
        return Err(Failure::Transient(format!(
            "`true` exited {:?} on {}",
            out.exit_code, inst.spec.address
        )));
    }
    // Where the time from a claim to the host's first command goes (`capkk-bench controller --provision`).
    debug!(
        kkinstance = %inst.name_any(),
        credentials_ms = resolved.as_millis() as u64,
        handshake_ms = (observed - resolved).as_millis() as u64,
        leases_ms = (claimed - observed).as_millis() as u64,
        check_ms = (start.elapsed() - claimed).as_millis() as u64,
        "Connected"
    );
    Ok(Connected { exec, target, claims })
}

/// The addresses dialled, checked as the CRD does ([`capkk_api::is_host_address`]) for objects written before
/// the rule existed: an `inet_aton` form such as `0x7f.1` passes as a DNS name but resolves to 127.0.0.1.
fn check_addresses(inst: &KKInstance) -> Result<(), Failure> {
    let bastion = inst.spec.bastion.as_ref().map(|b| b.address.as_str());
    for (field, address) in [
        ("spec.address", Some(inst.spec.address.as_str())),
        ("spec.bastion.address", bastion),
    ] {
        if let Some(a) = address.filter(|a| !capkk_api::is_host_address(a)) {
            return Err(Failure::Terminal {
                reason: reasons::INVALID_SPEC,
                message: format!(
                    "invalid {field}: {a:?} is not an IP address (IPv4 in dotted decimal) or a DNS name not ending in a number"
                ),
            });
        }
    }
    Ok(())
}

/// A refused name ([`ObjectName::checked`]) as a terminal failure: it stays until the field changes.
fn invalid_name(e: Error) -> Failure {
    Failure::Terminal {
        reason: reasons::INVALID_NAME,
        message: e.to_string(),
    }
}

/// The bootstrap data of the Machine (None when the KKInstance has no reference).
pub(crate) async fn bootstrap_data(
    ctx: &Context,
    inst: &KKInstance,
) -> Result<Option<BootstrapData>, Failure> {
    let ns = inst.namespace().unwrap_or_default();
    let Some(r) = inst.spec.bootstrap_data_secret_ref.as_ref() else {
        return Ok(None);
    };
    let name = ObjectName::checked("spec.bootstrapDataSecretRef.name", &r.name).map_err(invalid_name)?;
    let secret = Api::<K8sSecret>::namespaced(ctx.client.clone(), &ns)
        .get_opt(name.as_str())
        .await
        .map_err(|e| Failure::Transient(format!("reading bootstrap data Secret {}: {e}", r.name)))?
        .ok_or_else(|| {
            Failure::Transient(format!("bootstrap data Secret {ns}/{} not found (yet)", r.name))
        })?;
    let data = secret.data.unwrap_or_default();
    let value = data
        .get("value")
        .map(|v| v.0.clone())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Failure::Terminal {
            reason: reasons::INVALID_SPEC,
            message: format!("bootstrap data Secret {} has no key `value`", r.name),
        })?;
    let format = data
        .get("format")
        .and_then(|f| String::from_utf8(f.0.clone()).ok())
        .filter(|f| !f.is_empty())
        .unwrap_or_else(|| "cloud-config".into());
    Ok(Some(BootstrapData::new(
        capkk_ssh::SecretSlice::from(value),
        format,
    )))
}

/// Inputs of the phases: spec, KKCluster spec, `/etc/hosts` entries, registry credentials (resolved from the
/// KKCluster's inline auth or its Secret, at use time) and a redactor knowing them.
pub(crate) async fn phase_input(
    ctx: &Context,
    inst: &KKInstance,
    kkc: Option<&KKCluster>,
) -> Result<PhaseInput, Failure> {
    let ns = inst.namespace().unwrap_or_default();
    let mut redactor = Redactor::default();
    let mut registry_auth = None;
    if let Some(a) = kkc
        .and_then(|k| k.spec.registry.as_ref())
        .and_then(|r| r.auth.as_ref())
    {
        let (mut user, mut pass) = (a.username.clone(), a.password.clone());
        if let Some(r) = a.secret_ref.as_ref() {
            let name = ObjectName::checked("KKCluster spec.registry.auth.secretRef.name", &r.name)
                .map_err(invalid_name)?;
            let secret = Api::<K8sSecret>::namespaced(ctx.client.clone(), &ns)
                .get_opt(name.as_str())
                .await
                .map_err(|e| Failure::Transient(format!("reading registry Secret {}: {e}", r.name)))?
                .ok_or_else(|| Failure::Terminal {
                    reason: reasons::CREDENTIALS_UNAVAILABLE,
                    message: format!(
                        "registry Secret {ns}/{} (spec.registry.auth.secretRef) not found",
                        r.name
                    ),
                })?;
            let data = secret.data.unwrap_or_default();
            let get = |k: &str| data.get(k).and_then(|v| String::from_utf8(v.0.clone()).ok());
            user = get("username").or(user);
            pass = get("password").or(pass);
        }
        let auth = capkk_service::containermanager::RegistryAuth {
            username: user,
            password: pass,
            insecure_skip_verify: a.insecure_skip_verify.unwrap_or(false),
            plain_http: a.plain_http.unwrap_or(false),
            ca_file: a.ca_file.clone(),
            cert_file: a.cert_file.clone(),
            key_file: a.key_file.clone(),
        };
        // The password and its basic-auth token: any phase's command may print the registry's hosts.toml.
        for t in auth.secret_texts() {
            redactor.add(t);
        }
        registry_auth = Some(auth);
    }
    let hosts_entries = kkc
        .map(|k| {
            k.spec
                .nodes
                .instances
                .iter()
                .map(|h| (h.internal_address().to_owned(), vec![h.host_name()]))
                .collect()
        })
        .unwrap_or_default();
    let load_balancer = match kkc {
        Some(k) if hosts::is_control_plane_member(inst) => {
            let cluster = match crate::capi::cluster_name(&k.metadata) {
                Some(name) => {
                    let name =
                        ObjectName::checked("KKCluster metadata.ownerReferences[kind=Cluster].name", &name)
                            .map_err(invalid_name)?;
                    crate::capi::cluster(ctx, &ns, name)
                        .await
                        .map_err(|e| Failure::Transient(e.to_string()))?
                }
                None => None,
            };
            let instances = ctx.stores.instances_in(&ns).await;
            hosts::load_balancer_plan(k, inst, &instances, hosts::api_server_port(cluster.as_ref()))
        }
        _ => Default::default(),
    };
    Ok(PhaseInput {
        instance: inst.spec.clone(),
        cluster: kkc.map(|k| k.spec.clone()),
        bootstrap: Default::default(),
        redactor,
        registry_auth,
        hosts_entries,
        facts: Default::default(),
        rerun_failed: false,
        control_plane: inst.labels().contains_key(capkk_api::consts::CONTROL_PLANE_LABEL),
        // Host phases run no `kubeadm upgrade`: only the in-place update sets it.
        ignore_preflight_errors: Vec::new(),
        patches_dir: None,
        load_balancer,
    })
}

#[cfg(test)]
mod tests {
    use capkk_api::{Bastion, KKInstanceSpec};

    use super::*;

    fn instance(address: &str, bastion: Option<&str>) -> KKInstance {
        KKInstance::new(
            "c.node1",
            KKInstanceSpec {
                name: "node1".into(),
                address: address.into(),
                bastion: bastion.map(|b| Bastion {
                    address: b.into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
    }

    #[test]
    fn an_inet_aton_address_is_refused_before_a_dial_naming_the_field() {
        assert!(check_addresses(&instance("198.18.0.1", Some("bastion.example"))).is_ok());
        for (inst, field) in [
            (instance("0x7f.1", None), "spec.address"),
            (instance("127.1", None), "spec.address"),
            (instance("198.18.0.1", Some("0x7f000001")), "spec.bastion.address"),
        ] {
            match check_addresses(&inst) {
                Err(Failure::Terminal { reason, message }) => {
                    assert_eq!(reason, reasons::INVALID_SPEC);
                    assert!(message.contains(field), "{message}");
                }
                Err(Failure::Transient(m)) => panic!("{field}: transient: {m}"),
                Ok(()) => panic!("{field}: not refused"),
            }
        }
    }
}
