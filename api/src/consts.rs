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
/// The Kubernetes version whose component defaults the host's container runtime (containerd, runc, crictl, the
/// sandbox image) was installed with. Set by an in-place upgrade when it changes `spec.kubernetesVersion`: the
/// runtime stays as it was installed, so `KKMachine.status.components` keeps reporting that resolution. Absent:
/// `spec.kubernetesVersion`.
pub const RUNTIME_VERSION_ANNOTATION: &str =
    "kkinstance.infrastructure.cluster.x-k8s.io/runtime-kubernetes-version";
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

/// Condition types (`status.conditions[].type`). `docs/conditions.md` is generated from this module, the
/// [`reasons`] and [`events`] modules (`make api-docs`): each doc comment is the condition's meaning there.
pub mod conditions {
    /// KKCluster, KKMachine, KKInstance: the summary. KKCluster: its endpoint is known and it is provisioned;
    /// KKMachine: its host is provisioned and its KKInstance is Ready; KKInstance: its host work is done. CAPI
    /// mirrors it into the Cluster and the Machine; when False, its reason is that of whatever holds the
    /// object back.
    pub const READY: &str = "Ready";
    /// Every kind: True while the object or its Cluster is paused (`cluster.x-k8s.io/paused`, or
    /// `Cluster.spec.paused`); nothing is reconciled and no host work starts (CAPI's v1beta2 convention).
    pub const PAUSED: &str = "Paused";
    /// KKCluster: every host of the inventory answered the last SSH probe (each `--probe-interval`); False
    /// names the hosts that did not, with `HostUnreachable`.
    pub const HOSTS_REACHABLE: &str = "HostsReachable";
    /// KKCluster: no host address is also listed by another KKCluster of the namespace that holds it; False
    /// (`AddressInUse`) names the address and the other KKCluster, and that host is not claimed from here.
    pub const ADDRESSES_UNIQUE: &str = "AddressesUnique";
    /// KKCluster: the control-plane endpoint is known (`spec.controlPlaneEndpoint`, the load balancer's host,
    /// or the first control-plane host) and written to the status.
    pub const ENDPOINT_READY: &str = "EndpointReady";
    /// KKMachine: a host of the KKCluster's inventory with the Machine's role is claimed (its KKInstance
    /// created); False with `NoHostAvailable`, `AddressInUse`, `WaitingForBootstrapData` or `InvalidSpec` says
    /// why not yet.
    pub const HOST_CLAIMED: &str = "HostClaimed";
    /// KKMachine: mirror of the claimed KKInstance's `Ready` (reason and message copied), so that
    /// `clusterctl describe` shows the host's progress and failures on the Machine.
    pub const INSTANCE_READY: &str = "InstanceReady";
    /// KKInstance: the host's facts were gathered and it was bootstrapped (hostname, swap off, kernel modules,
    /// sysctls, directories): the first phase of host work.
    pub const BOOTSTRAPPED: &str = "Bootstrapped";
    /// KKInstance: the OS packages (`spec.repository`) are installed, from the host's sources or an ISO.
    pub const REPOSITORY_READY: &str = "RepositoryReady";
    /// KKInstance: the Kubernetes binaries (kubeadm, kubelet, kubectl, CNI plugins, crictl) are installed and
    /// their checksums verified.
    pub const BINARIES_READY: &str = "BinariesReady";
    /// KKInstance: the container runtime (containerd and runc) is installed, configured and running.
    pub const CRI_READY: &str = "CRIReady";
    /// KKInstance: the bootstrap data (kubeadm's cloud-init) ran on the host and its sentinel file is present:
    /// the host is a Kubernetes node.
    pub const PROVISIONED: &str = "Provisioned";
    /// KKInstance: being released: the host is reset (kubeadm reset, services and files removed) before it is
    /// free again. False with `HostUnreachable` while the host cannot be reached (quarantined after
    /// `--quarantine-after`).
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
    /// CAPI Machine (v1beta2): set False (`WaitingForRemediation`) by a KKRemediation that gives up, so that the
    /// Machine's owner (MachineSet, KubeadmControlPlane) replaces it.
    pub const MACHINE_OWNER_REMEDIATED: &str = "OwnerRemediated";
}

