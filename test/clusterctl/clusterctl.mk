# Makefile fragment for what `clusterctl init` installs here (test/clusterctl, see its README.md). Included from the
# top Makefile; runs from the repository root.
#
#   make clusterctl-artifacts     cert-manager and CAPI core/kubeadm bootstrap/kubeadm control plane: static binaries,
#                                 images in a registry's storage, manifests as clusterctl local repositories, into
#                                 $(CAPKK_CACHE)/clusterctl/<hash>/ (cached by content hash)
#   make clusterctl-config CLUSTERCTL_REGISTRY=198.18.0.1:5000 [CLUSTERCTL_OUT=_out/clusterctl]
#                                 write $(CLUSTERCTL_OUT)/clusterctl.yaml for `clusterctl init --config`
#   make clusterctl-artifacts-test    check them: clusterctl renders every provider, the components pass the
#                                 local plane's server-side dry run, every image's binary runs (needs mgmt-up)

CLUSTERCTL_DIR_SRC ?= test/clusterctl
CLUSTERCTL_REGISTRY ?=
CLUSTERCTL_OUT ?= $(OUT)/clusterctl

.PHONY: clusterctl-artifacts clusterctl-config clusterctl-artifacts-test

clusterctl-artifacts: mgmt-bin ## build what clusterctl init installs besides our provider (cached by content hash)
	$(CLUSTERCTL_DIR_SRC)/build.sh

clusterctl-config: clusterctl-artifacts ## write $(CLUSTERCTL_OUT)/clusterctl.yaml for clusterctl init (CLUSTERCTL_REGISTRY=host:port)
	@test -n "$(CLUSTERCTL_REGISTRY)" || { echo "set CLUSTERCTL_REGISTRY (host:port of the registry serving the images)"; exit 1; }
	$(CLUSTERCTL_DIR_SRC)/config.sh $(CLUSTERCTL_REGISTRY) $(CLUSTERCTL_OUT) $(VERSION)

# Under $(HOSTS_LOCK) when set: the check creates (and deletes) namespaces and cert-manager's CRDs on the shared plane.
clusterctl-artifacts-test: clusterctl-artifacts mgmt-up ## check what clusterctl init installs (images run, clusterctl renders, server dry run)
	$(HOSTS_LOCK) $(CLUSTERCTL_DIR_SRC)/check.sh

# The Cluster API Operator (docs/operator.md): it installs CAPI's core from these artifacts' core-components.yaml,
# then our provider from a ConfigMap of the release manifests. Not in `make test`: the Operator's cold build
# (its own CAPI and Kubernetes libraries) is minutes the CI budget has not got.
.PHONY: test-operator operator-install-pods
test-operator: operator-bin clusterctl-artifacts ## the Cluster API Operator installs our provider on a bare plane of its own; our manager runs its args
	@sel=$$(hack/test-targets.sh operator) && set -x && $(HOSTS_LOCK) $(CARGO) test --workspace --no-fail-fast $$sel -- --nocapture

# On a cluster that runs Pods (e.g. `REAL_TO=clusterctl_init REAL_KEEP=1 make e2e-clusterctl`'s): OPERATOR_KUBECONFIG
# = its admin kubeconfig, OPERATOR_REGISTRY = the registry its nodes pull capkk-manager and CAPI's images from.
operator-install-pods: operator-bin clusterctl-artifacts ## the Operator installs our provider on OPERATOR_KUBECONFIG's cluster (Pods run; needs cert-manager)
	@test -n "$(OPERATOR_KUBECONFIG)" || { echo "set OPERATOR_KUBECONFIG (and OPERATOR_REGISTRY)" >&2; exit 2; }
	OPERATOR_KUBECONFIG=$(abspath $(OPERATOR_KUBECONFIG)) OPERATOR_REGISTRY=$(OPERATOR_REGISTRY) \
	  $(CARGO) test --workspace --test operator_install -- --ignored --exact --nocapture \
	  the_operator_installs_the_provider_on_a_cluster_that_runs_pods_and_the_manager_pod_runs_its_args
