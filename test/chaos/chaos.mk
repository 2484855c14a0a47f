# Makefile fragment for the fault campaign (test/chaos; docs/reliability.md). Included from the top Makefile.
#
#   make chaos          a seeded campaign (CHAOS_FAULTS, default 30) on node containers with real kubeadm
#                       (CHAOS_HOSTS=sandbox: sandbox hosts with the kubeadm simulator, no node containers)
#   make chaos-smoke    the short one: 10 faults, 2 per lifecycle step (not in TEST_TIERS yet: docs/reliability.md)
#
# CHAOS_SEED=N replays a run (its seed is printed first and in the report). The campaign runs on a management
# plane of its own (CAPKK_MGMT_DIR, default $(CAPKK_CACHE)/mgmt-chaos, port offset 40): it freezes that
# plane's API server. Node containers run real kubeadm: take the machine's heavy-run lock around it
# (`flock -o /tmp/capkk-heavy.lock make chaos-smoke`) where others share the machine.

CHAOS_HOSTS ?= containers
CHAOS_FAULTS ?= 30
CHAOS_MGMT_DIR ?= $(CAPKK_CACHE)/mgmt-chaos

.PHONY: chaos chaos-smoke chaos-down

chaos: ## seeded fault campaign: manager killed, API server frozen, SSH cut, sshd stopped, hosts restarted, invariants checked after each (CHAOS_HOSTS=containers|sandbox, CHAOS_FAULTS, CHAOS_SEED)
	CHAOS_FAULTS=$(CHAOS_FAULTS) CAPKK_MGMT_DIR=$(CHAOS_MGMT_DIR) test/chaos/chaos.sh $(CHAOS_HOSTS)

chaos-smoke: ## the short seeded fault campaign: 10 faults (CHAOS_HOSTS=containers|sandbox)
	CHAOS_FAULTS=10 CHAOS_FAULTS_PER_STEP=2 CAPKK_MGMT_DIR=$(CHAOS_MGMT_DIR) test/chaos/chaos.sh $(CHAOS_HOSTS)

chaos-down: ## tear down what an interrupted (or CHAOS_KEEP=1) campaign left
	CHAOS_DOWN=1 CAPKK_MGMT_DIR=$(CHAOS_MGMT_DIR) test/chaos/chaos.sh $(CHAOS_HOSTS)