/// Condition reasons (`status.conditions[].reason`); most are also the reason of the event published with
/// them. Each doc comment says when it is set and what the user does.
pub mod reasons {
    /// `Paused` is True: the object or its Cluster carries CAPI's pause. Nothing to do; unpause to resume.
    pub const PAUSED: &str = "Paused";
    /// `Paused` is False: the object is reconciled.
    pub const NOT_PAUSED: &str = "NotPaused";
    /// KKMachine: its Cluster's `spec.infrastructureRef` is not a KKCluster yet, or the KKCluster is not
    /// provisioned. Transient while a cluster is created; if it stays, look at the KKCluster's conditions.
    pub const WAITING_FOR_CLUSTER_INFRASTRUCTURE: &str = "WaitingForClusterInfrastructure";
    /// KKMachine/KKInstance: the Machine has no bootstrap data Secret yet (`dataSecretName`), so the host is
    /// not provisioned (with `--prepare-before-bootstrap-data`, it is prepared meanwhile). Normal for a worker
    /// until the control plane is up; if it stays, look at the KubeadmConfig.
    pub const WAITING_FOR_BOOTSTRAP_DATA: &str = "WaitingForBootstrapData";
    /// KKMachine `HostClaimed` False: no free, reachable host of the KKCluster's inventory has the Machine's
    /// role (every one is claimed or quarantined). Add a host to `spec.nodes.instances` (with the role), or free
    /// one; retried periodically.
    pub const NO_HOST_AVAILABLE: &str = "NoHostAvailable";
    /// The spec is refused (the message names the field): an inventory or component setting the CRD schema
    /// cannot check, e.g. no control-plane endpoint at all. Terminal: fix the field; the change retries.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// A field that names another object (a reference, an owner reference, `spec.instanceID`) holds no object
    /// name: nothing was requested for it (the message names the field). Terminal: fix the field.
    pub const INVALID_NAME: &str = "InvalidName";
    /// A requested option is accepted by the API but not implemented (e.g. `containerManager.type: docker`, a
    /// non-kubeadm distribution): the message names it. Terminal: change the field.
    pub const UNSUPPORTED: &str = "Unsupported";
    /// Work in progress (host work running, a probe or a remediation attempt): the message says which step.
    /// Nothing to do; `status.step` and `status.journal` of the KKInstance show the detail.
    pub const IN_PROGRESS: &str = "InProgress";
    /// A host command failed: the message names the phase, the step, the command, its exit code and its output
    /// tail (also in the KKInstance's `status.journal`). Terminal: fix the cause, then set the retry annotation
    /// (`kkinstance.infrastructure.cluster.x-k8s.io/retry`).
    pub const COMMAND_FAILED: &str = "CommandFailed";
    /// The host (or its bastion) does not answer over SSH: connection refused, timed out, no route. Transient:
    /// retried with backoff; check the address, the firewall and the bastion.
    pub const UNREACHABLE: &str = "HostUnreachable";
    /// The host rejected the SSH credentials (user, key, password) or sudo refused. Terminal: fix the Secret
    /// named by `auth.secretRef` (or the user), then set the retry annotation.
    pub const AUTH_FAILED: &str = "AuthenticationFailed";
    /// The host presented another SSH host key than the one recorded in the KKInstance's `spec.hostKey`: it
    /// was reinstalled or is not the host it claims to be. Terminal: check the host; delete the KKInstance to
    /// trust the new key.
    pub const HOST_KEY_MISMATCH: &str = "HostKeyMismatch";
    /// The credentials Secret the KKInstance reads is missing or lacks its keys (the message names it). Host
    /// work resumes by itself once the Secret is created or fixed (the manager checks it every
    /// `--secret-poll-interval`).
    pub const CREDENTIALS_UNAVAILABLE: &str = "CredentialsUnavailable";
    /// The condition holds: nothing to do.
    pub const READY: &str = "Ready";
    /// The object is being deleted (its host reset and released first). Nothing to do; if it stays, look at
    /// the KKInstance's `Deleting` condition.
    pub const DELETING: &str = "Deleting";
    /// KKInstance: the host could not be reset for `--quarantine-after` and is labelled quarantined: never
    /// claimed again. Clean the host by hand, then delete the KKInstance.
    pub const QUARANTINED: &str = "Quarantined";
    /// A host's address is listed by another KKCluster that holds it (claimed or quarantined there): that host
    /// is not claimed from here. Remove the address from one of the two KKClusters.
    pub const ADDRESS_IN_USE: &str = "AddressInUse";
    /// The host (recognized by its SSH host key or the address reached) is held by another KKInstance, in
    /// any namespace: nothing ran on it. The same machine is listed twice (under another address, in another
    /// KKCluster or namespace): remove the duplicate.
    pub const HOST_IN_USE: &str = "HostInUse";
    /// A controller-side download's destination is refused (loopback, link-local, the cluster's ranges, off
    /// the allow-list); the message names the field and the manager flag. Terminal: fix the URL (or the
    /// manager's `--download-*` flags), then set the retry annotation.
    pub const DOWNLOAD_REFUSED: &str = "DownloadRefused";
    /// The manager's SSH address policy refuses the host's (or its bastion's) address (loopback, link-local,
    /// metadata, the cluster's ranges): nothing was dialled. The message names the field and the flag, and
    /// is the same whatever the port. Terminal: fix the address (or `--ssh-allow-cidr`/`--ssh-deny-cidr`),
    /// then set the retry annotation.
    pub const ADDRESS_REFUSED: &str = "AddressRefused";
    /// KKRemediation: the kubelet (and containerd, when capkk installed it) was restarted and is active.
    pub const SERVICES_RESTARTED: &str = "ServicesRestarted";
    /// More than one control plane and no load balancer (`spec.controlPlaneLoadBalancer`): the endpoint would be
    /// one control-plane host, and losing it would lose the cluster.
    pub const NO_LOAD_BALANCER: &str = "NoLoadBalancer";
    /// KKRemediation: the host rebooted and answered with a new boot ID.
    pub const HOST_REBOOTED: &str = "HostRebooted";
    /// KKRemediation: a rebooted host did not answer within the strategy's timeout; the next attempt follows,
    /// or the Machine is handed to its owner. Look at the host's console.
    pub const HOST_NOT_BACK: &str = "HostNotBack";
    /// KKRemediation: every attempt of `retryLimit` was used; the Machine is handed to its owner
    /// (`OwnerRemediationRequested` True), which replaces it. The old host is reset or quarantined as usual.
    pub const RETRY_LIMIT_REACHED: &str = "RetryLimitReached";
    /// KKRemediation: the Machine has no host to remediate (no KKMachine, or no claimed KKInstance); the
    /// Machine is handed to its owner at once.
    pub const NO_HOST: &str = "NoHost";
    /// CAPI's reason on a Machine's `OwnerRemediated` condition: the owner is to remediate it.
    pub const WAITING_FOR_REMEDIATION: &str = "WaitingForRemediation";
}

