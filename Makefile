# capkk-rs — Cluster API infrastructure provider for SSH-reachable hosts.
#
# Start here:
#   make deps         check (as root with apt: install) every machine prerequisite (hack/deps.list)
#   make quickstart   local management plane + the provider + 2 QEMU VMs: real nodes, a pod running (quickstart-sim:
#                     sandbox hosts with a kubeadm simulator instead, minutes)
#   make help         every target with a one-line description
#
# Checks and tests:
#   make verify       fmt check, clippy -D warnings, CRD and API-docs drift, shellcheck (hack/, test/, .ci/),
#                     deps.list coverage, the docs name only make targets and manager flags that exist
#   make test         every tier of TEST_TIERS, each a make target, in this order:
#                       test-build        one cargo build of every test and binary (one feature set)
#                       mgmt-bin          the management plane's Go binaries (etcd, kube-apiserver, CAPI, clusterctl)
#                       flux-bin          Flux's source-controller and kustomize-controller (Go; for e2e-gitops)
#                       test-unit         unit tests + tests on sandbox SSH hosts (root)
#                       test-integration  tests against the local management plane (mgmt-up)
#                       e2e               whole lifecycle on real CAPI controllers + sandbox hosts
#                       e2e-gitops        a real Flux applies, scales, holds, reverts and prunes a cluster from git
#                       image-test        the manager image (podman) against the plane
#                       release-test      make release, checked; served over HTTP on 127.0.0.1, registered and read by clusterctl
#                       test-vm           VM test hosts under QEMU (test/vm/vm.mk)
#                       test-real-smoke   one real node: kubeadm init on a VM through the controllers
#                       test-real-e2e     3 node containers: control plane + 2 workers, flannel, scale 2->1->2
#                       test-real-ha      3 control planes behind the provider's VIP, its holder powered off, KCP remediation
#                       test-conformance-smoke  13 upstream [Conformance] specs on a 3-node container cluster
#                       test-chaos-smoke  10 seeded faults (manager killed, API server frozen, SSH cut, ...) on node containers
#   make e2e-real     two real nodes end to end (long; not in make test)
#   make deny         cargo-deny: licenses, bans, sources (deny.toml; installs cargo-deny on first use)
#   make release      clusterctl repository, clusterctl-kubekey.sh, image archive, CycloneDX SBOM, SHA256SUMS in $(OUT)
#   make clusterctl-register   register $(OUT) as clusterctl's "kubekey" in your clusterctl.yaml (else: KubeSphere's)
#   make docs-diagrams  render docs/*.dot (Graphviz) into the committed .svg/.png
#
# Management plane (test/mgmt): make mgmt-up | mgmt-status | mgmt-down.  Fragments: test/*/*.mk,
# pkg/cloudinit/cloudinit.mk; each target there carries its own `## description` for `make help`.

SHELL := /bin/bash
.DEFAULT_GOAL := help
CARGO ?= cargo
IMG ?= ghcr.io/capkk-rs/capkk-manager:dev
VERSION ?= v0.1.0
OUT ?= _out
# Machine-wide cache outside the clone (Go binaries, management plane state, VM images, node artifacts):
# every checkout and CI's fresh clones on this machine reuse it. Scripts default to the same path.
CAPKK_CACHE ?= $(HOME)/.cache/capkk-rs
export CAPKK_CACHE
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
TEST_TIERS := test-build mgmt-bin flux-bin test-unit test-integration e2e e2e-gitops
# The image: manager compiled on the host into $(IMAGE_TARGET_DIR) (once per machine; a fresh clone reuses its
# dependencies), the runtime base, the image test against the plane. Times: docs/benchmarks.md.
TEST_TIERS += image-test release-test
# Tiers that start sandbox hosts (machine-global names): run under $(HOSTS_LOCK) when it is set, e.g.
# HOSTS_LOCK="flock -o /tmp/capkk-hosts.lock" when several checkouts test on one machine (-o: daemons a tier
# starts, e.g. the management plane, must not inherit the locked descriptor, or the lock outlives the tier).
HOSTS_TIERS := test-unit test-integration e2e e2e-gitops
HOSTS_LOCK ?=
# TEST_LANE_TIERS: tiers that run in a second lane beside the others (one after another, from the end of
# TEST_LANE_AFTER; a management plane of their own), e.g. the real-node tiers, which mostly wait:
#   make test TEST_LANE_TIERS="test-real-e2e test-real-ha test-conformance-smoke"
# Empty (make's default): every tier in one line. .ci/run puts the real-node tiers in the lane.
# hack/test-tiers.sh; measured in docs/testing.md.
TEST_LANE_TIERS ?=
TEST_LANE_AFTER ?= flux-bin
# Tests that cannot run fail, naming what is missing; CAPKK_ALLOW_SKIP=1 makes them skip instead, and each
# skip is appended here (make test counts them by reason at the end).
export CAPKK_SKIP_LOG ?= $(CURDIR)/target/capkk-skips.log
# The one cargo build of every tier: all workspace targets with one feature set (see hack/test-targets.sh).
# Binaries used by scripts (manager, sandbox, crdgen) come from it too, so nothing compiles twice.
# Under a heartbeat: cargo prints a line per crate, but a long crate or link is silent for minutes.
CARGO_TEST_BUILD = test/lib/heartbeat.sh "cargo build (every test and binary)" \
	$(CARGO) test --workspace --all-targets --no-run
