# capkk-rs — Cluster API infrastructure provider for SSH-reachable hosts.
#
#   make quickstart   local management plane + sandbox hosts + the provider, a cluster up end to end
#   make test         every tier: unit, management-plane (real kube-apiserver + CAPI), sandbox hosts, e2e
#   make verify       fmt, clippy -D warnings, generated-CRD drift
#   make help         all targets

SHELL := /bin/bash
.DEFAULT_GOAL := help
CARGO ?= cargo
IMG ?= ghcr.io/capkk-rs/capkk-manager:dev
VERSION ?= v0.1.0
OUT ?= _out
export CARGO_TERM_COLOR ?= never

include test/mgmt/mgmt.mk
-include test/e2e/e2e.mk
-include test/bench/bench.mk
-include test/sandbox/sandbox.mk
-include pkg/cloudinit/cloudinit.mk

.PHONY: help build test test-unit test-integration verify fmt clippy crds verify-crds docker-build release-manifests clean

help: ## show this help
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | sort | column -t -s $$'\t'

build: ## build the manager and tools (debug)
	$(CARGO) build --workspace --bins

crds: ## regenerate config/crd/bases from the API types
	$(CARGO) run -q -p capkk-api --bin crdgen -- config/crd/bases

verify-crds: ## fail when config/crd/bases differs from the API types
	@tmp=$$(mktemp -d); $(CARGO) run -q -p capkk-api --bin crdgen -- $$tmp >/dev/null && \
	if diff -ru config/crd/bases $$tmp; then echo "CRDs up to date"; rm -rf $$tmp; \
	else echo "config/crd/bases is out of date (or hand-edited): run 'make crds'"; rm -rf $$tmp; exit 1; fi

fmt: ## format the code
	$(CARGO) fmt --all

clippy: ## lint, warnings are errors
	$(CARGO) clippy --workspace --all-targets -- -D warnings

verify: verify-crds ## fmt check, clippy, CRD drift
	$(CARGO) fmt --all -- --check
	$(MAKE) clippy

test-unit: ## unit tests and tests that need only the machine (sandbox hosts need root)
	$(CARGO) test --workspace --all-targets --exclude capkk-mgmt --exclude capkk-controllers

test-integration: mgmt-up ## tests against the local management plane (real kube-apiserver, etcd, CAPI)
	$(CARGO) test -p capkk-mgmt -p capkk-controllers

test: ## every tier: unit, management plane, e2e
	$(MAKE) test-unit
	$(MAKE) test-integration
	@if grep -q '^e2e:' test/e2e/e2e.mk 2>/dev/null; then $(MAKE) e2e; else echo "e2e: not present"; fi

docker-build: ## build the manager image (needs a container engine)
	docker build -t $(IMG) .

release-manifests: ## clusterctl local repository under $(OUT)/infrastructure-kubekey/$(VERSION)
	test/release/release-manifests.sh $(OUT) $(VERSION) $(IMG)

clean: ## remove build outputs
	$(CARGO) clean
	rm -rf $(OUT)
