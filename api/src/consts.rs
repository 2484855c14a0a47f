//! Well-known names, all in one place: finalizers, labels, annotations, field managers, condition types and
//! reasons. Labels and annotations live in metadata (not status), so they survive a manager restart and
//! `clusterctl move`.

/// Finalizer on KKCluster.
pub const KKCLUSTER_FINALIZER: &str = "kkcluster.infrastructure.cluster.x-k8s.io";
/// Finalizer on KKMachine.
pub const KKMACHINE_FINALIZER: &str = "kkmachine.infrastructure.cluster.x-k8s.io";
/// Finalizer on KKInstance.
pub const KKINSTANCE_FINALIZER: &str = "kkinstance.infrastructure.cluster.x-k8s.io";
/// Finalizer on KKRemediation (a running attempt is stopped before the object goes).
pub const KKREMEDIATION_FINALIZER: &str = "kkremediation.infrastructure.cluster.x-k8s.io";

// Labels.

/// CAPI's cluster-name label.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// CAPI's label marking control-plane Machines.
pub const CONTROL_PLANE_LABEL: &str = "cluster.x-k8s.io/control-plane";
/// CAPI's watch-filter label.
pub const WATCH_FILTER_LABEL: &str = "cluster.x-k8s.io/watch-filter";
/// The KKCluster a KKMachine/KKInstance belongs to (CAPKK's label).
pub const KKCLUSTER_NAME_LABEL: &str = "kkcluster.infrastructure.cluster.x-k8s.io/cluster-name";
/// Label on a KKInstance: a hash of its address ([`crate::names::address_hash`]), so claims of one address
/// are found with one selector (two KKClusters listing the same address must never both provision it).
pub const ADDRESS_HASH_LABEL: &str = "kkinstance.infrastructure.cluster.x-k8s.io/address-hash";
/// Label set on quarantined KKInstances.
pub const QUARANTINED_LABEL: &str = "kkinstance.infrastructure.cluster.x-k8s.io/quarantined";

// Annotations.

/// CAPI's pause annotation.
pub const PAUSED_ANNOTATION: &str = "cluster.x-k8s.io/paused";
/// CAPI's externally-managed annotation.
pub const MANAGED_BY_ANNOTATION: &str = "cluster.x-k8s.io/managed-by";
/// clusterctl's block-move annotation, set while host work runs.
pub const BLOCK_MOVE_ANNOTATION: &str = "clusterctl.cluster.x-k8s.io/block-move";
/// Set (any value) on a KKInstance to retry after a terminal failure.
pub const RETRY_ANNOTATION: &str = "kkinstance.infrastructure.cluster.x-k8s.io/retry";
/// Set by the KKMachine controller on its KKInstance when the Machine goes away: reset the host, then free it.
pub const RELEASE_ANNOTATION: &str = "kkinstance.infrastructure.cluster.x-k8s.io/release";
/// Comma-separated phases that finished on the host (bootstrap, repository, binary, containermanager,
/// provisioning). A restarted manager skips them.
pub const COMPLETED_PHASES_ANNOTATION: &str = "kkinstance.infrastructure.cluster.x-k8s.io/completed-phases";
/// The host-identity Leases the KKInstance holds (comma-separated names in the manager's
/// `--host-claim-namespace`): released when the KKInstance goes.
pub const HOST_CLAIMS_ANNOTATION: &str = "kkinstance.infrastructure.cluster.x-k8s.io/host-claims";
/// Set once host work started (the host may be dirty and needs a reset before it is freed).
pub const TOUCHED_ANNOTATION: &str = "kkinstance.infrastructure.cluster.x-k8s.io/touched";
/// Set when the host was reset successfully.
pub const RESET_DONE_ANNOTATION: &str = "kkinstance.infrastructure.cluster.x-k8s.io/reset-done";
/// RFC 3339 time since which a release has failed to reach the host.
pub const UNREACHABLE_SINCE_ANNOTATION: &str = "kkinstance.infrastructure.cluster.x-k8s.io/unreachable-since";
/// The condition reason of a terminal host-work failure. Host work does not start again until
/// [`RETRY_ANNOTATION`] is set, whatever else changes; for `CredentialsUnavailable` the manager's Secret
/// watch sets it when a Secret the KKInstance reads changes.
pub const FAILED_ANNOTATION: &str = "kkinstance.infrastructure.cluster.x-k8s.io/failed";

