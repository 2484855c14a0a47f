# Makefile fragment for the real test hosts (test/vm: node containers and VMs) and the real-node tiers.
# Included from the top Makefile.
#
# The real-node targets run their hosts as node containers (HOSTS=containers, the default: privileged podman
# containers with systemd and sshd on this machine's kernel, at native speed) or as QEMU VMs (HOSTS=vms), e.g.
# `make e2e-real HOSTS=vms`. make e2e-real-remediation defaults to VMs (its reboot tier needs a kernel of its own).
#
#   make vm-image             build (or find in $CAPKK_CACHE/vm) the Debian VM image
#   make test-vm              VM tier tests: boot, identity, SSH with pinned ed25519 host key, watchdog
#   make test-real-smoke      1 VM through our controllers to a Ready Node, our manager Deployment as a Pod on it
#                             (Ready, holding its Lease, handing it over), and back (in TEST_TIERS, after test-vm)
#   make e2e-real             2 VMs: control plane + worker Ready, CoreDNS, a pod over the pod network, scale the
#                             worker 1 -> 0 -> 1, delete the Cluster (the full real lifecycle; not in TEST_TIERS)
#   make quickstart           e2e-real's cluster (2 node containers) left running to explore; make quickstart-down
#                             removes it (quickstart-real and quickstart-real-down: the same, by their earlier names;
#                             make quickstart-vm / quickstart-vm-down: the same on 2 QEMU VMs)
#   make e2e-real-day2        2 VMs: the worker one minor behind the control plane, upgraded in place through CAPI's
#                             hooks, repaired by a KKRemediation, rolled across versions onto the VM it freed, a
#                             workload probed through its Service all along (issue 24; long, not in TEST_TIERS)
#   make e2e-real-remediation 3 VMs: the worker's VM cut off from the network; the KKRemediation's tiers fail, CAPI
#                             replaces the Machine on the spare VM, the unreachable host is quarantined (issue 24)
#   make e2e-real-ha          5 hosts: 3 control planes behind the provider's keepalived VIP + haproxy (the ha flavor),
#                             a worker, a spare; the VIP's holder powered off: VIP move time, API and workload gaps
#                             (capkk-bench failover), KCP replaces the lost Machine on the spare, etcd back at 3
#                             voting members (issue 41); `make test-real-ha` runs it as a tier of TEST_TIERS
#   make e2e-real-roll        REAL_CPS=3 (or 1) control planes behind the provider's VIP, a worker and a spare, all one
#                             Kubernetes minor behind; KCP's roll then the MachineDeployment's, workload and API
#                             probed throughout, reused hosts checked at the new binaries and images (issue 41)
#   make e2e-real-defaults    e2e-real's 2 node containers from `clusterctl generate cluster` with no component
#                             versions at all: Ready nodes, and every KKMachine's status.components and every host's
#                             containerd/runc/crictl/pause are the component defaults of the Kubernetes version
#                             (issue 44; not in TEST_TIERS)
#   make e2e-readme           README.md's install path run as written: its values/install/cluster/apply blocks taken
#                             out of README.md (vm readme-block) and run byte for byte with the test's values block,
#                             against a management cluster on a node container and 2 node containers as the host
#                             pool: providers Available, list-images names our image, demo's Nodes Ready (flannel),
#                             CoreDNS Ready (issue 44; not in TEST_TIERS)
#   make e2e-clusterctl       VMs become a management cluster through the real `clusterctl init --infrastructure
#                             kubekey` (test/clusterctl's artifacts); the pivot and upgrade stages are still to come
# HOST_OS=debian13 (any target above on node containers, e.g. `make test-real-smoke HOST_OS=debian13`): hosts built from
# Debian 13 (trixie) packages, their package mirror trixie's; default debian12 (bookworm).
# VMs run under QEMU TCG unless CAPKK_VM_ACCEL=kvm (a machine with real KVM; test/vm/README.md). They need root and qemu-system-x86, qemu-utils, mmdebstrap
# (hack/deps.list).

