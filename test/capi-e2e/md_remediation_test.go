package capie2e

import (
	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"

	capie2e "sigs.k8s.io/cluster-api/test/e2e"
)

// CAPI's MachineDeployment remediation spec: a cluster of 1 control plane + 1 worker with the md-remediation
// flavor's MachineHealthCheck; the spec sets the Node condition that MachineHealthCheck takes as unhealthy on
// the worker, CAPI deletes its Machine (our KKMachine resets the host) and the MachineSet creates the
// replacement once it is gone, which claims the freed host; the replacement's Node without the condition, the
// Cluster Available, every Machine Ready, deleted.
//
// capi-e2e.sh hosts: 2 (control plane, worker; the replacement reuses the remediated host)
var _ = Describe("When testing MachineDeployment remediation [MDRemediation]", func() {
	capie2e.MachineDeploymentRemediationSpec(ctx, func() capie2e.MachineDeploymentRemediationSpecInput {
		return capie2e.MachineDeploymentRemediationSpecInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To(infrastructureProvider()),
			Flavor:                 ptr.To(specFlavor("md-remediation")),
			PostNamespaceCreated:   createHostSecrets,
		}
	})
})
