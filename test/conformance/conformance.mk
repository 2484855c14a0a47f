# Makefile fragment for the upstream Kubernetes conformance suite (test/conformance, docs/conformance.md).
# Included from the top Makefile; runs from the repository root.
#
#   make conformance-bin      e2e.test, ginkgo, agnhost, nnp, sample-apiserver from Go modules (cached by hash)
#   make conformance-images   the images the [Conformance] tests pull, into a registry storage (cached by hash)
#   make conformance-smoke    a capkk-rs cluster on node containers (1 control plane + 2 workers, flannel), a
#                             handful of [Conformance] specs (test/conformance/smoke-focus.txt), summary, delete
#   make conformance          the same cluster, every [Conformance] spec (~1 hour)
#   make conformance-down     remove a cluster left by CONFORMANCE_KEEP=1 (CONFORMANCE_NAME=...)
#   make conformance-report-test   the summary tool's unit tests
# On a shared machine run the last three under the machine's lock: flock /tmp/capkk-heavy.lock make ...

CONFORMANCE_DIR := test/conformance
# Every Go build of these targets yields to the rest of a shared machine.
CONFORMANCE_NICE ?= 15
export CONFORMANCE_NICE

.PHONY: conformance-bin conformance-images conformance-smoke conformance conformance-down conformance-report-test \
        test-conformance-smoke

conformance-bin: ## build the conformance suite (e2e.test, ginkgo, agnhost) from Go modules (cached by content hash)
	$(CONFORMANCE_DIR)/build-suite.sh >/dev/null

conformance-images: conformance-bin node-artifacts ## build the images the [Conformance] tests use (cached by content hash)
	$(CONFORMANCE_DIR)/build-images.sh >/dev/null

conformance-report-test: ## unit tests of the conformance summary tool (Go)
	cd $(CONFORMANCE_DIR)/tools/report && nice -n $(CONFORMANCE_NICE) go vet . && nice -n $(CONFORMANCE_NICE) go test .

# real.sh's own build stage runs `make build`, mgmt-bin and node-artifacts.
conformance-smoke: conformance-images conformance-report-test ## a capkk-rs cluster on node containers + a handful of [Conformance] specs
	$(CONFORMANCE_DIR)/run.sh smoke

# A handful of [Conformance] specs against a capkk-rs cluster in every landing (issue 42): about 4 min warm, after
# the real-node tiers (the same node artifacts); the first run builds the suite and the images (about 15 min cold).
TEST_TIERS += test-conformance-smoke

test-conformance-smoke: ## conformance-smoke as a tier of make test
	$(MAKE) conformance-smoke

conformance: conformance-images conformance-report-test ## a capkk-rs cluster on node containers + every [Conformance] spec (~1 hour)
	$(CONFORMANCE_DIR)/run.sh full

conformance-down: ## remove a conformance cluster kept with CONFORMANCE_KEEP=1 (CONFORMANCE_NAME)
	$(CONFORMANCE_DIR)/run.sh down
