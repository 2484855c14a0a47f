package capie2e

import (
	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"

	capie2e "sigs.k8s.io/cluster-api/test/e2e"
)

// CAPI's quick start: one control plane and one worker from our cluster template, every Machine Ready, the
// Cluster Available, then deleted (every host reset).
//
// capi-e2e.sh hosts: 2 (control plane, worker)
var _ = Describe("When following the Cluster API quick-start [QuickStart]", func() {
	capie2e.QuickStartSpec(ctx, func() capie2e.QuickStartSpecInput {
		return capie2e.QuickStartSpecInput{
			E2EConfig:                e2eConfig,
			ClusterctlConfigPath:     clusterctlConfigPath,
			BootstrapClusterProxy:    bootstrapClusterProxy,
			ArtifactFolder:           artifactFolder,
			SkipCleanup:              skipCleanup,
			InfrastructureProvider:   ptr.To(infrastructureProvider()),
			Flavor:                   ptr.To(flavor()),
			ControlPlaneMachineCount: ptr.To[int64](1),
			WorkerMachineCount:       ptr.To[int64](1),
			PostNamespaceCreated:     createHostSecrets,
		}
	})
})

// The quick start with an HA control plane: the ha flavor (the endpoint the provider serves: a keepalived VIP
// with haproxy in front of every control plane's API server), 3 control planes and a worker, every Machine
// Ready, the Cluster Available, deleted (every host reset, keepalived and haproxy removed with the rest).
//
// capi-e2e.sh hosts: 4 (3 control planes, worker)
var _ = Describe("When following the Cluster API quick-start with 3 control planes behind the provider's endpoint [HA]", func() {
	capie2e.QuickStartSpec(ctx, func() capie2e.QuickStartSpecInput {
		return capie2e.QuickStartSpecInput{
			E2EConfig:                e2eConfig,
			ClusterctlConfigPath:     clusterctlConfigPath,
			BootstrapClusterProxy:    bootstrapClusterProxy,
			ArtifactFolder:           artifactFolder,
			SkipCleanup:              skipCleanup,
			InfrastructureProvider:   ptr.To(infrastructureProvider()),
			Flavor:                   ptr.To(specFlavor("ha")),
			ControlPlaneMachineCount: ptr.To[int64](3),
			WorkerMachineCount:       ptr.To[int64](1),
			PostNamespaceCreated:     createHostSecrets,
		}
	})
})