TARGET_DIR = $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)

# Every fragment is required: a missing one must fail here, not silently drop its targets and tiers.
include test/mgmt/mgmt.mk
include test/e2e/e2e.mk
include test/bench/bench.mk
include test/sandbox/sandbox.mk
include test/vm/vm.mk
include pkg/cloudinit/cloudinit.mk
include test/vm/artifacts/artifacts.mk
include test/clusterctl/clusterctl.mk
include test/capi-e2e/capi-e2e.mk
include test/conformance/conformance.mk
include test/chaos/chaos.mk

.PHONY: help deps build test test-build test-unit test-integration verify fmt clippy crds verify-crds shellcheck \
        api-docs verify-api-docs verify-docs verify-deps deny docs-diagrams image image-test docker-build release-manifests release release-test clusterctl-register clean

help: ## show this help
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | sort | column -t -s $$'\t'

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

# The generated references: docs/api.md (every kind and field, from the CRD schemas) and docs/conditions.md
# (condition types, reasons, event reasons, from api/src/consts.rs), written by api/src/bin/apidocs.rs.
API_DOCS := docs/api.md docs/conditions.md
api-docs: ## regenerate docs/api.md and docs/conditions.md from the API types and api/src/consts.rs
	$(CARGO_TEST_BUILD) -q
	$(TARGET_DIR)/debug/apidocs docs

verify-api-docs: ## fail when docs/api.md or docs/conditions.md differs from the API types
	$(CARGO_TEST_BUILD) -q
	@tmp=$$(mktemp -d); $(TARGET_DIR)/debug/apidocs $$tmp >/dev/null && \
	if diff -u docs/api.md $$tmp/api.md && diff -u docs/conditions.md $$tmp/conditions.md; then \
	  echo "API docs up to date"; rm -rf $$tmp; \
	else echo "$(API_DOCS) out of date (or hand-edited): run 'make api-docs'"; rm -rf $$tmp; exit 1; fi

# Every `make TARGET` README.md, CONTRIBUTING.md and the docs name is a target of the Makefile or its fragments,
# and every manager flag they name is one of the manager's (controllers/tests/docs_names.rs); every condition
# type and reason the controllers set is a constant that docs/conditions.md documents (reason_constants.rs).
verify-docs: ## fail when the docs name a make target or manager flag that does not exist, or a reason is a literal
	$(CARGO) test --workspace --test docs_names --test reason_constants

fmt: ## format the code
	$(CARGO) fmt --all

clippy: ## lint, warnings are errors
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Every shell script of hack/, test/ and .ci/: *.sh, and files whose first line runs sh or bash.
SHELL_SCRIPTS = $(shell find hack test .ci -type f -not -path '*/target/*' \
	\( -name '*.sh' -o -exec sh -c 'head -n1 "$$1" | grep -qE "^\#!.*[/ ](ba)?sh$$"' _ {} \; \) -print | LC_ALL=C sort)

shellcheck: ## shellcheck over every shell script of hack/, test/ and .ci/ (sourced files followed)
	@test -n "$(SHELL_SCRIPTS)" || { echo "shellcheck: no scripts found"; exit 1; }
	@shellcheck --external-sources --source-path=SCRIPTDIR $(SHELL_SCRIPTS)
	@echo "shellcheck: $(words $(SHELL_SCRIPTS)) scripts clean"

verify-deps: ## fail when a command the tests or scripts run is missing from hack/deps.list
	$(CARGO) test --workspace --test deps_list

