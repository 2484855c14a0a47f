# Makefile fragment for the local CAPI management plane (test/mgmt). Included from the top Makefile,
# which runs from the repository root. See test/mgmt/README.md.
#
#   make mgmt-bin      build etcd, kube-apiserver, kubectl, CAPI core/CABPK/KCP managers and clusterctl
#                      (pinned in test/mgmt/tools/*/go.mod) into $(CAPKK_CACHE)/bin/<pins hash>/
#   make flux-bin      build Flux's source-controller and kustomize-controller (pinned in test/mgmt/tools/flux/go.mod)
#                      into $(CAPKK_CACHE)/bin/flux-<pins hash>/, with their CRDs (the GitOps e2e runs them)
#   make operator-bin  build the Cluster API Operator (pinned in test/mgmt/tools/operator/go.mod) into
#                      $(CAPKK_CACHE)/bin/operator-<pins hash>/, with its CRDs (docs/operator.md)
#   make mgmt-up       start (or reuse) the plane; kubeconfig at $(CAPKK_MGMT_DIR)/kubeconfig
#   make mgmt-down     stop what mgmt-up started and wipe its state (logs are kept)
#   make mgmt-status   show the processes and whether the plane answers
#   make fixtures      capture real CABPK bootstrap data into test/fixtures/cabpk/ (starts the plane)
#   make mgmt-test     run the capkk-mgmt test suite against the plane

MGMT_DIR ?= test/mgmt
# CAPKK_CACHE is set (and exported) by the top Makefile.
CAPKK_MGMT_DIR ?= $(CAPKK_CACHE)/mgmt
export CAPKK_MGMT_DIR

# The cold builds of Flux and the Operator are minutes of compiling on a shared machine: lowest priority.
FLUX_NICE ?= 19

.PHONY: mgmt-bin flux-bin operator-bin mgmt-up mgmt-down mgmt-status fixtures mgmt-test

mgmt-bin: ## build the management plane binaries (pinned Go modules; cached by the pins' hash)
	$(MGMT_DIR)/scripts/build-bins.sh

flux-bin: ## build Flux's source-controller and kustomize-controller + CRDs (pinned; cached by the pins' hash)
	nice -n $(FLUX_NICE) $(MGMT_DIR)/scripts/build-bins.sh flux

operator-bin: ## build the Cluster API Operator + its CRDs (pinned; cached by the pins' hash)
	nice -n $(FLUX_NICE) $(MGMT_DIR)/scripts/build-bins.sh operator

mgmt-up: mgmt-bin ## start (or reuse) the local management plane: etcd, kube-apiserver, CAPI controllers
	$(MGMT_DIR)/scripts/mgmt.sh up

mgmt-down: ## stop the management plane and wipe its state (logs are kept)
	$(MGMT_DIR)/scripts/mgmt.sh down

mgmt-status: ## show the management plane's processes and whether it answers
	$(MGMT_DIR)/scripts/mgmt.sh status

fixtures: mgmt-up ## capture real CABPK bootstrap data into test/fixtures/cabpk/
	CAPKK_WRITE_FIXTURES=1 $(CARGO) test -p capkk-mgmt --test mgmt_cabpk -- --nocapture

mgmt-test: mgmt-up ## the capkk-mgmt tests against the management plane
	$(CARGO) test -p capkk-mgmt
