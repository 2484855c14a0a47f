# capkk-rs — Cluster API infrastructure provider for SSH-reachable hosts.
#
#   make deps         check (as root with apt: install) every machine prerequisite (hack/deps.list)
#   make quickstart   local management plane + sandbox hosts + the provider, a cluster up end to end
#   make test         every tier: unit + sandbox hosts, management plane, e2e
#   make verify       fmt, clippy -D warnings, generated-CRD drift
#   make help         all targets

SHELL := /bin/bash
.DEFAULT_GOAL := help
CARGO ?= cargo
IMG ?= ghcr.io/capkk-rs/capkk-manager:dev
VERSION ?= v0.1.0
OUT ?= _out
# Container engine of `make image` (podman; options allowed, e.g. "podman --root DIR --runroot DIR").
PODMAN ?= podman
# `make image` compiles the manager on the host (IMAGE_BUILD=host, cargo profile `image`) into this directory,
# outside the clone so that every checkout and CI's fresh clones on this machine reuse its dependencies;
# IMAGE_BUILD=container compiles in the Dockerfile's build stage instead (hack/image.sh).
IMAGE_BUILD ?= host
IMAGE_TARGET_DIR ?= $(CAPKK_CACHE)/image-target
export CARGO_TERM_COLOR ?= never

# Tiers of `make test`, in this order; each is a make target. All run even when one fails, and `make test`
# ends with a table of their results and times. A new tier is one line: TEST_TIERS += my-tier (in its .mk).
TEST_TIERS := test-build mgmt-bin test-unit test-integration e2e
# The image: manager compiled on the host into $(IMAGE_TARGET_DIR) (cold on 2 cores: 6.2 min at load ~4, 24.6 at ~9; once
# per machine; a fresh clone afterwards: 108 s), the runtime base, the image test against the plane.
TEST_TIERS += image-test
# Tiers that start sandbox hosts (machine-global names): run under $(HOSTS_LOCK) when it is set, e.g.
# HOSTS_LOCK="flock -o /tmp/capkk-hosts.lock" when several checkouts test on one machine (-o: daemons a tier
# starts, e.g. the management plane, must not inherit the locked descriptor, or the lock outlives the tier).
HOSTS_TIERS := test-unit test-integration e2e
HOSTS_LOCK ?=
# Tests that cannot run fail, naming what is missing; CAPKK_ALLOW_SKIP=1 makes them skip instead, and each
# skip is appended here (make test counts them by reason at the end).
export CAPKK_SKIP_LOG ?= $(CURDIR)/target/capkk-skips.log
# Packages whose integration tests need the local management plane (tier test-integration).
export INTEGRATION_PACKAGES ?= capkk-mgmt capkk-controllers
# The one cargo build of every tier: all workspace targets with one feature set (see hack/test-targets.sh).
# Binaries used by scripts (manager, sandbox, crdgen) come from it too, so nothing compiles twice.
CARGO_TEST_BUILD = $(CARGO) test --workspace --all-targets --no-run
TARGET_DIR = $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)

include test/mgmt/mgmt.mk
-include test/e2e/e2e.mk
-include test/bench/bench.mk
-include test/sandbox/sandbox.mk
-include test/vm/vm.mk
-include pkg/cloudinit/cloudinit.mk
-include test/vm/artifacts/artifacts.mk

.PHONY: help deps build test test-build test-unit test-integration verify fmt clippy crds verify-crds image image-test docker-build release-manifests clean

help: ## show this help
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | sort | column -t -s $$'\t'

deps: ## check every prerequisite (hack/deps.list, Rust, Go); as root with apt, install the missing packages
	@hack/deps.sh

build: ## build the manager and tools (debug), with the same feature set as the tests
	$(CARGO_TEST_BUILD)

crds: ## regenerate config/crd/bases from the API types
	$(CARGO_TEST_BUILD) -q
	$(TARGET_DIR)/debug/crdgen config/crd/bases

verify-crds: ## fail when config/crd/bases differs from the API types
	$(CARGO_TEST_BUILD) -q
	@tmp=$$(mktemp -d); $(TARGET_DIR)/debug/crdgen $$tmp >/dev/null && \
	if diff -ru config/crd/bases $$tmp; then echo "CRDs up to date"; rm -rf $$tmp; \
	else echo "config/crd/bases is out of date (or hand-edited): run 'make crds'"; rm -rf $$tmp; exit 1; fi

fmt: ## format the code
	$(CARGO) fmt --all

clippy: ## lint, warnings are errors
	$(CARGO) clippy --workspace --all-targets -- -D warnings

verify: verify-crds ## fmt check, clippy, CRD drift
	$(CARGO) fmt --all -- --check
	$(MAKE) clippy

test-build: ## compile every tier's tests and binaries once (one feature set)
	$(CARGO_TEST_BUILD)

test-unit: ## unit tests + tests on sandbox hosts (root; fails naming what is missing otherwise)
	@sel=$$(hack/test-targets.sh unit) && set -x && $(CARGO) test --workspace --no-fail-fast $$sel

test-integration: mgmt-up ## tests against the local management plane (real kube-apiserver, etcd, CAPI)
	@sel=$$(hack/test-targets.sh integration) && set -x && $(CARGO) test --workspace --no-fail-fast $$sel

test: deps ## every tier (TEST_TIERS): all run, then a table of results and times and a count of skips
	@TEST_TIERS="$(TEST_TIERS)" HOSTS_TIERS="$(HOSTS_TIERS)" HOSTS_LOCK="$(HOSTS_LOCK)" MAKE="$(MAKE)" hack/test-tiers.sh

quickstart: deps

image: ## build the manager image $(IMG) with podman: manager compiled on the host, base made from Debian packages
	PODMAN="$(PODMAN)" CARGO="$(CARGO)" IMAGE_BUILD="$(IMAGE_BUILD)" IMAGE_TARGET_DIR="$(IMAGE_TARGET_DIR)" \
	  hack/image.sh $(IMG)

image-test: image mgmt-up ## run the image (podman, runc, low ulimits): --help, health, metrics, the local management plane
	PODMAN="$(PODMAN)" test/image/image-test.sh $(IMG)

docker-build: ## the same image with Docker and public base images (build args BUILD_IMAGE, RUNTIME_IMAGE)
	docker build -t $(IMG) .

release-manifests: image ## clusterctl repository under $(OUT)/infrastructure-kubekey/$(VERSION) + the image as an OCI archive
	test/release/release-manifests.sh $(OUT) $(VERSION) $(IMG)
	rm -f $(OUT)/capkk-manager-$(VERSION).oci.tar
	$(PODMAN) save --format oci-archive -o $(OUT)/capkk-manager-$(VERSION).oci.tar $(IMG)
	@echo "image archive: $(OUT)/capkk-manager-$(VERSION).oci.tar ($$(du -m $(OUT)/capkk-manager-$(VERSION).oci.tar | cut -f1) MB)"

clean: ## remove build outputs
	$(CARGO) clean
	rm -rf $(OUT)