TEST_TIERS += test-vm

.PHONY: vm-image test-vm

vm-image: ## build or find the cached Debian VM image for real-node tests
	$(CARGO_TEST_BUILD) -q
	test/lib/heartbeat.sh "VM image (cached, or built with mmdebstrap)" $(TARGET_DIR)/debug/vm image

test-vm: ## VM test hosts: boot, identity, SSH, watchdog (needs root, qemu; boots 2 short-lived VMs)
	@sel=$$(hack/test-targets.sh vm) && set -x && $(CARGO) test --workspace --no-fail-fast $$sel

.PHONY: test-real-smoke real-smoke-down

# Every landing proves a real node: kubeadm init on a real host (a node container: the machine's kernel, native
# speed) through the production path. Cold, it also builds the node artifacts (test/vm/artifacts, sharing Go's
# build cache with mgmt-bin). Times: docs/benchmarks.md.
TEST_TIERS += test-real-smoke

test-real-smoke: ## real-node smoke: 1 node container, kubeadm init through our controllers, Node Ready, the manager as a Pod, delete resets it
	IMG="$(IMG)" PODMAN="$(PODMAN)" test/vm/real.sh smoke

real-smoke-down: ## tear down what an interrupted real-node smoke left
	test/vm/real.sh down

.PHONY: test-real-e2e real-e2e3-down

# A 3-node cluster on node containers in every landing: 1 control plane + 2 workers, flannel applied by the
# flavor's ClusterResourceSet, a pod reached across nodes and through its Service, a worker power-cycled (flannel's
# routes back), scale 2 -> 1 -> 2 claiming the freed host again, delete (every host reset), the machine's kernel
# settings unchanged. About 3.5 minutes warm.
TEST_TIERS += test-real-e2e

# Its fleet's name (machine-wide: another checkout testing beside this one sets its own).
REAL_E2E3_NAME ?= real-e2e3
test-real-e2e: ## 3 node containers: control plane + 2 workers, flannel, pod network, a worker restarted, scale 2->1->2, delete
	REAL_NAME=$(REAL_E2E3_NAME) REAL_CNI=flannel REAL_WORKERS=2 test/vm/real.sh e2e

real-e2e3-down: ## tear down what an interrupted test-real-e2e left
	REAL_NAME=$(REAL_E2E3_NAME) test/vm/real.sh e2e-down

.PHONY: e2e-clusterctl e2e-clusterctl-down

# The first stages of issue 23's e2e: clusterctl init into a VM cluster; REAL_VMS=1 for a single node.
e2e-clusterctl: ## VMs become a management cluster by the real clusterctl init (every provider a Pod), move onto it, clusterctl upgrade, scale onto a spare VM, move back, delete (long)
	IMG="$(IMG)" PODMAN="$(PODMAN)" test/vm/real.sh clusterctl

e2e-clusterctl-down: ## tear down what an interrupted (or REAL_KEEP=1) e2e-clusterctl left
	test/vm/real.sh clusterctl-down

.PHONY: e2e-readme e2e-readme-down

e2e-readme: ## README.md's install + first-cluster blocks run verbatim (extracted at run time) on node containers: a management cluster, a host pool, demo's Nodes Ready
	IMG="$(IMG)" PODMAN="$(PODMAN)" test/vm/real.sh readme

e2e-readme-down: ## tear down what an interrupted (or REAL_KEEP=1) e2e-readme left
	test/vm/real.sh readme-down

.PHONY: e2e-real-day2 e2e-real-day2-down

e2e-real-day2: ## day 2 on 2 VMs: in-place upgrade through CAPI's hooks, KKRemediation, rolling across versions (long)
	test/vm/real.sh day2

e2e-real-day2-down: ## tear down what an interrupted (or REAL_KEEP=1) e2e-real-day2 left
	test/vm/real.sh day2-down

