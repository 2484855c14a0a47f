// Package capie2e runs Cluster API's own provider test suite (sigs.k8s.io/cluster-api/test, v1.14.2) against
// capkk-rs: QuickStartSpec, SelfHostedSpec, KCPAndMachineDeploymentRolloutSpec (CAPI's MachineDeployment
// rollout spec), MachineDeploymentRemediationSpec and ClusterUpgradeConformanceSpec (without the conformance
// tests), with an existing cluster as the bootstrap cluster.
//
// The bootstrap cluster is never created here (no kind, no Docker on this machine): its kubeconfig comes from
// CAPI_E2E_KUBECONFIG. What the BeforeSuite does depends on what that cluster already runs (see README.md):
//   - provider Deployments (clusterctl init ran, e.g. the VM cluster of `make e2e-clusterctl`): nothing is
//     installed; it waits for them to be Available and streams their logs (the framework's own helper);
//   - CAPI's CRDs but no provider Deployment (the local management plane: controllers run as processes): nothing
//     is installed; it checks that our CRDs are there and that a capkk manager holds a fresh leader Lease;
//   - neither: `clusterctl init` of every provider of the e2e config through the clusterctl configuration.
package capie2e

import (
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/test/framework/clusterctl"
	"sigs.k8s.io/cluster-api/test/framework/ginkgoextensions"
)

// Environment of a run (the make glue, test/capi-e2e/capi-e2e.sh, sets them from a kept VM run or sandbox hosts).
const (
	// envKubeconfig names the bootstrap cluster's kubeconfig.
	envKubeconfig = "CAPI_E2E_KUBECONFIG"
	// envSSHKey names the file holding the private key the hosts accept (it becomes the cluster's SSH Secret).
	envSSHKey = "CAPI_E2E_SSH_KEY_FILE"
	// envRegistryUser and envRegistryPassword: Basic auth of the nodes' registry (the tcg flavor's Secret).
	envRegistryUser     = "CAPI_E2E_REGISTRY_USER"
	envRegistryPassword = "CAPI_E2E_REGISTRY_PASSWORD"
	// envNodeRegistry (host:port) is that registry; with the credentials it also becomes containerd's mirror of
	// registry.k8s.io (the upgrades flavor's Secret, see k8sIOMirrorSecretName).
	envNodeRegistry = "NODE_REGISTRY"
	// envFlavor selects the cluster template flavor ("" = the default template, "tcg" = the VM flavor).
	envFlavor = "CAPI_E2E_FLAVOR"
	// envSelfHostedFlavor and envSelfHostedWorkers: SelfHostedSpec's flavor (default: envFlavor's) and worker
	// count (default 1). On two TCG cores the cluster that becomes a management cluster fits as one untainted
	// control-plane node running every provider's Pod (the shape make e2e-clusterctl measured).
	envSelfHostedFlavor  = "CAPI_E2E_SELF_HOSTED_FLAVOR"
	envSelfHostedWorkers = "CAPI_E2E_SELF_HOSTED_WORKERS"
	// envIntervalMax caps every interval's timeout (a Go duration): the config's are for TCG VMs, sandbox hosts
	// answer in seconds and a spec that cannot pass there should fail in minutes, not hours.
	envIntervalMax = "CAPI_E2E_INTERVAL_MAX"
	// envSelfHostedInitWait (a Go duration), when set: SelfHostedSpec's cluster is initialized by the suite,
	// with the real clusterctl binary (on PATH) and this --wait-provider-timeout, before the framework's own
	// init step, which then finds the provider Deployments and only waits for them (its wait-controllers
	// interval). The framework's init is clusterctl's library with its fixed 5 min per provider, which a
	// one-node TCG cluster under load misses (CAPI's bootstrap provider: not Available after 5 min).
	envSelfHostedInitWait = "CAPI_E2E_SELF_HOSTED_INIT_WAIT"

	// The Secrets every spec namespace gets; the flavors reference them by these names.
	sshSecretName      = "capi-e2e-ssh"
	registrySecretName = "capi-e2e-registry"
	// k8sIOMirrorSecretName holds containerd's hosts.toml for registry.k8s.io (key hosts.toml): the upgrades
	// flavor keeps kubeadm's image names upstream (CAPI's upgrade spec checks kube-proxy's) and pulls them from
	// the nodes' registry with its Basic auth header (test/vm/tcg-knobs.py --k8s-io-mirror-secret).
	k8sIOMirrorSecretName = "capi-e2e-k8s-io-mirror"
	// clusterctl move takes objects with this label along even when no owner chain reaches them.
	moveLabel = "clusterctl.cluster.x-k8s.io/move"
	// Our manager's leader Leases live here (the Deployment's namespace; local processes use it too).
	managerNamespace = "capkk-system"
)

