package capie2e

import (
	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"

	capie2e "sigs.k8s.io/cluster-api/test/e2e"
)

// CAPI's upgrade spec without its conformance run: a cluster of 1 control plane + 1 worker at
// KUBERNETES_VERSION_UPGRADE_FROM (the node artifacts' previous set) from the upgrades flavor (the control-plane
// endpoint a load balancer, etcd and CoreDNS at the tags the registry carries, registry.k8s.io mirrored by the
// nodes' registry); the KubeadmControlPlane bumped to KUBERNETES_VERSION_UPGRADE_TO (a rolling replacement:
// the new control plane joins on a spare host before the old one is removed), kube-proxy, CoreDNS and etcd
// checked at their new images, then the MachineDeployment bumped (its new worker takes the host the old control
// plane left); every Node Ready at the new version, the Cluster Available, every Machine Ready, deleted.
// Conformance (kubetest) is skipped: it needs a conformance image and hours under TCG.
//
// capi-e2e.sh hosts: 3 (control plane, worker, the control-plane rollout's surge control plane)
var _ = Describe("When upgrading a workload cluster [K8sUpgrade]", func() {
	capie2e.ClusterUpgradeConformanceSpec(ctx, func() capie2e.ClusterUpgradeConformanceSpecInput {
		return capie2e.ClusterUpgradeConformanceSpecInput{
			E2EConfig:                e2eConfig,
			ClusterctlConfigPath:     clusterctlConfigPath,
			BootstrapClusterProxy:    bootstrapClusterProxy,
			ArtifactFolder:           artifactFolder,
			SkipCleanup:              skipCleanup,
			SkipConformanceTests:     true,
			InfrastructureProvider:   ptr.To(infrastructureProvider()),
			Flavor:                   ptr.To(specFlavor("upgrades")),
			ControlPlaneMachineCount: ptr.To[int64](1),
			WorkerMachineCount:       ptr.To[int64](1),
			PostNamespaceCreated:     createHostSecrets,
		}
	})
})