/// Reasons of events that are not also a condition's reason (`kubectl get events`, `kubectl describe`).
pub mod events {
    /// KKMachine (Normal): a host was claimed; the note names the host and its address.
    pub const HOST_CLAIMED: &str = "HostClaimed";
    /// KKInstance (Normal): the host was prepared (bootstrap, binaries, container runtime, packages) before the
    /// Machine's bootstrap data exists; provisioning runs once the data is written.
    pub const HOST_PREPARED: &str = "HostPrepared";
    /// KKInstance (Normal): the bootstrap data ran and its sentinel is present.
    pub const PROVISIONED: &str = "Provisioned";
    /// KKInstance (Normal): the host was reset after its Machine went away and is free again.
    pub const HOST_RESET: &str = "HostReset";
    /// KKRemediation (Normal): an attempt of the first tier starts: the kubelet (and containerd when capkk
    /// installed it) is restarted.
    pub const RESTARTING_SERVICES: &str = "RestartingServices";
    /// KKRemediation (Normal): an attempt of the second tier starts: the host is rebooted.
    pub const REBOOTING: &str = "Rebooting";
    /// KKRemediation (Warning): restarting the services failed; the note says why. The next attempt follows, or
    /// the Machine is handed to its owner when none is left (docs/remediation.md).
    pub const SERVICES_RESTART_FAILED: &str = "ServicesRestartFailed";
    /// KKRemediation (Warning): the reboot failed or the host did not come back; the note says why.
    pub const REBOOT_FAILED: &str = "RebootFailed";
    /// KKInstance (Normal): CAPI's in-place update hook upgraded the host's Kubernetes version over SSH.
    pub const UPGRADED_IN_PLACE: &str = "UpgradedInPlace";
    /// KKInstance (Warning): an in-place upgrade failed; the note says which step failed and why, the same message
    /// CAPI's `UpdateMachine` call gets in its answer (docs/upgrades.md).
    pub const IN_PLACE_UPGRADE_FAILED: &str = "InPlaceUpgradeFailed";
}