/// On a KKCluster whose endpoint the provider serves (`controlPlaneLoadBalancer.type: Keepalived`): the
/// control-plane hosts (`name=address`, sorted, comma-separated) every member's keepalived and haproxy were last
/// configured with. A membership that differs from it is synced to every member.
pub const LOADBALANCER_MEMBERS_ANNOTATION: &str =
    "kkcluster.infrastructure.cluster.x-k8s.io/loadbalancer-members";

// Field managers and the event reporter.

/// The field manager of reconciler status writes (server-side apply).
pub const FIELD_MANAGER: &str = "capkk-manager";
/// The field manager of the background host work's status writes (a KKInstance's `step`, `journal`,
/// `hostInfo` and phase conditions).
pub const HOSTWORK_FIELD_MANAGER: &str = "capkk-manager/hostwork";
/// The field manager of `KKInstance.status.nodeRef` (written by the KKMachine reconciler).
pub const NODE_REF_FIELD_MANAGER: &str = "capkk-manager/noderef";
/// The field manager of the `OwnerRemediated` condition a KKRemediation sets on its Machine when it gives up.
pub const REMEDIATION_FIELD_MANAGER: &str = "capkk-manager/remediation";
/// The controller name the manager's events are reported under.
pub const EVENT_REPORTER: &str = "capkk-manager";

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
    /// KKRemediation: the first tier (containerd and the kubelet restarted) ran; the message names the attempt.
    pub const SERVICES_RESTARTED: &str = "ServicesRestarted";
    /// KKRemediation: the second tier (reboot, host back with a new boot ID) ran.
    pub const HOST_REBOOTED: &str = "HostRebooted";
    /// KKCluster and control-plane KKInstances: the control-plane endpoint the provider serves (keepalived and
    /// haproxy, `controlPlaneLoadBalancer.type: Keepalived`) is configured on every control-plane host.
    pub const LOAD_BALANCER_READY: &str = "LoadBalancerReady";
    /// KKRemediation: remediation gave up and handed the Machine to its owner for replacement.
    pub const OWNER_REMEDIATION_REQUESTED: &str = "OwnerRemediationRequested";
    /// CAPI Machine (v1beta2): its owner (MachineSet, KubeadmControlPlane) is to remediate it when False.
    pub const MACHINE_OWNER_REMEDIATED: &str = "OwnerRemediated";
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
    /// A field that names another object (a reference, an owner reference, `spec.instanceID`) holds no object
    /// name: nothing was requested for it (the message names the field).
    pub const INVALID_NAME: &str = "InvalidName";
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
    /// The host (recognized by its SSH host key or the address reached) is held by another KKInstance, in
    /// any namespace: nothing ran on it.
    pub const HOST_IN_USE: &str = "HostInUse";
    /// A controller-side download's destination is refused (loopback, link-local, the cluster's ranges, off
    /// the allow-list); the message names the field and the manager flag.
    pub const DOWNLOAD_REFUSED: &str = "DownloadRefused";
    /// The manager's SSH address policy refuses the host's (or its bastion's) address (loopback, link-local,
    /// metadata, the cluster's ranges): nothing was dialled. The message names the field and the flag, and
    /// is the same whatever the port.
    pub const ADDRESS_REFUSED: &str = "AddressRefused";
    /// KKRemediation: containerd and the kubelet were restarted and are active.
    pub const SERVICES_RESTARTED: &str = "ServicesRestarted";
    /// More than one control plane and no load balancer (`spec.controlPlaneLoadBalancer`): the endpoint would be
    /// one control-plane host, and losing it would lose the cluster.
    pub const NO_LOAD_BALANCER: &str = "NoLoadBalancer";
    /// KKRemediation: the host rebooted and answered with a new boot ID.
    pub const HOST_REBOOTED: &str = "HostRebooted";
    /// KKRemediation: a rebooted host did not answer within the strategy's timeout.
    pub const HOST_NOT_BACK: &str = "HostNotBack";
    /// KKRemediation: every attempt of `retryLimit` was used.
    pub const RETRY_LIMIT_REACHED: &str = "RetryLimitReached";
    /// KKRemediation: the Machine has no host to remediate (no KKMachine, or no claimed KKInstance).
    pub const NO_HOST: &str = "NoHost";
    /// CAPI's reason on a Machine's `OwnerRemediated` condition: the owner is to remediate it.
    pub const WAITING_FOR_REMEDIATION: &str = "WaitingForRemediation";
}
