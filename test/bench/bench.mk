# Makefile fragment for the benchmarks (test/bench). Included from the top Makefile, which runs from the
# repository root. Benchmarks are not tests: `make test` does not run them. See docs/benchmarks.md.
#
#   make bench          bench-controller (skip with BENCH_CONTROLLER=0), then bench-ssh; the last two lines printed
#                       are `ratio capkk-v3/capkk-rs N=10: Y` and `ratio ansible/capkk-rs N=10: X`; results in
#                       target/bench/
#   make bench-ssh      SSH provisioning benchmark: capkk-rs vs CAPKK v3 vs ansible-core vs OpenSSH ControlMaster
#                       vs local floor on N = $(BENCH_HOSTS) sandbox hosts, $(BENCH_RUNS) runs each (+ warm-up)
#   make bench-v3-driver  build the capkk-v3 driver (KubeKey CAPKK v3.1.12 from the Go module proxy, see
#                       test/bench/capkk-v3/go.mod) into $(CAPKK_CACHE)/bin/capkk-v3-<hash>/ (done by bench-ssh)
#   make bench-controller  the manager on the local management plane (mgmt-up) with $(BENCH_MACHINES)
#                       KKMachines: RSS idle and under load, reconcile latency
#   make bench-provision  the manager with $(BENCH_PROVISION) KKMachines whose sandbox hosts really get provisioned
#                       (artifact mirror, CABPK bootstrap data): bootstrap data → provisioned minus the hosts' own work
#   make bench-real-vm  capkk-rs vs CAPKK v3 installing the real node artifacts (kubelet, kubeadm, kubectl, CNI
#                       plugins, containerd, runc, crictl) on a freshly booted QEMU VM each, one run each, one after
#                       the other; prints per-phase times and `ratio capkk-v3/capkk-rs real-vm: X`; results in
#                       target/bench/real-vm-{table.md,results.json}. Needs root, QEMU and `make node-artifacts`
#   make bench-node-ready  Machine created -> Node Ready and our host phases' share, before/after, from the
#                       captures of real-VM cluster runs: NODE_READY_RUNS="<run>/timeline ..." (test/vm/real.sh
#                       writes them; each run's manager log beside, ../manager.log); runs nothing; prints the
#                       table and last `node-ready <role> after/before: X` and `our-phases <role> after/before: Y`;
#                       results in target/bench/node-ready-{table.md,results.json}
#   make bench-quick    SSH benchmark with N=1,2, one run, no warm-up (smoke check, ~2 min)
#   make bench-venv     ansible-core from PyPI into $(BENCH_VENV) (done by `bench` when missing)
#   make bench-plots    the plots of docs/benchmarks.md (docs/bench/*.png) from the results kept in docs/bench/*.json
#                       (each bench writes target/bench/<bench>-results.json; copy a run there to keep it)
#
# Needs root (sandbox hosts: network namespaces + overlay + sshd), openssh-client/-server, python3 with venv, go.

BENCH_VENV ?= $(CAPKK_CACHE)/bench-venv
# ansible-core 2.19 is the newest line that runs on Python 3.11 (2.20+ need 3.12).
BENCH_ANSIBLE_CORE ?= ansible-core==2.19.14
BENCH_HOSTS ?= 1,10,30
BENCH_RUNS ?= 5
BENCH_WARMUP ?= 1
BENCH_METHODS ?= ours,capkk-v3,ansible,openssh,local
BENCH_ARGS ?=
BENCH_MACHINES ?= 200
BENCH_CONTROLLER ?= 1
BENCH_PROVISION ?= 10
# bench-real-vm: VM size (CPUSxMIB, the same for both methods) and fleet-name prefix (<prefix>-rs, <prefix>-v3).
BENCH_REAL_VM ?= 2x2048
BENCH_REAL_NAME ?= bv
# bench-node-ready: the capture directories to read, one per run.
NODE_READY_RUNS ?=
BENCH_BIN := target/release/capkk-bench
# Debian's python3, for which python3-matplotlib is installed (a python3 earlier on PATH, e.g. pyenv's, lacks it).
BENCH_PYTHON ?= /usr/bin/python3

.PHONY: bench bench-ssh bench-controller bench-provision bench-real-vm bench-node-ready bench-node-ready-runs bench-quick bench-venv bench-build bench-v3-driver bench-plots