# shellcheck and the format check (~25 s of one core, no cargo build) run beside the test build of the drift checks
# (minutes of compiling): their output is printed when both are done; any failure fails verify.
verify: ## fmt check, clippy, CRD and API-docs drift, shellcheck, deps.list, docs' names
	@side=$$(mktemp); { $(MAKE) --no-print-directory shellcheck && echo "$(CARGO) fmt --all -- --check" && \
	  $(CARGO) fmt --all -- --check; } >"$$side" 2>&1 </dev/null & pid=$$!; \
	  $(MAKE) --no-print-directory verify-crds verify-api-docs; rc=$$?; wait $$pid; side_rc=$$?; \
	  cat "$$side"; rm -f "$$side"; [ $$rc = 0 ] && [ $$side_rc = 0 ]
	$(MAKE) clippy
	$(MAKE) verify-deps
	$(MAKE) verify-docs

# cargo-deny (deny.toml): licenses, bans and sources need no network; advisories need the RustSec database, so
# they run only with DENY_CHECKS="advisories bans licenses sources" where it is reachable. Not in `verify`:
# installing cargo-deny compiles it for minutes (docs/benchmarks.md); once installed a check takes seconds.
DENY_CHECKS ?= bans licenses sources
DENY_VERSION ?= 0.20.2
DENY_ROOT ?= $(CAPKK_CACHE)/cargo-deny-$(DENY_VERSION)
deny: ## cargo-deny: licenses, bans, sources (deny.toml; installs cargo-deny into $(CAPKK_CACHE) on first use)
	@test -x $(DENY_ROOT)/bin/cargo-deny || $(CARGO) install --locked --root $(DENY_ROOT) cargo-deny@$(DENY_VERSION)
	$(DENY_ROOT)/bin/cargo-deny --offline check $(DENY_CHECKS)

