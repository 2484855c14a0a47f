# Makefile fragment for VM test hosts and the real-node tiers (test/vm). Included from the top Makefile.
#
#   make vm-image             build (or find in $CAPKK_CACHE/vm) the Debian VM image
#   make test-vm              VM tier tests: boot, identity, SSH with pinned ed25519 host key, watchdog
# VMs run under QEMU TCG unless CAPKK_VM_ACCEL=kvm. They need root and qemu-system-x86, qemu-utils, mmdebstrap
# (hack/deps.list).

TEST_TIERS += test-vm

.PHONY: vm-image test-vm

vm-image: ## build or find the cached Debian VM image for real-node tests
	$(CARGO_TEST_BUILD) -q
	$(TARGET_DIR)/debug/vm image

test-vm: ## VM test hosts: boot, identity, SSH, watchdog (needs root, qemu; boots 2 short-lived VMs)
	@sel=$$(hack/test-targets.sh vm) && set -x && $(CARGO) test --workspace --no-fail-fast $$sel
