//! KKRemediation and KKRemediationTemplate: CAPI's external remediation contract for hosts reached over SSH.
//!
//! A MachineHealthCheck whose `spec.remediation.templateRef` names a KKRemediationTemplate makes CAPI create,
//! for each unhealthy Machine, a KKRemediation from the template's `spec.template`: same name and namespace
//! as the Machine, the Machine as its owner. CAPI deletes it again once the Machine is healthy. The
//! controller repairs the host in tiers (restart containerd and the kubelet, then reboot and wait for the
//! host), at most `retryLimit` attempts each followed by `timeout` for the Node to recover; after that it
//! hands the Machine to its owner (MachineSet or KubeadmControlPlane), which deletes and replaces it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Conditions, parse_duration_seconds};

/// The default `retryLimit`: one restart of the services, then one reboot.
pub const DEFAULT_RETRY_LIMIT: i32 = 2;
/// The default `timeout` (as CAPM3's examples): long enough for a TCG VM to reboot and its Node to report.
pub const DEFAULT_TIMEOUT: &str = "300s";
/// The shortest `timeout` admitted (`timeout` bounds a reboot and the Node's recovery; less cannot hold one).
pub const MIN_TIMEOUT_SECONDS: u64 = 30;
/// The longest `timeout` admitted.
pub const MAX_TIMEOUT_SECONDS: u64 = 24 * 3600;

/// KKRemediation: the remediation of one unhealthy Machine's host (created by CAPI's MachineHealthCheck).
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "KKRemediation",
    plural = "kkremediations",
    namespaced,
    status = "KKRemediationStatus",
    shortname = "kkr",
    category = "cluster-api",
    label("cluster.x-k8s.io/v1beta2", "v1beta1"),
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Retries","type":"integer","jsonPath":".status.retryCount"}"#,
    printcolumn = r#"{"name":"Last","type":"date","jsonPath":".status.lastRemediated"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KKRemediationSpec {
    /// How the host is repaired.
    #[serde(default)]
    pub strategy: RemediationStrategy,
}

/// How a host is repaired, and for how long before the Machine is replaced.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RemediationStrategy {
    /// `Tiered` (default): the first attempt restarts containerd and the kubelet, later ones reboot the host.
    /// `RestartServices`: every attempt restarts the services. `Reboot`: every attempt reboots.
    #[serde(default, rename = "type")]
    pub type_: RemediationType,
    /// Attempts before the Machine is handed to its owner for replacement (default 2).
    #[serde(default = "default_retry_limit")]
    #[schemars(range(min = 1, max = 10))]
    pub retry_limit: i32,
    /// How long after an attempt the Node may take to become healthy before the next attempt (or the
    /// replacement): a duration from `30s` to `24h` (default `300s`). A reboot must bring the host back
    /// within it.
    #[serde(default = "default_timeout")]
    #[schemars(
        length(min = 2, max = 16),
        extend("pattern" = r"^([0-9]+(s|m|h))+$"),
        extend("x-kubernetes-validations" = [{
            "rule": "duration(self) >= duration('30s') && duration(self) <= duration('24h')",
            "message": "timeout must be between 30s and 24h"
        }])
    )]
    pub timeout: String,
}

impl Default for RemediationStrategy {
    fn default() -> Self {
        Self {
            type_: RemediationType::default(),
            retry_limit: DEFAULT_RETRY_LIMIT,
            timeout: DEFAULT_TIMEOUT.into(),
        }
    }
}

impl RemediationStrategy {
    /// `timeout` in seconds, clamped to the admitted range (a value the apiserver admitted always parses;
    /// anything else falls back to the default).
    pub fn timeout_seconds(&self) -> u64 {
        parse_duration_seconds(&self.timeout)
            .or_else(|| parse_duration_seconds(DEFAULT_TIMEOUT))
            .unwrap_or(300)
            .clamp(MIN_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS)
    }

    /// `retryLimit` clamped to the admitted range.
    pub fn retry_limit(&self) -> u32 {
        self.retry_limit.clamp(1, 10) as u32
    }
}

fn default_retry_limit() -> i32 {
    DEFAULT_RETRY_LIMIT
}

fn default_timeout() -> String {
    DEFAULT_TIMEOUT.into()
}