bench-venv: $(BENCH_VENV)/bin/ansible-playbook ## ansible-core from PyPI into $(BENCH_VENV) (done by bench-ssh and bench-quick when missing)

$(BENCH_VENV)/bin/ansible-playbook:
	python3 -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet '$(BENCH_ANSIBLE_CORE)'
	$(BENCH_VENV)/bin/ansible-playbook --version | head -1

bench-build: ## build capkk-bench in release mode (done by every bench target that runs one)
	$(CARGO) build --release -p capkk-bench

bench-v3-driver: ## build the capkk-v3 driver (KubeKey CAPKK v3.1.12 from the Go module proxy; done by bench-ssh)
	@test/bench/capkk-v3/build.sh

bench: ## benchmarks: controller (manager RSS/latency), then capkk-rs vs CAPKK v3 vs ansible-core vs OpenSSH vs local (not in make test)
	@if [ "$(BENCH_CONTROLLER)" = 1 ]; then $(MAKE) --no-print-directory bench-controller; fi
	$(MAKE) --no-print-directory bench-ssh

bench-controller: mgmt-up bench-build ## the manager with $(BENCH_MACHINES) KKMachines: RSS idle and under load, reconcile latency
	$(CARGO) build --release -p capkk-controllers --bin manager
	$(BENCH_BIN) controller --machines $(BENCH_MACHINES) --manager target/release/manager

bench-provision: mgmt-up bench-build ## $(BENCH_PROVISION) KKMachines provisioned on sandbox hosts: bootstrap data -> provisioned
	$(CARGO) build --release -p capkk-controllers --bin manager
	$(BENCH_BIN) controller --provision --machines $(BENCH_PROVISION) --manager target/release/manager

bench-ssh: bench-venv bench-build ## SSH provisioning benchmark: capkk-rs vs CAPKK v3 vs ansible-core vs OpenSSH vs local
	CAPKK_BENCH_V3_DRIVER=$$(test/bench/capkk-v3/build.sh) && export CAPKK_BENCH_V3_DRIVER && \
	CAPKK_BENCH_ANSIBLE=$(BENCH_VENV)/bin/ansible-playbook $(BENCH_BIN) ssh \
		--hosts $(BENCH_HOSTS) --runs $(BENCH_RUNS) --warmup $(BENCH_WARMUP) --methods $(BENCH_METHODS) $(BENCH_ARGS)

bench-real-vm: bench-build node-artifacts ## capkk-rs vs CAPKK v3 with the real node artifacts, a freshly booted VM each (not in make test)
	CAPKK_BENCH_V3_DRIVER=$$(test/bench/capkk-v3/build.sh) && export CAPKK_BENCH_V3_DRIVER && \
	$(BENCH_BIN) real-vm --vm $(BENCH_REAL_VM) --name $(BENCH_REAL_NAME) $(BENCH_ARGS)

bench-node-ready: bench-node-ready-runs bench-build ## Machine created -> Node Ready and our phases' share from real-VM run captures (NODE_READY_RUNS="dir ...")
	$(BENCH_BIN) node-ready $(NODE_READY_RUNS) $(BENCH_ARGS)

# Before the release build, which takes minutes: without captures there is nothing to read.
bench-node-ready-runs:
	@[ -n "$(strip $(NODE_READY_RUNS))" ] || { echo 'bench-node-ready: set NODE_READY_RUNS="<run>/timeline ..." (captures of test/vm/real.sh runs)' >&2; exit 2; }

bench-quick: bench-venv bench-build ## benchmark smoke check: N=1,2, one run
	CAPKK_BENCH_V3_DRIVER=$$(test/bench/capkk-v3/build.sh) && export CAPKK_BENCH_V3_DRIVER && \
	CAPKK_BENCH_ANSIBLE=$(BENCH_VENV)/bin/ansible-playbook $(BENCH_BIN) ssh \
		--hosts 1,2 --runs 1 --warmup 0 --methods $(BENCH_METHODS) $(BENCH_ARGS)

bench-plots: ## render docs/bench/*.png from the results in docs/bench/*.json (needs python3-matplotlib)
	$(BENCH_PYTHON) hack/bench-plots.py docs/bench
