package capie2e

import (
	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"

	capie2e "sigs.k8s.io/cluster-api/test/e2e"
)

// CAPI's self-hosted spec: a cluster from our template, `clusterctl init` into it (every provider a Pod there,
// ours reaching the hosts over SSH from the pod network), `clusterctl move` onto it, no Machine rolled out by
// the move, the Cluster Available as seen from itself, then moved back and deleted. No Kubernetes upgrade: the
// node artifacts carry one Kubernetes version.
//
// capi-e2e.sh hosts: 2 (control plane, worker; in plane mode tcg-single uses the control plane alone)
var _ = Describe("When testing Cluster API working on self-hosted clusters [SelfHosted]", func() {
	capie2e.SelfHostedSpec(ctx, func() capie2e.SelfHostedSpecInput {
		return capie2e.SelfHostedSpecInput{
			E2EConfig:                e2eConfig,
			ClusterctlConfigPath:     clusterctlConfigPath,
			BootstrapClusterProxy:    bootstrapClusterProxy,
			ArtifactFolder:           artifactFolder,
			SkipCleanup:              skipCleanup,
			InfrastructureProvider:   ptr.To(infrastructureProvider()),
			Flavor:                   selfHostedFlavor(),
			SkipUpgrade:              true,
			ControlPlaneMachineCount: ptr.To[int64](1),
			WorkerMachineCount:       ptr.To(selfHostedWorkers()),
			PostNamespaceCreated:     selfHostedNamespaceCreated,
		}
	})
})