var (
	configPath         string
	artifactFolder     string
	clusterctlConfig   string
	useExistingCluster bool
	skipCleanup        bool

	// Not a signal context: on Ctrl-C Ginkgo interrupts the spec and then runs its cleanup (AfterEach deletes the
	// spec's cluster, which resets the hosts), which a cancelled context would fail at once.
	ctx = context.Background()

	watchesCtx, cancelWatches = context.WithCancel(ctx)

	e2eConfig             *clusterctl.E2EConfig
	clusterctlConfigPath  string
	bootstrapClusterProxy framework.ClusterProxy
)

func init() {
	flag.StringVar(&configPath, "e2e.config", "", "path to the e2e config file (test/capi-e2e/config/capkk.yaml)")
	flag.StringVar(&artifactFolder, "e2e.artifacts-folder", "", "folder where e2e test artifacts are stored")
	flag.StringVar(&clusterctlConfig, "e2e.clusterctl-config", "", "the clusterctl configuration of test/clusterctl (config.sh) with the flavor in its kubekey repository")
	flag.BoolVar(&useExistingCluster, "e2e.use-existing-cluster", false, "must be true: the bootstrap cluster is the existing cluster of "+envKubeconfig)
	flag.BoolVar(&skipCleanup, "e2e.skip-resource-cleanup", false, "if true, the spec clusters and namespaces are left in place")
}

