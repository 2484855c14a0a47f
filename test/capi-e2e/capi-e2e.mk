# Makefile fragment for Cluster API's own provider test suite (test/capi-e2e, see its README.md). Included from the
# top Makefile. Not part of `make test`: its specs need real nodes (VMs) and take hours under TCG.
#
#   make capi-e2e-build                     the Ginkgo test binary (cached by content hash in $(CAPKK_CACHE)/capi-e2e/)
#   make capi-e2e CAPI_E2E_FROM=plane:NAME  QuickStartSpec + SelfHostedSpec: the local plane, 2 VMs of a kept run
#   make capi-e2e CAPI_E2E_FROM=real:NAME   QuickStartSpec + SelfHostedSpec against a kept VM management cluster
#   make capi-e2e-hosts                     the local plane with the manager and 4 sandbox hosts, left running
#   make capi-e2e CAPI_E2E_FROM=sandbox:capi-e2e   QuickStartSpec against them (no VM; the kubeadm simulator)
#   make capi-e2e-hosts-down                remove what capi-e2e-hosts left
# CAPI_E2E_FOCUS picks the specs by tag (QuickStart SelfHosted MDRollout MDRemediation K8sUpgrade; `.` = all); the
# glue says how many hosts they need and fails naming what is missing (README.md).

CAPI_E2E_FROM ?=
export CAPI_E2E_FROM

.PHONY: capi-e2e capi-e2e-build capi-e2e-hosts capi-e2e-hosts-down

capi-e2e-build: ## build CAPI's provider test suite binary (sigs.k8s.io/cluster-api/test v1.14.2; cached)
	test/capi-e2e/capi-e2e.sh build

capi-e2e: mgmt-bin ## CAPI's specs (CAPI_E2E_FOCUS; default QuickStart|SelfHosted) against a kept run (CAPI_E2E_FROM=plane:NAME|real:NAME|sandbox:NAME)
	IMG="$(IMG)" PODMAN="$(PODMAN)" test/capi-e2e/capi-e2e.sh run

# Under $(HOSTS_LOCK) when set: sandbox hosts and the plane are machine-global.
capi-e2e-hosts: ## the local plane, the manager (every namespace) and 4 sandbox hosts left running for make capi-e2e
	E2E_NAME=capi-e2e $(HOSTS_LOCK) test/e2e/e2e.sh hosts

capi-e2e-hosts-down: ## remove what capi-e2e-hosts left (the plane stays)
	E2E_NAME=capi-e2e test/e2e/e2e.sh down
