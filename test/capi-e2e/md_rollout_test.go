package capie2e

import (
	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"

	capie2e "sigs.k8s.io/cluster-api/test/e2e"
)

// CAPI's MachineDeployment rollout spec (KCPAndMachineDeploymentRolloutSpec since v1.11; its input still says
// MachineDeploymentRolloutSpec): a cluster of 1 control plane + 1 worker whose Machines carry the two taints of
// the kcp-md-taints flavor; the MachineDeployment's in-place mutable fields and both sets of taints changed and
// seen on the Machines and Nodes without any Machine replaced; then the MachineDeployment's infrastructure
// template swapped for a copy, which rolls the worker (maxSurge 1: the new Machine claims a third host before
// the old one is deleted); the Cluster Available, every Machine Ready, deleted.
//
// capi-e2e.sh hosts: 3 (control plane, worker, the rollout's surge worker)
var _ = Describe("When testing KCP and MachineDeployment rolling upgrades and in-place taint propagation [MDRollout]", func() {
	capie2e.KCPAndMachineDeploymentRolloutSpec(ctx, func() capie2e.KCPAndMachineDeploymentRolloutSpecInput {
		return capie2e.KCPAndMachineDeploymentRolloutSpecInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To(infrastructureProvider()),
			Flavor:                 specFlavor("kcp-md-taints"),
			PostNamespaceCreated:   createHostSecrets,
		}
	})
})
