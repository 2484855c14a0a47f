# Makefile fragment for the node artifacts of the real-node tiers (test/vm/artifacts, see its README.md).
# Included from the top Makefile; runs from the repository root.
#
#   make node-artifacts        build binaries, images (in a registry's storage), the component.host tree and the
#                              Debian repository into $(CAPKK_CACHE)/node-artifacts/<hash>/ (cached by content hash)
#   make node-artifacts-prev   the previous Kubernetes minor's binaries, images and release tree (tools-prev/kube)
#                              into $(CAPKK_CACHE)/node-artifacts/prev-<hash>/ and prev.env, for upgrade tests
#   make node-artifacts-test   check both sets (versions, checksums, registry/mirror/apt served for real, images run)
#   make node-serve NODE_SERVE_ADDR=198.18.x.y NODE_SERVE_DIR=DIR    serve them on that address (mirror :8080,
#                              registry :5000; NODE_REGISTRY_USER/NODE_REGISTRY_PASSWORD turn on Basic auth;
#                              NODE_SERVE_PREV=1 serves the previous minor's set too, in the same mirror and registry)
#   make node-serve-down NODE_SERVE_DIR=DIR                          stop what node-serve started

NODE_ARTIFACTS_DIR_SRC ?= test/vm/artifacts
NODE_SERVE_DIR ?= $(CAPKK_CACHE)/node-serve
NODE_SERVE_ADDR ?=
NODE_MIRROR_PORT ?= 8080
NODE_REGISTRY_PORT ?= 5000

NODE_SERVE_PREV ?= 0

.PHONY: node-artifacts node-artifacts-prev node-artifacts-test node-serve node-serve-down

# The heartbeat wraps build.sh from here: build.sh is part of the set's content hash, so a change there would
# rebuild every cached set.
node-artifacts: mgmt-bin ## build the node artifacts for real-node tests (cached by content hash)
	test/lib/heartbeat.sh node-artifacts $(NODE_ARTIFACTS_DIR_SRC)/build.sh

node-artifacts-prev: node-artifacts ## build the previous Kubernetes minor's node artifacts (upgrade tests; cached)
	$(NODE_ARTIFACTS_DIR_SRC)/build-prev.sh

# serve.sh runs the mirror `make build` makes (capkk-mirror of test/sandbox).
node-artifacts-test: node-artifacts node-artifacts-prev build ## check both node artifact sets (versions, checksums, served registry/mirror/apt)
	$(NODE_ARTIFACTS_DIR_SRC)/check.sh

node-serve: node-artifacts build ## serve the node artifacts on NODE_SERVE_ADDR (mirror, registry, apt)
	@test -n "$(NODE_SERVE_ADDR)" || { echo "set NODE_SERVE_ADDR (an address on your bridge in 198.18.0.0/15)"; exit 1; }
	NODE_SERVE_PREV=$(NODE_SERVE_PREV) $(NODE_ARTIFACTS_DIR_SRC)/serve.sh start $(NODE_SERVE_DIR) $(NODE_SERVE_ADDR) $(NODE_MIRROR_PORT) $(NODE_REGISTRY_PORT)

node-serve-down: ## stop what node-serve started
	$(NODE_ARTIFACTS_DIR_SRC)/serve.sh stop $(NODE_SERVE_DIR)
