//! Well-known names: finalizers, labels, annotations, condition types and reasons.

/// Finalizer on KKCluster.
pub const KKCLUSTER_FINALIZER: &str = "kkcluster.infrastructure.cluster.x-k8s.io";
/// Finalizer on KKMachine.
pub const KKMACHINE_FINALIZER: &str = "kkmachine.infrastructure.cluster.x-k8s.io";
/// Finalizer on KKInstance.
pub const KKINSTANCE_FINALIZER: &str = "kkinstance.infrastructure.cluster.x-k8s.io";

/// CAPI's cluster-name label.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// The KKCluster a KKMachine/KKInstance belongs to (CAPKK's label).
pub const KKCLUSTER_NAME_LABEL: &str = "kkcluster.infrastructure.cluster.x-k8s.io/cluster-name";
/// CAPI's pause annotation.
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
/// CAPI's externally-managed annotation.
pub const MANAGED_BY_ANNOTATION: &str = "cluster.x-k8s.io/managed-by";
/// CAPI's watch-filter label.
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";
/// clusterctl's block-move annotation, set while host work runs.
pub const BLOCK_MOVE_ANNOTATION: &str = "clusterctl.cluster.x-k8s.io/block-move";
/// Set (any value) on a KKInstance to retry after a terminal failure.
pub const RETRY_ANNOTATION: &str = "kkinstance.infrastructure.cluster.x-k8s.io/retry";
/// Label set on quarantined KKInstances.
pub const QUARANTINED_LABEL: &str = "kkinstance.infrastructure.cluster.x-k8s.io/quarantined";

/// Condition types.
pub mod conditions {
    /// Summary condition mirrored by CAPI.
    pub const READY: &str = "Ready";
    /// Pause state (CAPI convention).
    pub const PAUSED: &str = "Paused";
    /// KKCluster: hosts answer over SSH.
    pub const HOSTS_REACHABLE: &str = "HostsReachable";
    /// KKCluster: no host address is also listed by another KKCluster of the namespace.
    pub const ADDRESSES_UNIQUE: &str = "AddressesUnique";
    /// KKCluster: control-plane endpoint known.
    pub const ENDPOINT_READY: &str = "EndpointReady";
    /// KKMachine: a host is claimed.
    pub const HOST_CLAIMED: &str = "HostClaimed";
    /// KKMachine: mirror of the KKInstance.
    pub const INSTANCE_READY: &str = "InstanceReady";
    /// KKInstance phases.
    pub const BOOTSTRAPPED: &str = "Bootstrapped";
    /// KKInstance: OS packages installed.
    pub const REPOSITORY_READY: &str = "RepositoryReady";
    /// KKInstance: binaries installed.
    pub const BINARIES_READY: &str = "BinariesReady";
    /// KKInstance: container runtime running.
    pub const CRI_READY: &str = "CRIReady";
    /// KKInstance: bootstrap data executed, sentinel present.
    pub const PROVISIONED: &str = "Provisioned";
    /// KKInstance: reset on delete.
    pub const DELETING: &str = "Deleting";
}

/// Condition reasons.
pub mod reasons {
    /// Paused.
    pub const PAUSED: &str = "Paused";
    /// Not paused.
    pub const NOT_PAUSED: &str = "NotPaused";
    /// Waiting for the owner Cluster / Machine.
    pub const WAITING_FOR_OWNER: &str = "WaitingForOwner";
    /// Cluster infrastructure not provisioned yet.
    pub const WAITING_FOR_CLUSTER_INFRASTRUCTURE: &str = "WaitingForClusterInfrastructure";
    /// No bootstrap data secret yet.
    pub const WAITING_FOR_BOOTSTRAP_DATA: &str = "WaitingForBootstrapData";
    /// No free host matches.
    pub const NO_HOST_AVAILABLE: &str = "NoHostAvailable";
    /// Invalid spec (message names the field).
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// A requested option is not implemented.
    pub const UNSUPPORTED: &str = "Unsupported";
    /// Work in progress.
    pub const IN_PROGRESS: &str = "InProgress";
    /// A command failed (terminal until spec change or retry annotation).
    pub const COMMAND_FAILED: &str = "CommandFailed";
    /// Host unreachable (transient).
    pub const UNREACHABLE: &str = "HostUnreachable";
    /// SSH auth rejected.
    pub const AUTH_FAILED: &str = "AuthenticationFailed";
    /// Host key mismatch.
    pub const HOST_KEY_MISMATCH: &str = "HostKeyMismatch";
    /// Credentials Secret missing or incomplete.
    pub const CREDENTIALS_UNAVAILABLE: &str = "CredentialsUnavailable";
    /// All good.
    pub const READY: &str = "Ready";
    /// Being deleted.
    pub const DELETING: &str = "Deleting";
    /// Quarantined.
    pub const QUARANTINED: &str = "Quarantined";
    /// A host's address is listed by another KKCluster that holds it (claimed or quarantined there).
    pub const ADDRESS_IN_USE: &str = "AddressInUse";
}
