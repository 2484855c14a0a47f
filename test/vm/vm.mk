# Makefile fragment for VM test hosts and the real-node tiers (test/vm). Included from the top Makefile.
#
#   make vm-image             build (or find in $CAPKK_CACHE/vm) the Debian VM image
#   make test-vm              VM tier tests: boot, identity, SSH with pinned ed25519 host key, watchdog
#   make test-real-smoke      1 VM through our controllers to a Ready Node and back (not yet in TEST_TIERS)
# VMs run under QEMU TCG unless CAPKK_VM_ACCEL=kvm. They need root and qemu-system-x86, qemu-utils, mmdebstrap
# (hack/deps.list).

TEST_TIERS += test-vm

.PHONY: vm-image test-vm

vm-image: ## build or find the cached Debian VM image for real-node tests
	$(CARGO_TEST_BUILD) -q
	$(TARGET_DIR)/debug/vm image

test-vm: ## VM test hosts: boot, identity, SSH, watchdog (needs root, qemu; boots 2 short-lived VMs)
	@sel=$$(hack/test-targets.sh vm) && set -x && $(CARGO) test --workspace --no-fail-fast $$sel

.PHONY: test-real-smoke real-smoke-down

test-real-smoke: ## real-node smoke: 1 VM, kubeadm init through our controllers, Node Ready, delete resets it (long)
	test/vm/real.sh smoke

real-smoke-down: ## tear down what an interrupted real-node smoke left
	test/vm/real.sh down
