# Makefile fragment for the local CAPI management plane (test/mgmt). Included from the top Makefile,
# which runs from the repository root. See test/mgmt/README.md.
#
#   make mgmt-bin      build etcd, kube-apiserver, kubectl, CAPI core/CABPK/KCP managers and clusterctl
#                      (pinned in test/mgmt/tools/*/go.mod) into $(CAPKK_CACHE)/bin/<pins hash>/
#   make mgmt-up       start (or reuse) the plane; kubeconfig at $(CAPKK_MGMT_DIR)/kubeconfig
#   make mgmt-down     stop what mgmt-up started and wipe its state (logs are kept)
#   make mgmt-status   show the processes and whether the plane answers
#   make fixtures      capture real CABPK bootstrap data into test/fixtures/cabpk/ (starts the plane)
#   make mgmt-test     run the capkk-mgmt test suite against the plane

MGMT_DIR ?= test/mgmt
CAPKK_CACHE ?= $(HOME)/.cache/capkk-rs
CAPKK_MGMT_DIR ?= $(CAPKK_CACHE)/mgmt
export CAPKK_CACHE CAPKK_MGMT_DIR

.PHONY: mgmt-bin mgmt-up mgmt-down mgmt-status fixtures mgmt-test

mgmt-bin:
	$(MGMT_DIR)/scripts/build-bins.sh

mgmt-up: mgmt-bin
	$(MGMT_DIR)/scripts/mgmt.sh up

mgmt-down:
	$(MGMT_DIR)/scripts/mgmt.sh down

mgmt-status:
	$(MGMT_DIR)/scripts/mgmt.sh status

fixtures: mgmt-up
	CAPKK_WRITE_FIXTURES=1 cargo test -p capkk-mgmt --test cabpk -- --nocapture

mgmt-test: mgmt-up
	cargo test -p capkk-mgmt