func TestE2E(t *testing.T) {
	g := NewWithT(t)
	ctrl.SetLogger(klog.Background())
	g.Expect(artifactFolder).NotTo(BeEmpty(), "-e2e.artifacts-folder is required")
	g.Expect(os.MkdirAll(artifactFolder, 0o750)).To(Succeed(), "cannot create -e2e.artifacts-folder %q", artifactFolder)

	RegisterFailHandler(Fail)
	w, err := ginkgoextensions.EnableFileLogging(filepath.Join(artifactFolder, "ginkgo-log.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	defer w.Close()

	RunSpecs(t, "capkk-rs capi-e2e")
}

var _ = SynchronizedBeforeSuite(func() []byte {
	Expect(useExistingCluster).To(BeTrue(), "-e2e.use-existing-cluster=true is required: this suite never creates a bootstrap cluster (kind needs Docker, which this machine does not have)")
	kubeconfig := os.Getenv(envKubeconfig)
	Expect(kubeconfig).NotTo(BeEmpty(), "%s must name the bootstrap cluster's kubeconfig", envKubeconfig)
	Expect(kubeconfig).To(BeAnExistingFile(), "%s=%q does not exist", envKubeconfig, kubeconfig)
	Expect(configPath).To(BeAnExistingFile(), "-e2e.config must be an existing file")
	Expect(clusterctlConfig).To(BeAnExistingFile(), "-e2e.clusterctl-config must be an existing file (test/clusterctl/config.sh writes it)")

	Byf("Loading the e2e config %q", configPath)
	e2eConfig = loadE2EConfig(configPath)

	// The template variables go into a copy of the clusterctl configuration (values from the environment win over
	// the e2e config's, as everywhere in the framework), so that `clusterctl generate cluster` of every spec sees
	// them; the original stays as test/clusterctl wrote it.
	clusterctlConfigPath = filepath.Join(artifactFolder, "clusterctl-config.yaml")
	vars := map[string]string{}
	for k := range e2eConfig.Variables {
		vars[k] = e2eConfig.MustGetVariable(k)
	}
	Expect(clusterctl.CopyAndAmendClusterctlConfig(ctx, clusterctl.CopyAndAmendClusterctlConfigInput{
		ClusterctlConfigPath: clusterctlConfig,
		OutputPath:           clusterctlConfigPath,
		Variables:            vars,
	})).To(Succeed())

	By("Using the existing bootstrap cluster " + kubeconfig)
	bootstrapClusterProxy = framework.NewClusterProxy("bootstrap", kubeconfig, initScheme())
	prepareBootstrapCluster(bootstrapClusterProxy)

	return []byte(strings.Join([]string{artifactFolder, configPath, clusterctlConfigPath, kubeconfig}, ","))
}, func(data []byte) {
	parts := strings.Split(string(data), ",")
	Expect(parts).To(HaveLen(4))
	artifactFolder, configPath, clusterctlConfigPath = parts[0], parts[1], parts[2]
	e2eConfig = loadE2EConfig(configPath)
	bootstrapClusterProxy = framework.NewClusterProxy("bootstrap", parts[3], initScheme())
})

var _ = SynchronizedAfterSuite(func() {}, func() {
	// The bootstrap cluster is not ours: only the watches and the proxy are closed, nothing is torn down.
	cancelWatches()
	if bootstrapClusterProxy != nil {
		bootstrapClusterProxy.Dispose(ctx)
	}
})

func loadE2EConfig(path string) *clusterctl.E2EConfig {
	config := clusterctl.LoadE2EConfig(ctx, clusterctl.LoadE2EConfigInput{ConfigPath: path})
	limit := os.Getenv(envIntervalMax)
	if limit == "" {
		return config
	}
	capped, err := time.ParseDuration(limit)
	Expect(err).NotTo(HaveOccurred(), "%s=%q is not a duration", envIntervalMax, limit)
	for key, interval := range config.Intervals {
		timeout, err := time.ParseDuration(interval[0])
		Expect(err).NotTo(HaveOccurred(), "interval %s: %q is not a duration", key, interval[0])
		if timeout > capped {
			config.Intervals[key] = append([]string{limit}, interval[1:]...)
		}
	}
	return config
}

func initScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	framework.TryAddDefaultSchemes(scheme)
	Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
	Expect(coordinationv1.AddToScheme(scheme)).To(Succeed())
	return scheme
}

// prepareBootstrapCluster installs the providers only where nothing runs them yet (see the package comment).
func prepareBootstrapCluster(proxy framework.ClusterProxy) {
	c := proxy.GetClient()
	deployments := framework.GetControllerDeployments(ctx, framework.GetControllerDeploymentsInput{Lister: c})
	capiCRD := crdExists(c, "clusters.cluster.x-k8s.io")
	logFolder := filepath.Join(artifactFolder, "clusters", proxy.GetName())
	switch {
	case len(deployments) > 0:
		Byf("Bootstrap cluster mode: %d provider Deployments run as Pods (clusterctl init ran): not re-installing; waiting for them to be Available", len(deployments))
		clusterctl.InitManagementClusterAndWatchControllerLogs(watchesCtx, clusterctl.InitManagementClusterAndWatchControllerLogsInput{
			ClusterProxy:             proxy,
			ClusterctlConfigPath:     clusterctlConfigPath,
			InfrastructureProviders:  e2eConfig.InfrastructureProviders(),
			LogFolder:                logFolder,
			DisableMetricsCollection: true,
		}, e2eConfig.GetIntervals(proxy.GetName(), "wait-controllers")...)
	case capiCRD:
		By("Bootstrap cluster mode: CAPI's CRDs without provider Deployments (controllers run as processes, e.g. the local management plane): not installing anything")
		for _, crd := range []string{"kkclusters.infrastructure.cluster.x-k8s.io", "kkmachines.infrastructure.cluster.x-k8s.io", "kkinstances.infrastructure.cluster.x-k8s.io"} {
			Expect(crdExists(c, crd)).To(BeTrue(), "the bootstrap cluster runs CAPI but lacks our CRD %s: install the provider's CRDs (test/e2e/e2e.sh hosts does)", crd)
		}
		expectFreshManagerLease(c)
	default:
		By("Bootstrap cluster mode: no provider installed: clusterctl init of every provider of the e2e config")
		clusterctl.InitManagementClusterAndWatchControllerLogs(watchesCtx, clusterctl.InitManagementClusterAndWatchControllerLogsInput{
			ClusterProxy:             proxy,
			ClusterctlConfigPath:     clusterctlConfigPath,
			InfrastructureProviders:  e2eConfig.InfrastructureProviders(),
			LogFolder:                logFolder,
			DisableMetricsCollection: true,
		}, e2eConfig.GetIntervals(proxy.GetName(), "wait-controllers")...)
	}
}

func crdExists(c client.Client, name string) bool {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	err := c.Get(ctx, client.ObjectKey{Name: name}, crd)
	if apierrors.IsNotFound(err) {
		return false
	}
	Expect(err).NotTo(HaveOccurred(), "reading CRD %s", name)
	return true
}

// expectFreshManagerLease: a manager process is not visible as a Deployment, but it holds a leader Lease in
// capkk-system and renews it; a Lease renewed within twice its duration means a manager runs.
func expectFreshManagerLease(c client.Client) {
	leases := &coordinationv1.LeaseList{}
	Expect(c.List(ctx, leases, client.InNamespace(managerNamespace))).To(Succeed())
	var seen []string
	for _, l := range leases.Items {
		if l.Spec.RenewTime == nil || l.Spec.HolderIdentity == nil || l.Spec.LeaseDurationSeconds == nil {
			continue
		}
		age := time.Since(l.Spec.RenewTime.Time)
		seen = append(seen, fmt.Sprintf("%s (holder %s, renewed %s ago)", l.Name, *l.Spec.HolderIdentity, age.Round(time.Second)))
		if age < 2*time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second {
			Byf("A capkk manager runs: Lease %s/%s held by %s, renewed %s ago", managerNamespace, l.Name, *l.Spec.HolderIdentity, age.Round(time.Second))
			return
		}
	}
	Fail(fmt.Sprintf("no capkk manager holds a fresh leader Lease in %s (Leases: %v): start one watching every namespace (test/e2e/e2e.sh hosts does)", managerNamespace, seen))
}

// createHostSecrets is every spec's PostNamespaceCreated: the Secrets the flavors reference, in the spec's
// namespace of the cluster given (the bootstrap cluster, and the self-hosted one before the move), each with the
// move label so that `clusterctl move` takes them along.
func createHostSecrets(proxy framework.ClusterProxy, namespace string) {
	keyFile := os.Getenv(envSSHKey)
	Expect(keyFile).NotTo(BeEmpty(), "%s must name the private key file the hosts accept", envSSHKey)
	key, err := os.ReadFile(keyFile) //nolint:gosec // a path the operator chose
	Expect(err).NotTo(HaveOccurred(), "reading %s=%q", envSSHKey, keyFile)
	secrets := []*corev1.Secret{{
		ObjectMeta: metav1.ObjectMeta{Name: sshSecretName, Namespace: namespace, Labels: map[string]string{moveLabel: ""}},
		Data:       map[string][]byte{"privateKey": key},
	}}
	if user := os.Getenv(envRegistryUser); user != "" {
		password := os.Getenv(envRegistryPassword)
		secrets = append(secrets, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: registrySecretName, Namespace: namespace, Labels: map[string]string{moveLabel: ""}},
			Data:       map[string][]byte{"username": []byte(user), "password": []byte(password)},
		})
		if registry := os.Getenv(envNodeRegistry); registry != "" {
			secrets = append(secrets, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: k8sIOMirrorSecretName, Namespace: namespace, Labels: map[string]string{moveLabel: ""}},
				Data:       map[string][]byte{"hosts.toml": []byte(k8sIOMirrorHostsTOML(registry, user, password))},
			})
		}
	}
	for _, s := range secrets {
		err := proxy.GetClient().Create(ctx, s)
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		Expect(err).NotTo(HaveOccurred(), "creating Secret %s/%s", namespace, s.Name)
	}
}