.PHONY: e2e-real-remediation e2e-real-remediation-down

e2e-real-remediation: ## 3 VMs: the worker cut off, KKRemediation exhausted, Machine replaced on the spare, host quarantined (long)
	test/vm/real.sh remediation

e2e-real-remediation-down: ## tear down what an interrupted (or REAL_KEEP=1) e2e-real-remediation left
	test/vm/real.sh remediation-down

.PHONY: e2e-real-ha e2e-real-ha-down test-real-ha e2e-real-roll e2e-real-roll-down

# An HA control plane in every landing (issue 41): 3 control planes behind the VIP the provider serves
# (keepalived + haproxy over SSH), a worker and a spare on node containers; the VIP's holder powered off (the
# VIP moves, the API and the workload answer again within REAL_HA_MAX_GAP), KCP replaces the lost control plane
# on the spare, etcd back at 3 voting members, delete. About 10 minutes warm.
TEST_TIERS += test-real-ha

test-real-ha: ## the HA control plane of e2e-real-ha on node containers, as a tier of make test
	test/vm/real.sh ha

e2e-real-ha: ## HA control plane: 3 node containers behind the provider's VIP (keepalived + haproxy), its holder powered off (VIP move, API and workload gaps), KCP replaces it on a spare, etcd at 3 members (HOSTS=vms: VMs)
	test/vm/real.sh ha

e2e-real-ha-down: ## tear down what an interrupted (or REAL_KEEP=1) e2e-real-ha left
	test/vm/real.sh ha-down

e2e-real-roll: ## the control plane's roll: REAL_CPS=3 (or 1) control planes behind the provider's VIP, a worker and a spare at the previous Kubernetes, KCP then the MachineDeployment rolled to the current one, workload and API probed throughout (HOSTS=vms: VMs)
	test/vm/real.sh roll

e2e-real-roll-down: ## tear down what an interrupted (or REAL_KEEP=1) e2e-real-roll left
	test/vm/real.sh roll-down

.PHONY: e2e-real-defaults e2e-real-defaults-down

e2e-real-defaults: ## real nodes with no component versions in the YAML: 2 node containers Ready on the component defaults of their Kubernetes version (status.components and the hosts' binaries checked), delete
	test/vm/real.sh defaults

e2e-real-defaults-down: ## tear down what an interrupted (or REAL_KEEP=1) e2e-real-defaults left
	test/vm/real.sh defaults-down

.PHONY: e2e-real e2e-real-down quickstart quickstart-down quickstart-real quickstart-real-down quickstart-vm \
        quickstart-vm-down

e2e-real: ## real nodes end to end: 2 node containers (HOSTS=vms: VMs) join Ready, CoreDNS, pod network, scale 1->0->1, delete
	test/vm/real.sh e2e

e2e-real-down: ## tear down what an interrupted (or REAL_KEEP=1) e2e-real left
	test/vm/real.sh e2e-down

# The newcomer's first command: real nodes (a Ready control plane and worker, a pod running). The simulated
# cluster is `make quickstart-sim` (test/e2e/e2e.mk).
quickstart: deps ## real nodes: 2 node containers (control plane + worker) Ready, a pod running, left up with the commands to explore it (needs root)
	test/vm/real.sh quickstart

quickstart-down: ## tear down the quickstart cluster (VMs, mirror, registry, manager, namespace)
	test/vm/real.sh quickstart-down

quickstart-vm: deps ## the quickstart on 2 QEMU VMs instead of node containers (TCG here: 35-40 min)
	HOSTS=vms test/vm/real.sh quickstart

quickstart-vm-down: ## tear down the VM quickstart
	HOSTS=vms test/vm/real.sh quickstart-down

quickstart-real: quickstart ## the same as quickstart (its earlier name)

quickstart-real-down: quickstart-down ## the same as quickstart-down (its earlier name)
