package capie2e

import (
	. "github.com/onsi/ginkgo/v2"
	"k8s.io/utils/ptr"

	capie2e "sigs.k8s.io/cluster-api/test/e2e"
)

// CAPI's KubeadmControlPlane remediation spec, as CAPD calls it: 3 control planes (the ha flavor: the endpoint
// is the provider's keepalived VIP with haproxy, so it outlives every host), no worker, each control plane's
// bootstrap held before kubeadm until the spec signals it through a ConfigMap of the bootstrap cluster
// (flavors.py kcp-remediation). The spec labels the first control plane while it is held, the
// MachineHealthCheck finds no Node after 30 s and KCP remediates it before the cluster is initialized (our
// KKMachine is deleted mid-bootstrap: the host work stopped, the host reset); the replacement is released and
// inits the cluster; the second control plane is remediated the same way while held, its replacement released
// and joined; the third is released, joins, and is then remediated by a Node condition (a provisioned control
// plane: etcd member removed, host reset) and replaced; the Cluster Available, every Machine Ready, deleted.
//
// capi-e2e.sh hosts: 3 (3 control planes; a remediated one's replacement takes a free host or its reset one)
var _ = Describe("When testing KCP remediation [KCPRemediation]", func() {
	capie2e.KCPRemediationSpec(ctx, func() capie2e.KCPRemediationSpecInput {
		return capie2e.KCPRemediationSpecInput{
			E2EConfig:              e2eConfig,
			ClusterctlConfigPath:   clusterctlConfigPath,
			BootstrapClusterProxy:  bootstrapClusterProxy,
			ArtifactFolder:         artifactFolder,
			SkipCleanup:            skipCleanup,
			InfrastructureProvider: ptr.To(infrastructureProvider()),
			Flavor:                 ptr.To(specFlavor("kcp-remediation")),
			PostNamespaceCreated:   createHostSecrets,
		}
	})
})