/// `spec.strategy.type`.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub enum RemediationType {
    /// Restart the services first, reboot on later attempts.
    #[default]
    Tiered,
    /// Restart containerd and the kubelet on every attempt.
    RestartServices,
    /// Reboot the host on every attempt.
    Reboot,
}

/// What one attempt does to the host.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub enum RemediationTier {
    /// `systemctl restart containerd kubelet` over SSH.
    RestartServices,
    /// Reboot over SSH, then wait for the host to answer with a new boot ID.
    Reboot,
}

impl RemediationType {
    /// The tier of attempt `attempt` (1-based).
    pub fn tier(self, attempt: u32) -> RemediationTier {
        match self {
            RemediationType::Tiered if attempt <= 1 => RemediationTier::RestartServices,
            RemediationType::Tiered | RemediationType::Reboot => RemediationTier::Reboot,
            RemediationType::RestartServices => RemediationTier::RestartServices,
        }
    }
}

/// Observed state of a KKRemediation.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KKRemediationStatus {
    /// Where the remediation is: Running (an attempt works on the host), Waiting (for the Node to recover,
    /// up to `timeout`), Exhausted (the Machine was handed to its owner for replacement), Failed (nothing
    /// to remediate: no host behind the Machine; handed over as well).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<RemediationPhase>,
    /// Attempts started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10))]
    pub retry_count: Option<i32>,
    /// When the last attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_remediated: Option<Time>,
    /// Conditions: `ServicesRestarted` and `HostRebooted` (the tiers that ran, with the attempt in the
    /// message), `OwnerRemediationRequested` (the Machine was handed to its owner), `Paused`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Conditions,
}

/// `KKRemediation.status.phase`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub enum RemediationPhase {
    /// An attempt works on the host.
    Running,
    /// The last attempt finished; waiting up to `timeout` for the Node (CAPI deletes this object once the
    /// Machine is healthy).
    Waiting,
    /// Every attempt was used: the Machine was handed to its owner for replacement.
    Exhausted,
    /// The Machine has no host to remediate (no KKMachine or no claimed KKInstance): handed to its owner.
    Failed,
}

/// KKRemediationTemplate: referenced by a MachineHealthCheck's `spec.remediation.templateRef`.
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[kube(
    group = "infrastructure.cluster.x-k8s.io",
    version = "v1beta1",
    kind = "KKRemediationTemplate",
    plural = "kkremediationtemplates",
    namespaced,
    shortname = "kkrt",
    category = "cluster-api",
    label("cluster.x-k8s.io/v1beta2", "v1beta1"),
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct KKRemediationTemplateSpec {
    /// The KKRemediation CAPI creates for each unhealthy Machine.
    pub template: KKRemediationTemplateResource,
}

/// `spec.template` of a KKRemediationTemplate.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KKRemediationTemplateResource {
    /// Labels and annotations for created KKRemediations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<crate::ObjectMetaTemplate>,
    /// The KKRemediation spec.
    pub spec: KKRemediationSpec,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiered_remediation_restarts_the_services_first_and_reboots_after() {
        use RemediationTier::*;
        let tiers = |t: RemediationType| (1..=3).map(|a| t.tier(a)).collect::<Vec<_>>();
        assert_eq!(tiers(RemediationType::Tiered), [RestartServices, Reboot, Reboot]);
        assert_eq!(tiers(RemediationType::Reboot), [Reboot, Reboot, Reboot]);
        assert_eq!(
            tiers(RemediationType::RestartServices),
            [RestartServices, RestartServices, RestartServices]
        );
    }

    #[test]
    fn an_empty_strategy_takes_the_defaults_and_bounds_hold_outside_admission() {
        let s: RemediationStrategy = serde_json::from_str("{}").unwrap();
        assert_eq!(s, RemediationStrategy::default());
        assert_eq!((s.retry_limit(), s.timeout_seconds()), (2, 300));
        let wild = RemediationStrategy {
            type_: RemediationType::Reboot,
            retry_limit: 99,
            timeout: "1s".into(),
        };
        assert_eq!((wild.retry_limit(), wild.timeout_seconds()), (10, 30));
        let garbage = RemediationStrategy {
            timeout: "soon".into(),
            ..Default::default()
        };
        assert_eq!(garbage.timeout_seconds(), 300);
    }
}
