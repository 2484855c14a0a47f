# Makefile fragment for the fault campaign (test/chaos; docs/reliability.md). Included from the top Makefile.
#
#   make chaos          a seeded campaign (CHAOS_FAULTS, default 30) on node containers with real kubeadm
#                       (CHAOS_HOSTS=sandbox: sandbox hosts with the kubeadm simulator, no node containers)
#   make chaos-smoke    the short one: 10 faults, 2 per lifecycle step (a new seed each run)
#   make test-chaos-smoke  the short one as CI would run it: node containers, the seed fixed (CHAOS_SMOKE_SEED)
#
# CHAOS_SEED=N replays a run (its seed is printed first and in the report). The campaign runs on a management
# plane of its own (CAPKK_MGMT_DIR, default $(CAPKK_CACHE)/mgmt-chaos): it freezes that plane's API server.
# Its port offset is pinned (CHAOS_MGMT_PORT_OFFSET, 40), not inherited: in make test's lane the environment
# holds the lane plane's offset. Node containers run real kubeadm: take the machine's heavy-run lock around it
# (`flock -o /tmp/capkk-heavy.lock make chaos-smoke`) where others share the machine.

CHAOS_HOSTS ?= containers
CHAOS_FAULTS ?= 30
CHAOS_MGMT_DIR ?= $(CAPKK_CACHE)/mgmt-chaos
CHAOS_MGMT_PORT_OFFSET ?= 40
# The tier's seed: a CI failure must replay as it ran (`make chaos-smoke CHAOS_SEED=...`); `make chaos` and
# `make chaos-smoke` draw a new seed each run to explore.
CHAOS_SMOKE_SEED ?= 20261207
CHAOS_PLANE = CAPKK_MGMT_DIR=$(CHAOS_MGMT_DIR) CAPKK_MGMT_PORT_OFFSET=$(CHAOS_MGMT_PORT_OFFSET)

.PHONY: chaos chaos-smoke chaos-down test-chaos-smoke

# A tier of make test (in .ci/run's lane): the reset-host-clean violation the 30-fault campaign of 2026-12-07
# found (seed 7745430: a host restarted after its reset ran a containerd the reset had left enabled but no longer
# marked as capkk's) is fixed in the reset, with its regression tests (docs/reliability.md).
TEST_TIERS += test-chaos-smoke

chaos: ## seeded fault campaign: manager killed, API server frozen, SSH cut, sshd stopped, hosts restarted, invariants checked after each (CHAOS_HOSTS=containers|sandbox, CHAOS_FAULTS, CHAOS_SEED)
	CHAOS_FAULTS=$(CHAOS_FAULTS) $(CHAOS_PLANE) test/chaos/chaos.sh $(CHAOS_HOSTS)

chaos-smoke: ## the short seeded fault campaign: 10 faults (CHAOS_HOSTS=containers|sandbox)
	CHAOS_FAULTS=10 CHAOS_FAULTS_PER_STEP=2 $(CHAOS_PLANE) test/chaos/chaos.sh $(CHAOS_HOSTS)

chaos-down: ## tear down what an interrupted (or CHAOS_KEEP=1) campaign left
	CHAOS_DOWN=1 $(CHAOS_PLANE) test/chaos/chaos.sh $(CHAOS_HOSTS)

test-chaos-smoke: ## the short fault campaign on node containers as CI would run it (seed CHAOS_SMOKE_SEED)
	CHAOS_SEED=$(CHAOS_SMOKE_SEED) CHAOS_FAULTS=10 CHAOS_FAULTS_PER_STEP=2 $(CHAOS_PLANE) test/chaos/chaos.sh containers