// selfHostedNamespaceCreated is SelfHostedSpec's PostNamespaceCreated: createHostSecrets, and in the
// self-hosted cluster (not the bootstrap one), with envSelfHostedInitWait set, `clusterctl init` of the e2e
// config's providers through the same clusterctl configuration, as a user on slow machines runs it.
func selfHostedNamespaceCreated(proxy framework.ClusterProxy, namespace string) {
	createHostSecrets(proxy, namespace)
	wait := os.Getenv(envSelfHostedInitWait)
	if wait == "" || proxy.GetName() == bootstrapClusterProxy.GetName() {
		return
	}
	d, err := time.ParseDuration(wait)
	Expect(err).NotTo(HaveOccurred(), "%s=%q is not a duration", envSelfHostedInitWait, wait)
	bin, err := exec.LookPath("clusterctl")
	Expect(err).NotTo(HaveOccurred(), "%s needs the clusterctl binary on PATH", envSelfHostedInitWait)
	args := []string{
		"init", "--config", clusterctlConfigPath, "--kubeconfig", proxy.GetKubeconfigPath(),
		"--core", "cluster-api", "--bootstrap", "kubeadm", "--control-plane", "kubeadm",
		"--infrastructure", infrastructureProvider(),
		"--wait-providers", "--wait-provider-timeout", strconv.Itoa(int(d.Seconds())),
	}
	By(fmt.Sprintf("clusterctl %s (the suite's init of the self-hosted cluster)", strings.Join(args, " ")))
	logDir := filepath.Join(artifactFolder, "clusters", proxy.GetName())
	Expect(os.MkdirAll(logDir, 0o750)).To(Succeed())
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput() //nolint:gosec // the suite's own arguments
	_ = os.WriteFile(filepath.Join(logDir, "clusterctl-init-suite.log"), out, 0o600)
	Expect(err).NotTo(HaveOccurred(), "clusterctl init of the self-hosted cluster: %s", out)
}