docs-diagrams: ## render docs/*.dot with Graphviz (Debian graphviz) into the committed .svg and .png beside them
	@command -v dot >/dev/null || { echo "docs-diagrams: dot not found (apt-get install graphviz)"; exit 1; }
	for f in docs/*.dot; do dot -Tsvg "$$f" -o "$${f%.dot}.svg" && dot -Tpng -Gdpi=110 "$$f" -o "$${f%.dot}.png"; done

test-build: ## compile every tier's tests and binaries once (one feature set)
	$(CARGO_TEST_BUILD)
	@# `cargo test --no-run` links no binary of a crate without an integration test: the fault campaign's driver
	@# is linked here, so that test-chaos-smoke in the lane never waits on the build lock behind other tiers.
	$(CARGO) build -q -p capkk-chaos --bin capkk-chaos

test-unit: ## unit tests + tests on sandbox hosts (root; fails naming what is missing otherwise)
	@sel=$$(hack/test-targets.sh unit) && set -x && $(CARGO) test --workspace --no-fail-fast $$sel

# INTEGRATION_JOBS=N (N > 1, default 3): the integration binaries run N at a time (parallel-tests, hack/devtools:
# each binary's output printed whole when it ends, then a table; what they share and how it is kept apart:
# docs/testing.md). 1 is cargo's one binary after another. 3 took 378-389 s where 1 took 910 s on 2 cores.
INTEGRATION_JOBS ?= 3
test-integration: mgmt-up ## tests against the local management plane (real kube-apiserver, etcd, CAPI)
	@sel=$$(hack/test-targets.sh integration) && if [ "$(INTEGRATION_JOBS)" = 1 ]; then \
	  set -x && $(CARGO) test --workspace --no-fail-fast $$sel; else $(CARGO_TEST_BUILD) -q && set -x && \
	  $(TARGET_DIR)/debug/parallel-tests --jobs $(INTEGRATION_JOBS) --log-dir $(TARGET_DIR)/test-logs/integration -- $$sel; fi

test: deps ## every tier (TEST_TIERS): all run, then a table of results and times and a count of skips
	@TEST_TIERS="$(TEST_TIERS)" HOSTS_TIERS="$(HOSTS_TIERS)" HOSTS_LOCK="$(HOSTS_LOCK)" MAKE="$(MAKE)" \
	  TEST_LANE_TIERS="$(TEST_LANE_TIERS)" TEST_LANE_AFTER="$(TEST_LANE_AFTER)" hack/test-tiers.sh

image: ## build the manager image $(IMG) with podman: manager compiled on the host, base made from Debian packages
	PODMAN="$(PODMAN)" CARGO="$(CARGO)" IMAGE_BUILD="$(IMAGE_BUILD)" IMAGE_TARGET_DIR="$(IMAGE_TARGET_DIR)" \
	  hack/image.sh $(IMG)

image-test: image mgmt-up ## run the image (podman, runc, low ulimits): --help, health, metrics, the local management plane
	PODMAN="$(PODMAN)" test/image/image-test.sh $(IMG)

docker-build: ## the same image with Docker and public base images (build args BUILD_IMAGE, RUNTIME_IMAGE)
	docker build -t $(IMG) .

# The release's image: the tag its components name by default (config/default), so what ships is what is built.
# `make release IMG=...` builds and ships another reference; users usually keep it and set their registry with
# clusterctl's image override (clusterctl-kubekey.sh --image-repository, docs/clusterctl.md).
RELEASE_IMG ?= ghcr.io/capkk-rs/capkk-manager:$(VERSION)
release-manifests release: IMG = $(RELEASE_IMG)
# kubectl (kustomize) is the pinned one of mgmt-bin: the same rendering on every machine.
release-manifests: image mgmt-bin ## clusterctl repository under $(OUT)/infrastructure-kubekey/$(VERSION), clusterctl-kubekey.sh, the image as an OCI archive
	test/release/release-manifests.sh $(OUT) $(VERSION) $(IMG)
	rm -f $(OUT)/capkk-manager-$(VERSION).oci.tar
	$(PODMAN) save --format oci-archive -o $(OUT)/capkk-manager-$(VERSION).oci.tar $(IMG)
	@echo "image archive: $(OUT)/capkk-manager-$(VERSION).oci.tar ($$(du -m $(OUT)/capkk-manager-$(VERSION).oci.tar | cut -f1) MB, $(IMG))"

# The release's SBOM is written by cyclonedx-sbom (hack/devtools) from `cargo metadata` and Cargo.lock. It comes
# from the one test build, so a release compiles nothing of its own (installing cargo-cyclonedx took 20 min
# cold: too much for `make test`, docs/benchmarks.md); after `make test-build` the SBOM takes about a second.
release: release-manifests ## release-manifests + a CycloneDX SBOM of the manager's crate + SHA256SUMS, all in $(OUT)
	$(CARGO_TEST_BUILD) -q
	CYCLONEDX_SBOM=$(TARGET_DIR)/debug/cyclonedx-sbom CARGO=$(CARGO) test/release/release.sh $(OUT) $(VERSION)

# Registers $(OUT)'s repository as clusterctl's "kubekey" in YOUR clusterctl configuration (the one clusterctl
# reads: ~/.config/cluster-api/clusterctl.yaml, kept and merged into). Without it, `kubekey` is clusterctl's
# built-in entry: KubeSphere's CAPKK. IMAGE_REPOSITORY=registry.example.com/capkk adds the image override.
IMAGE_REPOSITORY ?=
clusterctl-register: ## register $(OUT)'s release as clusterctl's "kubekey" in your clusterctl.yaml (IMAGE_REPOSITORY=... for your registry)
	@test -x $(OUT)/clusterctl-kubekey.sh || { echo "no $(OUT)/clusterctl-kubekey.sh: run make release-manifests (or make release) first"; exit 1; }
	$(OUT)/clusterctl-kubekey.sh $(if $(IMAGE_REPOSITORY),--image-repository $(IMAGE_REPOSITORY))

# `make release` into a scratch directory, then the release_* tests read it: SHA256SUMS, the SBOM's contents
# (release_artifacts), and the release as a user installs it (release_clusterctl: served over HTTP on 127.0.0.1,
# registered from another directory, `clusterctl generate provider --describe` and `init list-images`, no path
# of this machine in any file). A tier of `make test` after image-test: the image, the manager's image-profile
# build and the test build are done by then, so the tier is the image rebuilt from cache, its archive, the SBOM
# and the tests.
RELEASE_TEST_OUT ?= $(TARGET_DIR)/release-test
release-test: ## make release into $(RELEASE_TEST_OUT), then check it (release_artifacts.rs, release_clusterctl.rs)
	$(MAKE) --no-print-directory release OUT=$(RELEASE_TEST_OUT)
	@sel=$$(hack/test-targets.sh release) && clusterctl=$$(source test/mgmt/scripts/common.sh && echo "$$BIN_DIR/clusterctl") && \
	  set -x && CAPKK_RELEASE_OUT=$(RELEASE_TEST_OUT) CAPKK_RELEASE_VERSION=$(VERSION) CAPKK_CLUSTERCTL=$$clusterctl \
	  $(CARGO) test --workspace --no-fail-fast $$sel

clean: ## remove build outputs
	$(CARGO) clean
	rm -rf $(OUT)