// k8sIOMirrorHostsTOML is containerd's registry host configuration that sends registry.k8s.io's pulls to the
// plain-HTTP registry at hostPort, authenticated as the product writes it for a private registry (a Basic
// Authorization header).
func k8sIOMirrorHostsTOML(hostPort, user, password string) string {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	host := "http://" + hostPort
	return fmt.Sprintf("server = \"https://registry.k8s.io\"\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n\n[host.%q.header]\n  Authorization = [%q]\n",
		host, host, "Basic "+auth)
}

// infrastructureProvider: ours with the version of the repository; without a version clusterctl would look it up
// in the bootstrap cluster's inventory, which the local plane (not made by clusterctl init) does not have.
func infrastructureProvider() string { return "kubekey:" + e2eConfig.MustGetVariable("CAPKK_VERSION") }

// flavor: the cluster template flavor of every spec ("" is clusterctl's default template).
func flavor() string { return os.Getenv(envFlavor) }

// specFlavor: the flavor of a spec that needs its own (CAPI's name for it, e.g. "md-remediation"), made from
// every spec's flavor: "md-remediation" on the default template, "tcg-md-remediation" on the tcg one (the make
// glue writes them with test/capi-e2e/flavors.py).
func specFlavor(name string) string {
	if base := flavor(); base != "" {
		return base + "-" + name
	}
	return name
}

// selfHostedFlavor: SelfHostedSpec's flavor, envSelfHostedFlavor when set, else every spec's.
func selfHostedFlavor() string {
	if f, ok := os.LookupEnv(envSelfHostedFlavor); ok {
		return f
	}
	return flavor()
}

// selfHostedWorkers: SelfHostedSpec's worker count, envSelfHostedWorkers when set (a bad value fails the spec).
func selfHostedWorkers() int64 {
	v, ok := os.LookupEnv(envSelfHostedWorkers)
	if !ok {
		return 1
	}
	n, err := strconv.ParseInt(v, 10, 64)
	Expect(err).NotTo(HaveOccurred(), "%s=%q: a worker count", envSelfHostedWorkers, v)
	Expect(n).To(BeNumerically(">=", 0), "%s=%q: a worker count", envSelfHostedWorkers, v)
	return n
}

// Byf is By with a format.
func Byf(format string, a ...interface{}) { By(fmt.Sprintf(format, a...)) }
