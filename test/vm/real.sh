#!/usr/bin/env bash
# Real nodes: the provider's production path against Debian VMs under QEMU (test/vm) with real kubeadm,
# kubelet and containerd, the node artifacts built here (test/vm/artifacts) served by a real file mirror and a
# real OCI registry on the VMs' bridge.
#
#   test/vm/real.sh smoke        1 VM: KubeadmControlPlane (1 replica) inits it through our controllers (node
#                                containers: power-cycled once while kubeadm init runs, the provider resumes), the
#                                Node goes Ready with our providerID, deleting the Cluster resets the VM
#                                and, before that, the manager Deployment exactly as `clusterctl generate provider`
#                                renders it runs as a Pod on that node (image pulled from the bridge registry),
#                                turns Ready and holds its leader Lease (make test-real-smoke, a tier of make test)
#   test/vm/real.sh e2e          2 VMs: the control plane and a MachineDeployment worker, both Nodes Ready, kube-proxy
#                                and CoreDNS Running, the workload image answering over the pod network on the
#                                worker, scale 1 -> 0 (the worker VM reset for real) -> 1 (the same VM joins
#                                again), delete the Cluster (every VM reset)            (make e2e-real)
#   test/vm/real.sh quickstart   e2e's cluster up to the pod network, left running; prints how to explore it
#                                (make quickstart)
#   test/vm/real.sh clusterctl   make e2e-clusterctl: a workload cluster "mgmt" on VMs (REAL_VMS=3: control plane,
#                                worker and a spare host; 2: no spare; 1: control plane only) becomes a management
#                                cluster through the real `clusterctl init --infrastructure kubekey` (cert-manager,
#                                CAPI core, kubeadm bootstrap + control plane and capkk, all as Pods, images from
#                                the bridge registry; test/clusterctl), every provider Pod Running and Ready;
#                                `clusterctl move` pivots the cluster onto itself; from there its MachineDeployment
#                                scales 1 -> 2 (our Pod claims the spare VM over SSH); `clusterctl upgrade apply`
#                                takes our provider to v0.1.1; it moves back to the local plane; delete. The hosts'
#                                provisioning journals show that nothing ran twice across move, upgrade and back.
#   test/vm/real.sh readme       make e2e-readme: README.md's install path as written. Host 1 becomes a management
#                                cluster (made by our controllers on the local plane); README.md's blocks marked
#                                <!-- readme-test: values|install|cluster|apply --> are taken out of README.md at run
#                                time (vm readme-block: a block gone or reshaped fails the run) and run by sh -ex
#                                byte for byte, after the test's own values block (the README's names, hosts 2 and 3
#                                as KUBEKEY_INSTANCES): make release-manifests, podman push, make clusterctl-register,
#                                clusterctl init, list-images (must name our image), the SSH Secret; the cluster
#                                block's demo.yaml gets the container-host settings docs/container-hosts.md names,
#                                the apply block applies it; demo's 2 Nodes Ready (flannel), CoreDNS Ready
#   test/vm/real.sh day2         make e2e-real-day2: 2 VMs, the control plane at the node artifacts' Kubernetes,
#                                the worker one minor older (their previous set), a 2-replica workload probed
#                                through its NodePort Service all along; the worker upgraded in place through
#                                CAPI's in-place hooks served by our manager (same Machine, host, providerID); its
#                                kubelet stopped and repaired by a KKRemediation (MachineHealthCheck); a change the
#                                hooks refuse rolls the worker (maxSurge 0: its VM reset and claimed again); delete.
#                                REAL_VMS=3: the whole cluster starts at the older version behind a TCP load
#                                balancer (test/vm/tcp-lb.py) and the control plane first rolls onto a spare VM
#                                (the old one reset, back in the pool; a control-plane MachineHealthCheck lets KCP
#                                replace a Machine whose join failed); the refused change then rolls the worker
#                                onto the VM the old control plane freed (a host reused across versions)
#   test/vm/real.sh remediation  make e2e-real-remediation: 3 VMs (control plane, worker, spare); the worker's VM
#                                is cut off from the network: the KKRemediation's tiers cannot reach it and give
#                                the Machine back, CAPI replaces it on the spare VM, the dead host is quarantined
#   test/vm/real.sh ha           make e2e-real-ha: 5 hosts, an HA control plane behind the endpoint the provider
#                                serves (the ha flavor: a keepalived VIP on the fleet's bridge, haproxy in front
#                                of every API server): 3 control planes, a worker, a spare control-plane host;
#                                flannel, a workload behind a Service; the host holding the VIP loses its power
#                                (`vm power-off`): the VIP moves, the API answers through it again and the workload
#                                keeps answering (`capkk-bench failover` samples both every 100 ms and prints the
#                                failover table's row); a control-plane MachineHealthCheck has KCP replace the dead
#                                Machine on the spare host; etcd back at 3 voting members (listed before/after)
#   test/vm/real.sh roll         make e2e-real-roll: REAL_CPS (3, or 1) control planes behind the provider's VIP (the ha
#                                flavor), a worker and a spare host, all at the node artifacts' previous Kubernetes;
#                                a 2-replica workload probed through its NodePort and the API through the VIP all
#                                along; the KubeadmControlPlane's version raised (KCP rolls one Machine at a time
#                                onto a free host, an old one's host reset for the next), then the
#                                MachineDeployment's (the worker onto the host an old control plane left): every
#                                reused host runs the new binaries and images, etcd at CPS voting members, the
#                                longest gaps and `kubectl get nodes -o wide` before and after
#   test/vm/real.sh defaults     make e2e-real-defaults: e2e's cluster (control plane + 1 worker, flannel) from
#                                `clusterctl generate cluster` with no component versions anywhere (no
#                                containerManager values; spec.component is the mirror's address, its one override
#                                CNI's checksum file): both Nodes Ready, the workload answering, every KKMachine's
#                                status.components the component defaults of the Kubernetes version
#                                (pkg/service/src/components.rs, via test/vm/artifacts/defaults.sh) and each host
#                                running exactly those; prints `kubectl get nodes -o wide` and the KKMachines'
#                                resolved versions; delete
#   test/vm/real.sh down | e2e-down | defaults-down | quickstart-down | clusterctl-down | readme-down | day2-down | remediation-down |
#                   ha-down | roll-down
#                                tear down what that mode left (VMs, mirror, registry, manager, namespace)
#
# HOSTS=containers (the default) runs every mode's hosts as node containers (test/vm/src/containers.rs:
# privileged podman containers with systemd and sshd on the machine's kernel, at native speed); HOSTS=vms boots
# Debian VMs under QEMU instead (TCG here: 10-100x slower). The remediation mode defaults to VMs: its reboot
# tier needs a kernel of its own. Both sources write the same fleet manifest (state.json); the stages below
# read only that and the `vm` CLI, whichever source made the hosts. On containers the run checks at its end
# that the machine's kernel settings a node could change (`vm sysctls`) are as they were before.
#
# HOST_OS=debian13 (node containers only; default debian12): the hosts are built from Debian 13 (trixie) packages,
# their package mirror serves trixie's (test/vm/src/containers.rs, test/vm/artifacts/debian-repo.sh; exported to
# them as CAPKK_HOST_OS).
#
# REAL_CNI=flannel (the default on node containers): the pod network is flannel, installed the CAPI way (the
# template's flannel flavor: a ClusterResourceSet; its image from the node artifacts' registry); REAL_CNI=static
# (the default on VMs): a bridge CNI config per node and static routes between the nodes (test-environment YAML,
# tcg-knobs.py). REAL_WORKERS=N (e2e and quickstart):
# N workers in the MachineDeployment (default 1; more than 1 needs flannel); the scale stages then go N -> N-1 ->
# N, the host of the first worker leaving and coming back.
#
# REAL_NAME names the run (default real-smoke, real-e2e, real-quickstart: VMs, namespace, work dir); use one of
# your own when others run on the machine. REAL_KEEP=1 leaves everything running at the end, passed or failed
# (the VMs then have no watchdog: the matching down mode removes them). REAL_FROM=STAGE, with REAL_KEEP=1 runs
# of the same REAL_NAME: start at that stage of e2e (after a kept run reached it; e.g. scale-down). REAL_TO=STAGE
# ends the run after that stage (with REAL_KEEP=1: e.g. REAL_TO=clusterctl_init leaves a management cluster on VMs).
# REAL_REGISTRY_EXTRA_STORAGE (space-separated registry storages) adds their images to the run's registry (make
# conformance: the conformance images of test/conformance/build-images.sh).
# REAL_EXTRA_VMS=N boots N more VMs (2 vCPU, 3 GiB) in the fleet, with the package mirror as their apt source and
# in no cluster: free hosts for clusters made from the kept one (CAPI's test framework, test/capi-e2e).
# REAL_VM=PATH runs that vm binary (this branch's, copied after its build, when other checkouts share the cargo
# target directory and may have replaced target/debug/vm meanwhile).
# REAL_MANAGER=PATH runs another manager binary (an older commit's: the before/after runs of issue 28);
# REAL_VARIANT labels the run in $WORK/timeline (e2e, after the worker's Node is Ready), which
# `capkk-bench node-ready` reads.
# REAL_PREV=1 also serves the node artifacts' previous Kubernetes set (make node-artifacts-prev; the day-2 mode
# always does), with its binaries in the KKCluster component: for such clusters at the older version (CAPI's
# upgrade spec in test/capi-e2e).
#
# Nothing here reaches into the product: the cluster is rendered by the real `clusterctl generate cluster` from
# our default template; the TCG knobs (ECDSA keys, leader-election leases, kubeadm timeouts, probe thresholds),
# the registry and the mirror are set in the rendered KubeadmControlPlane/KubeadmConfigTemplate/KKCluster like
# a user would. The hosts are "pre-made machines" whose only preparation is their apt source (the local Debian
# package mirror), as a user's hosts come with their package mirror configured.
#
# shellcheck disable=SC2016,SC2317 # single-quoted scripts are for the VMs' shells; most functions run only
# through check, wait_for and the traps, where shellcheck does not see them called.
set -Eeuo pipefail
# A command that ends the run says so (set -e alone exits without a word; -E: also inside functions).
trap 'log "FATAL: \"$BASH_COMMAND\" exited $? (line $LINENO)"' ERR

MODE=${1:-smoke}
# When the run started, the load and the commit then (timeline_capture; the build is of that tree).
STARTED_EPOCH=$(date +%s.%N) LOAD_START=$(cat /proc/loadavg)
STARTED_COMMIT=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse HEAD 2>/dev/null || echo unknown)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
case $MODE in
  smoke | down) NAME=${REAL_NAME:-real-smoke} ;;
  e2e | e2e-down) NAME=${REAL_NAME:-real-e2e} ;;
  defaults | defaults-down) NAME=${REAL_NAME:-real-defaults} ;;
  quickstart | quickstart-down) NAME=${REAL_NAME:-real-quickstart} ;;
  clusterctl | clusterctl-down) NAME=${REAL_NAME:-real-clusterctl} ;;
  readme | readme-down) NAME=${REAL_NAME:-real-readme} ;;
  day2 | day2-down) NAME=${REAL_NAME:-real-day2} ;;
  remediation | remediation-down) NAME=${REAL_NAME:-real-remediation} ;;
  ha | ha-down) NAME=${REAL_NAME:-real-ha} ;;
  roll | roll-down) NAME=${REAL_NAME:-real-roll} ;;
  *) echo "usage: $0 smoke|e2e|defaults|quickstart|clusterctl|readme|day2|remediation|ha|roll|down|e2e-down|defaults-down|quickstart-down|clusterctl-down|readme-down|day2-down|remediation-down|ha-down|roll-down" >&2; exit 2 ;;
esac
# The host source (see above); the remediation mode's reboot tier needs VMs.
HOSTS=${HOSTS:-$([ "${MODE%-down}" = remediation ] && echo vms || echo containers)}
case $HOSTS in containers | vms) ;; *) echo "HOSTS=$HOSTS: containers or vms" >&2; exit 2 ;; esac
export CAPKK_HOST_OS=${HOST_OS:-${CAPKK_HOST_OS:-debian12}}
case $CAPKK_HOST_OS/$HOSTS in debian12/* | debian13/containers) ;;
  *) echo "HOST_OS=$CAPKK_HOST_OS with HOSTS=$HOSTS: debian12, or debian13 on node containers" >&2; exit 2 ;; esac
CNI=${REAL_CNI:-$([ "$HOSTS" = containers ] && echo flannel || echo static)}
# The flannel image's path in the node artifacts' registry (their current.env sets it), for FLANNEL_IMAGE.
FLANNEL_IMAGE_PATH=''
# The MachineDeployment's worker count (main sets it per mode).
WORKERS=''
# Control-plane replicas (the ha mode: 3): hosts 1..CPS are the control planes, the workers follow (the first is
# host W1, where the workload runs).
CPS=1 W1=2
# The ha mode's endpoint: the VIP (an address of the fleet's bridge outside the hosts': .250) and haproxy's port.
VIP='' VIP_PORT=${REAL_VIP_PORT:-8443}
# The ha mode: the control plane holding the VIP; the host whose power was cut and when (epoch seconds, kept in
# $WORK/failover.env for a REAL_FROM run).
VIP_HOLDER='' DEAD_HOST='' FAILOVER_T0=''
# The roll mode: the host the control-plane roll freed (where the worker goes next).
ROLL_FREED=''
# The failover's longest API and workload gap that still passes (seconds; the issue's target is 5).
HA_MAX_GAP=${REAL_HA_MAX_GAP:-15}
case $CNI in static | flannel) ;; *) echo "REAL_CNI=$CNI: static or flannel" >&2; exit 2 ;; esac
KEEP=${REAL_KEEP:-0}
FROM=${REAL_FROM:-}
TO=${REAL_TO:-}
EXTRA_VMS=${REAL_EXTRA_VMS:-0}
SERVE_PREV=${REAL_PREV:-0}
[ "$MODE" != day2 ] && [ "$MODE" != roll ] || SERVE_PREV=1
CLUSTER=$NAME
NS=capkk-$NAME
WORK=${REAL_WORK:-$ROOT/target/real/$NAME}
VERSION=${VERSION:-v0.1.0}
CAPKK_CACHE=${CAPKK_CACHE:-$HOME/.cache/capkk-rs}
export CAPKK_CACHE CLUSTERCTL_DISABLE_VERSIONCHECK=true
CARGO=${CARGO:-cargo}
# The manager image `make image` builds (the smoke runs it as a Pod); PODMAN may carry options.
IMG=${IMG:-ghcr.io/capkk-rs/capkk-manager:dev}
read -ra PODMAN_CMD <<<"${PODMAN:-podman}"
# Where `make build` puts the binaries (cargo's own rule: a relative CARGO_TARGET_DIR is taken from make's
# directory, the repository root).
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$ROOT/$TARGET_DIR
# Extra manager arguments: the day-2 run's manager serves CAPI's in-place update hooks from extension_up on.
MANAGER_ARGS=()
# The day-2 run's worker version before its upgrades (prev_artifacts).
OLD_VERSION=
# Budgets under TCG on a shared 2-core machine (see ../shared/reference/real-nodes.md): minutes, not seconds.
CP_TIMEOUT=${REAL_CP_TIMEOUT:-3600}
# Set while cp_upgrade's control-plane MachineHealthCheck is on: a failed KKMachine is KCP's to replace, not the
# end of the run; the KKMachines seen failing then.
KCP_REMEDIATES='' KCP_REMEDIATED=''
# That MachineHealthCheck's node startup timeout: above a control-plane join's time under TCG (~7-9 min from the
# Machine's creation, pre-pull included), below the time a failed join would keep the roll waiting.
CP_STARTUP_TIMEOUT=${REAL_CP_STARTUP_TIMEOUT:-900}
# VMs listed in the KKCluster but in no Machine at first (clusterctl mode with 3 VMs: the host a scale claims).
SPARE=0
WORKER_TIMEOUT=${REAL_WORKER_TIMEOUT:-1500}
# The self-hosted scale: the join runs while "mgmt"'s own control plane also serves CAPI, cert-manager and us.
SCALE_TIMEOUT=${REAL_SCALE_TIMEOUT:-2700}

# Stages take minutes under TCG, and their times depend on the machine's load: whole seconds, the load average
# with every stage, polls less often, the time each wait took. A failed check ends the run (set -e): every stage
# builds on the one before, and waiting on a broken VM costs minutes. No silent minute: a progress line every
# 30 s while a wait polls, a heartbeat line every 30 s while a build or boot runs (test/lib/heartbeat.sh).
# Polls every 5 s on VMs, every 2 s on node containers (their waits are seconds: 5 s cost 2.5 s a wait on average).
HARNESS_POLL_SECS=${REAL_POLL_SECS:-$([ "$HOSTS" = containers ] && echo 2 || echo 5)} HARNESS_PROGRESS_SECS=30 HARNESS_WAIT_SECS=1 HARNESS_LOAD=1
HARNESS_STAGE_DECIMALS=0 HARNESS_STAGE_WIDTH=58
# shellcheck source=SCRIPTDIR/../lib/harness.sh
source "$ROOT/test/lib/harness.sh"
# shellcheck source=SCRIPTDIR/../lib/provider.sh
source "$ROOT/test/lib/provider.sh"
# shellcheck source=SCRIPTDIR/../lib/heartbeat.sh
source "$ROOT/test/lib/heartbeat.sh"
# shellcheck source=SCRIPTDIR/../lib/tcp-lb.sh
source "$ROOT/test/lib/tcp-lb.sh"

# A KKMachine in phase Failed has failed terminally (e.g. `kubeadm init` exited non-zero): nothing will change
# it, so the run ends there instead of waiting out the stage's budget (an hour for the control plane).
progress() {
  local machines
  manager_supervised
  machines=$(kubectl "${KK_CTX[@]}" get kkmachines -n "$NS" --no-headers \
    -o custom-columns=M:.metadata.name,PHASE:.status.phase,STEP:.status.step 2>/dev/null | tr -s ' ')
  # wait_for's WAIT_DESC and WAIT_T0: what is awaited, since when; STEP is the host work's current step.
  log "   .. $(($(date +%s) - WAIT_T0))s: ${WAIT_DESC:0:60} | $(tr '\n' ';' <<<"$machines") load $(cut -d' ' -f1-3 /proc/loadavg)"
  # While a host works through its bootstrap data, its provisioning journal says where it is: the items done,
  # the last one (`<id> start` while a command runs; capkk_service::provisioning), and kubeadm if it runs.
  if grep -q ' Provisioning ' <<<"$machines"; then
    local i
    for i in $(seq "${VMS:-0}"); do
      [ "$i" != "$DEAD_HOST" ] || continue # powered off (the ha mode's failover)
      log "   .. $(vm_name "$i") journal: $(timeout 10 "$VMCTL" ssh --name "$NAME" --vm "$i" -- \
        'j=$(ls -t /var/lib/capkk/provisioning/*.journal 2>/dev/null | head -n 1); [ -n "$j" ] || exit 0
        echo "$(wc -l <"$j") lines, last $(tail -n 1 "$j" | awk "{print substr(\$1, 1, 8), \$2}")$(pgrep -ax kubeadm |
          head -n 1 | cut -d" " -f2-3 | sed "s/^/; running: /")"' 2>/dev/null | cut -c1-120 || true)"
    done
  fi
  [ -z "${CLUSTERCTL_LOG:-}" ] || log "   .. clusterctl: $(tail -n 1 "$CLUSTERCTL_LOG" 2>/dev/null | cut -c1-160)"
  # Except while a control-plane MachineHealthCheck is on (cp_upgrade): then KCP's remediation replaces the
  # Machine whose join failed, as it would in a user's cluster, and the wait goes on.
  if [ -n "$KCP_REMEDIATES" ] && grep -q '^[^ ]* Failed ' <<<"$machines"; then
    local f
    while read -r f _; do
      [[ " $KCP_REMEDIATED " == *" $f "* ]] && continue
      KCP_REMEDIATED+=" $f"
      log "   .. KKMachine $f failed terminally; the control-plane MachineHealthCheck is on: KCP replaces its Machine"
      log "$(kubectl get kkmachine -n "$NS" "$f" -o jsonpath='{range .status.conditions[?(@.status=="False")]}{.type} {.reason}: {.message}{"\n"}{end}' 2>/dev/null |
        cut -c1-300 | sed 's/^/      /')"
    done < <(grep '^[^ ]* Failed ' <<<"$machines")
  elif grep -q '^[^ ]* Failed ' <<<"$machines"; then
    FAILED=$((FAILED + 1))
    log "  FAIL a KKMachine failed terminally: $(grep '^[^ ]* Failed ' <<<"$machines" | tr '\n' ' ')"
    diagnostics
    exit 1
  fi
}

# In a user's cluster the manager is a Pod whose kubelet restarts it when it exits, e.g. on leadership lost
# when a loaded apiserver answered a Lease renew after the deadline (by design: it must stop acting then). Here
# it is a process: the progress lines restart it the same way, say so, and the run's summary counts it.
MANAGER_RESTARTS=0
manager_supervised() {
  local pid
  [ -n "${WORK:-}" ] && [ -f "$WORK/manager.pid" ] || return 0
  pid=$(cat "$WORK/manager.pid")
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != manager ] || return 0
  MANAGER_RESTARTS=$((MANAGER_RESTARTS + 1))
  log "   .. the manager exited ($(grep -E 'manager stopping' "$WORK/manager.log" | tail -n 1 | cut -c1-140)): restart $MANAGER_RESTARTS, as its Pod's kubelet would"
  start_manager 120 "${MANAGER_ARGS[@]}"
}

diagnostics() {
  # After the pivot the cluster's objects live in the VM cluster.
  if [ ${#KK_CTX[@]} -gt 0 ]; then KUBECONFIG=$WORK/workload.kubeconfig provider_diagnostics 30; else provider_diagnostics 30; fi
  local i
  for i in $(seq "${VMS:-0}"); do
    [ "$i" != "$DEAD_HOST" ] || continue
    log "-- VM $i: kubelet and containers"
    vmsh "$i" 'systemctl is-active containerd kubelet; journalctl -u kubelet --no-pager -n 15; crictl ps -a 2>/dev/null | head -20' 2>&1 |
      sed 's/^/    /' || true
  done
  if [ -s "$WORK/workload.kubeconfig" ]; then
    log "-- workload cluster: nodes, pods, recent events"
    { wl get nodes -o wide; wl get pods -A -o wide; wl get events -A --sort-by=.lastTimestamp | tail -n 20; } 2>&1 |
      sed 's/^/    /' || true
  fi
}

# ---------------------------------------------------------------------------------------------------------
# environment

mgmt_env() {
  BIN_DIR=$(bash -c 'source "$1/test/mgmt/scripts/common.sh" && echo "$BIN_DIR"' _ "$ROOT")
  export PATH=$BIN_DIR:$PATH
  export KUBECONFIG=${CAPKK_MGMT_DIR:-$CAPKK_CACHE/mgmt}/kubeconfig
  # The run's own copies once its build made them (snapshot_bins), else the build's.
  local bins=$TARGET_DIR/debug
  [ ! -x "$WORK/bin/vm" ] || bins=$WORK/bin
  VMCTL=$bins/vm
  BENCH=$bins/capkk-bench
  # REAL_MANAGER: another manager binary (e.g. an older commit's, for a before/after comparison).
  MANAGER=${REAL_MANAGER:-$bins/manager}
}

# The binaries this run executes, taken right after its build into $WORK/bin (hard links, else copies): a cargo
# target directory shared with other checkouts (CARGO_TARGET_DIR) is rebuilt by their builds meanwhile (seen: another
# branch's build replaced capkk-bench by one without `failover` minutes after this branch had built it).
snapshot_bins() {
  local b
  mkdir -p "$WORK/bin"
  for b in vm capkk-bench manager; do
    [ -x "$TARGET_DIR/debug/$b" ] || die "$TARGET_DIR/debug/$b missing after make build"
    rm -f "$WORK/bin/$b"
    ln "$TARGET_DIR/debug/$b" "$WORK/bin/$b" 2>/dev/null || cp "$TARGET_DIR/debug/$b" "$WORK/bin/$b"
  done
  # REAL_VM=PATH: a vm binary copied right after its own build (a target directory shared by checkouts of other
  # branches may hold theirs: cargo's output names do not depend on the checkout's path).
  [ -z "${REAL_VM:-}" ] || { rm -f "$WORK/bin/vm" && cp "$REAL_VM" "$WORK/bin/vm"; }
}

# make_logged TARGET [VAR=VALUE...]: the target's output into build.log (its tail shown when it fails), a
# heartbeat with build.log's last line every 30 s meanwhile.
# Its start and end are lines of their own: between two quiet steps the heartbeats alone left up to two
# intervals without a line (54 s in a cold quickstart).
make_logged() {
  local t0=$SECONDS
  echo "   .. make $1: started (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  heartbeat --log "$WORK/build.log" "   .. make $1" make -s -C "$ROOT" "$@" ||
    { tail -n 30 "$WORK/build.log"; die "make $1 failed"; }
  echo "   .. make $1: done in $((SECONDS - t0))s" >&2
}

build() {
  stage "build (cargo; mgmt binaries; node artifacts)"
  mkdir -p "$WORK"
  # `make build` is the test build (one feature set for everything): no crate compiles twice.
  : >"$WORK/build.log"
  make_logged build CARGO="$CARGO"
  snapshot_bins
  make_logged mgmt-bin
  make_logged node-artifacts
  [ "$SERVE_PREV" != 1 ] || make_logged node-artifacts-prev
  case $MODE in clusterctl | readme) make_logged clusterctl-artifacts ;; esac
  mgmt_env
  # shellcheck disable=SC1091
  source "$CAPKK_CACHE/node-artifacts/current.env"
  [ -n "${KUBE_VERSION:-}" ] || die "node artifacts: KUBE_VERSION missing in current.env"
  [ "$SERVE_PREV" != 1 ] || prev_artifacts
  owned_paths
}

# The day-2 run's second Kubernetes version: the node artifacts' previous set (make node-artifacts-prev).
prev_artifacts() {
  # shellcheck disable=SC1091
  source "$CAPKK_CACHE/node-artifacts/prev.env"
  OLD_VERSION=${PREV_KUBE_VERSION:-}
  [ -n "$OLD_VERSION" ] || die "node artifacts: PREV_KUBE_VERSION missing in prev.env"
  [ "$OLD_VERSION" != "$KUBE_VERSION" ] || die "the previous node-artifact set is $KUBE_VERSION too"
}

mgmt_up() {
  stage "management plane up"
  : >"$WORK/mgmt-up.log"
  heartbeat --log "$WORK/mgmt-up.log" "   .. make mgmt-up" make -s -C "$ROOT" mgmt-up ||
    { tail -n 30 "$WORK/mgmt-up.log"; die "make mgmt-up failed"; }
  check "management plane answers" bash -c 'kubectl get --raw=/readyz >/dev/null'
}

http_ok() { curl -fsS -o /dev/null --max-time 10 "$1"; }

release() {
  stage "release-manifests + provider CRDs/RBAC + manager process"
  provider_release
  # A namespace of a crashed run may still hold objects whose finalizers no manager removes any more.
  provider_install strip_finalizers
  # This run's manager log starts empty (start_manager appends, for a REAL_FROM run of a kept one); the last
  # run's stays beside it.
  [ ! -e "$WORK/manager.log" ] || mv -f "$WORK/manager.log" "$WORK/manager.prev.log"
  # A new run's extension gets a new certificate and port (a kept run's are reused by attach).
  rm -rf "$WORK/extension" "$WORK/extension.port"
  # 120 s, not the e2e's 60: this test is for a machine that QEMU and other runs keep busy.
  start_manager 120
}

# ---------------------------------------------------------------------------------------------------------
# VMs, mirror, registry

fleet_json() { python3 -c "import json,sys; d=json.load(open('/tmp/capkk-sandbox/$NAME/state.json')); print($1)"; }
vm_addr() { fleet_json "d['vms'][$1-1]['address']"; }
vm_name() { fleet_json "d['vms'][$1-1]['name']"; }
vmsh() { local i=$1; shift; "$VMCTL" ssh --name "$NAME" --vm "$i" -- "$@"; }

vms_up() {
  if [ "$HOSTS" = containers ]; then containers_up; return; fi
  stage "VMs boot to SSH ($VMS VM(s), image from cache or built)"
  local cp_size=2x3072 worker_size=1x2048 specs i
  # A management cluster's nodes carry CAPI, cert-manager and us besides kubeadm's Pods: with the default sizes
  # the control plane's page cache thrashed (load 20 in the guest) once every provider ran on it.
  [ "$MODE" != clusterctl ] || cp_size=2x4096 worker_size=1x3072
  # ha: every host but the worker may become a control plane (the spare replaces a lost one).
  [ "$MODE" != ha ] && [ "$MODE" != roll ] || worker_size=$cp_size
  specs=(--vm "$cp_size")
  for i in $(seq 2 "$VMS"); do specs+=(--vm "$worker_size"); done
  # The day-2 spare becomes the control plane (kubeadm's preflight wants 2 CPUs there).
  [ "$MODE/$VMS" != day2/3 ] || specs[5]=$cp_size
  for i in $(seq "$EXTRA_VMS"); do specs+=(--vm 2x3072); done
  # A watchdog tears the VMs down when this script exits; a kept run's and the quickstart's VMs live until the
  # down mode (a failed quickstart is torn down by its EXIT trap).
  [ "$KEEP" = 1 ] || [ "$MODE" = quickstart ] || specs+=(--guard-pid $$)
  # The image first (cached, or minutes of mmdebstrap), then the boot, each with its own heartbeat; the boot's
  # shows VM 1's serial console.
  heartbeat "   .. VM image (cached, or built with mmdebstrap)" "$VMCTL" image --source vms >/dev/null
  log "  acceleration: ${CAPKK_VM_ACCEL:-tcg} (CAPKK_VM_ACCEL=kvm on a machine with real KVM: minutes faster)"
  heartbeat --tail "/tmp/capkk-sandbox/$NAME/vm1/console.log" "   .. VMs boot (console of VM 1)" \
    "$VMCTL" up --source vms --name "$NAME" "${specs[@]}" >/dev/null
  fleet_up_done QEMU
}

# cluster_nets: the workload cluster's pod and Service networks, inside what the fleet holds (never routed on
# the machine): the slot's 198.19.N.0/24 split into pods .0/25 (a /27 per node) and Services .128/25; or, with a
# second slot (CAPKK_VM_SERVICE_SLOT=1: conformance's 200-Service spec), pods the whole /24 (a /26 per node) and
# Services that slot's 198.19.M.0/24.
cluster_nets() {
  local base=${INNER%.0/24} svc
  svc=$(fleet_json "d.get('service_cidr') or ''")
  if [ -n "$svc" ]; then
    POD_NET=$base.0/24 SVC_NET=$svc NODE_MASK=26
  else
    POD_NET=$base.0/25 SVC_NET=$base.128/25 NODE_MASK=27
  fi
}

fleet_up_done() { # fleet_up_done WHAT: the fleet's bridge and inner network; each host's time from WHAT's start
  local i
  BRIDGE=$(fleet_json "d['bridge_address']")
  INNER=$(fleet_json "d['inner_cidr']")
  cluster_nets
  ha_vip
  for i in $(seq "$((VMS + EXTRA_VMS))"); do
    log "  $(vm_name "$i") $(vm_addr "$i") ready $(fleet_json "round(d['vms'][$i-1]['boot_secs'])")s after $1 start (image build $(fleet_json "round(d['image_build_secs'])")s)"
  done
  check "host 1 answers over SSH with the pinned host key" vmsh 1 true
}

# The ha mode's VIP: an address of the fleet's bridge subnet outside the hosts' (.11 and up) and the machine's (.1).
ha_vip() { [ "$MODE" != ha ] && [ "$MODE" != roll ] || VIP=${BRIDGE%.*}.250; }

# The same fleet as node containers: systemd and sshd on the machine's kernel, nothing of Kubernetes (the
# provider installs it over SSH as on VMs). Sizes are the VMs' (recorded; a container is not limited).
containers_up() {
  stage "node containers start to SSH ($((VMS + EXTRA_VMS)) host(s), image from cache or built)"
  local specs=() i
  for i in $(seq "$((VMS + EXTRA_VMS))"); do specs+=(--vm 2x3072); done
  [ "$KEEP" = 1 ] || [ "$MODE" = quickstart ] || specs+=(--guard-pid $$)
  # What a node could change on the machine, before any node runs (checked by machine_unchanged).
  "$VMCTL" sysctls >"$WORK/sysctls.before"
  heartbeat "   .. node image (cached, or built with mmdebstrap)" "$VMCTL" image --source containers >/dev/null
  heartbeat "   .. node containers start" "$VMCTL" up --source containers --name "$NAME" "${specs[@]}" >/dev/null
  fleet_up_done container
}

# The machine's kernel settings that a privileged node can write (the kubelet sets kernel.panic and others; the
# provider vm.max_map_count and others) are what they were before the first node started: each node's entrypoint
# shields them (test/vm/src/build-node-image.sh).
machine_unchanged() {
  [ "$HOSTS" = containers ] || return 0
  stage "the machine's kernel settings unchanged by the nodes"
  "$VMCTL" sysctls >"$WORK/sysctls.after"
  sed 's/^/    /' "$WORK/sysctls.after"
  check "kernel.panic, panic_on_oops, vm.overcommit_memory, nf_conntrack_max and the rest as before the nodes" \
    diff -u "$WORK/sysctls.before" "$WORK/sysctls.after"
}

# KKCluster spec.component for this run: the bridge mirror, each binary's checksum file on it (one line of YAML).
# Written at serve_up (test/capi-e2e reads it from a kept run, for clusters the framework makes).
# The Kubernetes binaries' overrides are per version: the day-2 run serves two.
component_yaml() {
  local m=$NODE_MIRROR_URL kv b kube=""
  # The defaults mode: the mirror's address and no override naming a version or a container-runtime component;
  # every checksum comes from the published file next to its artifact there, but CNI's: the catalogue pins
  # upstream's digest of CNI v1.3.0 (KNOWN_SHA256), and the node artifacts rebuild it from source, so its
  # checksum file on the mirror must be named (a user mirroring upstream's file would not need this line).
  if [ "$MODE" = defaults ]; then
    echo "{host: \"$m\", downloadOn: host, overrides: [{id: cni, checksum: {path: /containernetworking/plugins/releases/download/$CNI_VERSION/cni-plugins-linux-amd64-$CNI_VERSION.tgz.sha256}}]}"
    return
  fi
  for kv in $KUBE_VERSION ${OLD_VERSION:-}; do
    for b in kubeadm kubelet kubectl; do
      kube+=" {id: $b, version: $kv, checksum: {path: /kubernetes-release/release/$kv/bin/linux/amd64/$b.sha256}},
"
    done
  done
  local component="{host: \"$m\", downloadOn: host, overrides: [
$kube {id: cni, checksum: {path: /containernetworking/plugins/releases/download/$CNI_VERSION/cni-plugins-linux-amd64-$CNI_VERSION.tgz.sha256}},
 {id: crictl, checksum: {path: /cri-tools/releases/download/$CRICTL_VERSION/crictl-$CRICTL_VERSION-linux-amd64.tar.gz.sha256}},
 {id: containerd, checksum: {path: /containerd/containerd/releases/download/v$CONTAINERD_VERSION/containerd-$CONTAINERD_VERSION-linux-amd64.tar.gz.sha256sum}},
 {id: runc, checksum: {path: /opencontainers/runc/releases/download/$RUNC_VERSION/runc.sha256sum}}]}"
  echo "$component" | tr -d '\n'
}

serve_up() {
  stage "mirror + registry on the bridge ($BRIDGE)"
  mkdir -p "$WORK/serve"
  REGISTRY_USER=capkk
  REGISTRY_PASSWORD=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
  # For REAL_FROM runs of a kept run (attach): the credentials of this run's registry, readable by root only.
  (umask 077 && printf 'REGISTRY_USER=%s\nREGISTRY_PASSWORD=%s\n' "$REGISTRY_USER" "$REGISTRY_PASSWORD" >"$WORK/serve/registry.cred")
  # The smoke pushes the manager image it runs as a Pod: its registry is writable (a copy of the cached storage).
  # REAL_REGISTRY_EXTRA_STORAGE: more registry storages served by the same registry (e.g. the conformance
  # images of test/conformance).
  local push=0 extra=${REAL_REGISTRY_EXTRA_STORAGE:-}
  case $MODE in smoke | clusterctl | readme) push=1 ;; esac
  if [ "$MODE" = clusterctl ] || [ "$MODE" = readme ]; then
    # shellcheck disable=SC1091
    source "$CAPKK_CACHE/clusterctl/current.env"
    extra="$extra $CLUSTERCTL_REGISTRY_STORAGE"
  fi
  NODE_REGISTRY_USER=$REGISTRY_USER NODE_REGISTRY_PASSWORD=$REGISTRY_PASSWORD NODE_REGISTRY_PUSH=$push \
    NODE_REGISTRY_EXTRA_STORAGE=$extra \
    NODE_SERVE_PREV=$SERVE_PREV \
    "$ROOT/test/vm/artifacts/serve.sh" start "$WORK/serve" "$BRIDGE" >/dev/null
  # shellcheck disable=SC1091
  source "$WORK/serve/serve.env"
  check "the mirror serves kubeadm ($NODE_MIRROR_URL)" \
    http_ok "$NODE_MIRROR_URL/kubernetes-release/release/$KUBE_VERSION/bin/linux/amd64/kubeadm.sha256"
  local i
  for i in $(seq "$((VMS + EXTRA_VMS))"); do
    # The host's package mirror: the one thing a user's pre-made machine brings along.
    vmsh "$i" "rm -f /etc/apt/sources.list.d/*; echo '$NODE_APT_SOURCE' > /etc/apt/sources.list"
  done
  component_yaml >"$WORK/serve/component.yaml"
  [ "$MODE/$VMS" != day2/3 ] || lb_up
}

# The day-2 run's control-plane endpoint: a TCP load balancer on the bridge in front of the VMs that may hold
# the control plane (1 and 3), as a user's load balancer or VIP in front of theirs (test/lib/tcp-lb.sh: its log
# $WORK/lb.log, its pid $WORK/lb.pid; teardown stops it). A resumed run (REAL_FROM) keeps the one running.
lb_up() {
  local pid
  pid=$(cat "$WORK/lb.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then return 0; fi
  check "the control-plane load balancer listens on $BRIDGE:6443" \
    tcp_lb_up "$WORK" "$BRIDGE:6443" "$(vm_addr 1):6443" "$(vm_addr 3):6443"
}

serve_down() {
  # shellcheck disable=SC2015 # `|| true` is meant for both: nothing to stop, or stopping failed
  [ -d "$WORK/serve" ] && "$ROOT/test/vm/artifacts/serve.sh" stop "$WORK/serve" >/dev/null 2>&1 || true
}

# ---------------------------------------------------------------------------------------------------------
# the cluster

pod_subnets() { CP_PODS=${INNER%.0/24}.0/26 WORKER_PODS=${INNER%.0/24}.64/26; }

render_apply() {
  stage "render (clusterctl generate cluster + TCG knobs) + apply"
  local i instances="" fp role order kv=$KUBE_VERSION day2=()
  order=$(seq "$VMS")
  # Day 2: the worker's VM first (a host is claimed in inventory order), then the control plane's and the spare's,
  # which may serve either role (the control plane moves to the spare, a worker to the freed VM).
  [ "$MODE/$VMS" != day2/3 ] || order="2 1 3"
  # The roll: the worker's host first (worker only), then the control planes' and the spare's (either role).
  [ "$MODE" != roll ] || order="$W1 $(seq -s ' ' "$CPS") $VMS"
  for i in $order; do
    fp=$(fleet_json "d['vms'][$i-1]['host_key_fingerprint']")
    role=worker
    [ "$i" -le "$CPS" ] && role=control-plane
    # The ha mode's spare (the last host): where KCP puts the Machine that replaces a lost control plane.
    [ "$MODE/$i" != "ha/$VMS" ] || role=control-plane
    [ "$MODE/$VMS" != day2/3 ] || [ "$i" = 2 ] || role="control-plane, worker"
    [ "$MODE" != roll ] || [ "$i" = "$W1" ] || role="control-plane, worker"
    instances+="${instances:+, }{name: $(vm_name "$i"), address: $(vm_addr "$i"), roles: [$role], hostKeys: [\"$fp\"]}"
  done
  if [ "$MODE/$VMS" = day2/3 ]; then
    kv=$OLD_VERSION
    day2=(--control-plane-lb "$BRIDGE" --etcd-image-tag "$PREV_ETCD_IMAGE_TAG" --dns-image-tag "$PREV_DNS_IMAGE_TAG")
  elif [ "$MODE" = day2 ]; then
    day2=(--worker-version "$OLD_VERSION")
  elif [ "$MODE" = roll ]; then
    kv=$OLD_VERSION
    day2=(--etcd-image-tag "$PREV_ETCD_IMAGE_TAG" --dns-image-tag "$PREV_DNS_IMAGE_TAG")
  fi
  local component
  component=$(<"$WORK/serve/component.yaml")
  # Pods and Services: cluster_nets. Without flannel (pods 198.19.N.0/25), with a worker, each node's bridge CNI
  # takes a /26 of the pod network (the control plane .0/26, the worker .64/26: what kube-controller-manager
  # assigns with node-cidr-mask-size 26) and a static route on each node leads to the other's pods over the
  # fleet's bridge (test-environment config in the rendered YAML).
  local net=()
  rm -f "$WORK/nodes.txt" "$WORK/workload.kubeconfig"
  # Both modes move kubeadm's addon phase into a retried phase after init (tcg-knobs.py ADDONS): its fixed
  # 10 s client timeout fails `kubeadm init` when the TCG apiserver is slow, and the smoke gates `make test`.
  if [ "$CNI" = flannel ]; then
    # Each node a /NODE_MASK of the pod network (up to 4 nodes), assigned by kube-controller-manager; flannel
    # routes between them (vxlan) from the Nodes' podCIDRs.
    net=(--pod-cidr "$POD_NET" --node-mask "$NODE_MASK" --no-static-cni --addons-after-init)
  elif [ "$VMS" = 1 ]; then
    net=(--pod-cidr "$POD_NET" --addons-after-init)
  else
    pod_subnets
    net=(--pod-cidr "$CP_PODS" --worker-pod-cidr "$WORKER_PODS" --addons-after-init
      --cp-routes "$WORKER_PODS=$(vm_addr 2)" --worker-routes "$CP_PODS=$(vm_addr 1)")
  fi
  local flavor=() cni_from=()
  if [ "$CNI" = flannel ]; then
    [ -n "$FLANNEL_IMAGE_PATH" ] || die "node artifacts: FLANNEL_IMAGE_PATH missing in current.env (make node-artifacts)"
    flavor=(--flavor flannel)
  fi
  # The ha flavor (the endpoint the provider serves: CONTROL_PLANE_VIP, on node containers their eth0) carries
  # no pod network: with flannel, the flannel flavor's ClusterResourceSet joins the rendering (tcg-knobs.py
  # --cni-from), as a user combines two flavors' YAML.
  if [ "$MODE" = ha ] || [ "$MODE" = roll ]; then
    if [ "$CNI" = flannel ]; then
      generate_cluster "${flavor[@]}" >"$WORK/cluster-flannel.yaml"
      cni_from=(--cni-from "$WORK/cluster-flannel.yaml")
    fi
    # A node container's NIC is eth0; on VMs the product finds the NIC that holds the hosts' subnet.
    if [ "$HOSTS" = containers ]; then
      CONTROL_PLANE_VIP=$VIP CONTROL_PLANE_VIP_PORT=$VIP_PORT VIP_INTERFACE=eth0 generate_cluster --flavor ha >"$WORK/cluster-generated.yaml"
    else
      CONTROL_PLANE_VIP=$VIP CONTROL_PLANE_VIP_PORT=$VIP_PORT generate_cluster --flavor ha >"$WORK/cluster-generated.yaml"
    fi
  else
    generate_cluster "${flavor[@]}" >"$WORK/cluster-generated.yaml"
  fi
  # Node containers share the machine's kernel: kube-proxy may not size its conntrack table, and on a cgroup v1
  # machine the kubelet must be told to accept it (both settings a user of such hosts makes; docs/host-paths.md).
  local hostknobs=()
  if [ "$HOSTS" = containers ]; then
    hostknobs=(--container-hosts)
    # Native speed: kubeadm's own leader leases and static-pod probes, not the TCG ones (REAL_NATIVE_SPEED=0: the
    # TCG values, as before; what they cost there: docs/testing.md).
    [ "${REAL_NATIVE_SPEED:-1}" = 0 ] || hostknobs+=(--native-speed)
    [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || hostknobs+=(--cgroup-v1)
  fi
  # The component versions the mirror carries, as every other run sets them; the defaults mode sets none.
  local components=(--containerd "$CONTAINERD_VERSION" --runc "$RUNC_VERSION" --crictl "$CRICTL_VERSION"
    --pause "$NODE_REGISTRY/pause:$PAUSE_VERSION")
  [ "$MODE" != defaults ] || components=(--no-component-overrides)
  python3 "$ROOT/test/vm/tcg-knobs.py" "$WORK/cluster-generated.yaml" "$WORK/cluster.yaml" "${hostknobs[@]}" \
    --registry "$NODE_REGISTRY" --registry-secret "$CLUSTER-registry" \
    "${components[@]}" "${net[@]}" "${day2[@]}" "${cni_from[@]}"
  check "the rendered cluster passes a server dry-run" bash -c "kubectl apply --dry-run=server -f '$WORK/cluster.yaml' >/dev/null"
  # Both Secrets carry clusterctl's move label, as docs/clusterctl.md tells users: `clusterctl move` takes along
  # only the Secrets the cluster's objects own or that carry it.
  kubectl -n "$NS" create secret generic "$CLUSTER-ssh" \
    --from-file=privateKey="$(fleet_json "d['private_key']")" --dry-run=client -o yaml |
    kubectl label --local -f - clusterctl.cluster.x-k8s.io/move= -o yaml | kubectl apply -f - >/dev/null
  kubectl -n "$NS" create secret generic "$CLUSTER-registry" --from-literal=username="$REGISTRY_USER" \
    --from-literal=password="$REGISTRY_PASSWORD" --dry-run=client -o yaml |
    kubectl label --local -f - clusterctl.cluster.x-k8s.io/move= -o yaml | kubectl apply -f - >/dev/null
  kubectl apply -f "$WORK/cluster.yaml" >/dev/null
}

# generate_cluster [FLAVOR ARGS...]: `clusterctl generate cluster` for this run, on stdout. Called from render_apply,
# whose locals it reads (instances, component, kv) and cluster_nets' networks; CPS control planes, the other hosts
# workers but the spare.
generate_cluster() {
  KUBEKEY_INSTANCES="[$instances]" KUBEKEY_COMPONENT="$component" KUBEKEY_SSH_SECRET="$CLUSTER-ssh" \
    POD_CIDR="$POD_NET" SERVICE_CIDR="$SVC_NET" FLANNEL_IMAGE="$NODE_REGISTRY/$FLANNEL_IMAGE_PATH" \
    clusterctl generate cluster "$CLUSTER" -n "$NS" --infrastructure "kubekey:$VERSION" --config "$CCONF" "$@" \
    --kubernetes-version "$kv" --control-plane-machine-count "$CPS" --worker-machine-count "$((VMS - CPS - SPARE))"
}

MD=$CLUSTER-md-0
MD_SEL="cluster.x-k8s.io/deployment-name=$MD"

wl() { kubectl --kubeconfig "$WORK/workload.kubeconfig" --request-timeout=60s "$@"; }
# wl_change ARGS...: a change to the VM cluster, tried again while its apiserver answers "etcdserver: request timed
# out" and the like (a busy TCG control plane does; one such answer used to end a 20-minute run).
wl_change() {
  local i
  for i in 1 2 3 4 5; do
    wl "$@" && return 0
    log "    kubectl $1 failed (try $i of 6), again in 15s"
    sleep 15
  done
  wl "$@"
}
node_ready() { [ "$(wl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
node_provider_id_is_ours() { wl get node "$1" -o jsonpath='{.spec.providerID}' | grep -q "^kk:///$CLUSTER/$1\$"; }
node_untainted() { ! wl get node "$1" -o jsonpath='{.spec.taints[*].key}' | grep -q node.cluster.x-k8s.io/uninitialized; }

node_joined() { # node_joined NODE: Ready, with our providerID, without CAPI's uninitialized taint
  wait_for "$1 Ready" 900 node_ready "$1"
  wait_for "$1 carries providerID kk:///$CLUSTER/$1" 300 node_provider_id_is_ours "$1"
  wait_for "$1 lost node.cluster.x-k8s.io/uninitialized" 300 node_untainted "$1"
}
nodes_wide() { wl get nodes -o wide | tee "$WORK/nodes.txt" | sed 's/^/    /'; }

control_plane() {
  local i
  if [ "$CPS" = 1 ]; then
    stage "control plane: host phases + kubeadm init + Machine Running"
  else
    stage "$CPS control planes: host phases + kubeadm init, $((CPS - 1)) control-plane joins, Machines Running"
  fi
  wait_for "$CPS control-plane Machine(s) Running with a nodeRef" "$CP_TIMEOUT" machines_running "$CP_SEL" "$CPS"
  phase_times
  workload_kubeconfig
  stage "control plane Node(s) Ready"
  for i in $(seq "$CPS"); do node_joined "$(vm_name "$i")"; done
  check "the control-plane Machines' Nodes are $(cp_hosts)" cp_machines_are "$(cp_hosts)"
  nodes_wide
}
cp_hosts() { local i; for i in $(seq "$CPS"); do vm_name "$i"; done | tr '\n' ' ' | sed 's/ $//'; }
cp_machines_are() { # cp_machines_are "NODE...": the control-plane Machines' nodeRefs name exactly these Nodes
  [ "$(kubectl get machines -n "$NS" -l "$CP_SEL" -o jsonpath='{range .items[*]}{.status.nodeRef.name}{"\n"}{end}' |
    sort | tr '\n' ' ' | sed 's/ $//')" = "$(tr ' ' '\n' <<<"$1" | sort | tr '\n' ' ' | sed 's/ $//')" ]
}

# ---------------------------------------------------------------------------------------------------------
# the manager as a Pod

MANAGER_POD_NS=capkk-system
MANAGER_POD_SEL=control-plane=capkk-controller-manager
LEASE=capkk-manager-leader

manager_pod_name() { wl get pods -n "$MANAGER_POD_NS" -l "$MANAGER_POD_SEL" -o jsonpath='{.items[0].metadata.name}'; }
lease_field() { wl get lease -n "$MANAGER_POD_NS" "$LEASE" -o jsonpath="{.spec.$1}" 2>/dev/null; }
lease_held_by() { [ -n "$1" ] && [ "$(lease_field holderIdentity)" = "$1" ]; }
lease_renewed_since() { local t; t=$(lease_field renewTime); [ -n "$t" ] && [ "$t" != "$1" ]; }
crds_established() {
  wl wait --for condition=established --timeout=10s crd/kkclusters.infrastructure.cluster.x-k8s.io \
    crd/kkmachines.infrastructure.cluster.x-k8s.io crd/kkinstances.infrastructure.cluster.x-k8s.io >/dev/null
}

push_manager_image() { # push_manager_image REF: the image `make image` built, pushed to the bridge registry as REF
  if ! "${PODMAN_CMD[@]}" image exists "$IMG"; then
    log "  building $IMG (make image; the image-test tier builds it in make test)"
    make_logged image IMG="$IMG"
  fi
  "${PODMAN_CMD[@]}" tag "$IMG" "$1"
  check "the manager image is pushed to the bridge registry as $1" \
    "${PODMAN_CMD[@]}" push -q --tls-verify=false --creds "$REGISTRY_USER:$REGISTRY_PASSWORD" "$1"
  "${PODMAN_CMD[@]}" rmi "$1" >/dev/null 2>&1 || true
}

# What `clusterctl init --infrastructure kubekey` installs of ours, on the node the smoke just made: the
# components `clusterctl generate provider` renders (CRDs, RBAC, the namespace, the Deployment) with the image
# overridden to the bridge registry. The Deployment runs unchanged: in-cluster config through the kubernetes
# Service (kube-proxy), the downward API, a read-only root with its cache volume, probes, the Lease.
manager_pod() {
  local cp img pod renewed
  cp=$(vm_name 1)
  img=$NODE_REGISTRY/capkk-manager:$VERSION
  stage "manager Deployment as a Pod on $cp: Ready, Lease, handover"
  push_manager_image "$img"
  # The image as a user sets it: clusterctl's image override, written by the release's registration script.
  cp "$CCONF" "$WORK/clusterctl-pod.yaml"
  "$WORK/repo/clusterctl-kubekey.sh" --config "$WORK/clusterctl-pod.yaml" --image-repository "$NODE_REGISTRY" 2>/dev/null
  clusterctl generate provider --infrastructure "kubekey:$VERSION" --config "$WORK/clusterctl-pod.yaml" \
    >"$WORK/components-pod.yaml"
  check "clusterctl renders the Deployment with image $img" grep -q "image: $img\$" "$WORK/components-pod.yaml"
  wl apply --server-side -f "$WORK/components-pod.yaml" >/dev/null
  wait_for "the provider's CRDs are established in the workload cluster" 120 crds_established
  # One node: the control plane takes workloads, as on any single-node cluster.
  wl taint node "$cp" node-role.kubernetes.io/control-plane:NoSchedule- >/dev/null 2>&1 || true
  wait_for "the manager Pod Running and Ready on $cp (image pulled over the bridge)" 900 \
    pods_ready "$MANAGER_POD_NS" "$MANAGER_POD_SEL" 1
  pod=$(manager_pod_name)
  wait_for "the Lease $MANAGER_POD_NS/$LEASE is held by the Pod $pod" 300 lease_held_by "$pod"
  renewed=$(lease_field renewTime)
  wait_for "the Pod renews its Lease (renewTime moves on from $renewed)" 120 lease_renewed_since "$renewed"
  check "the Pod's log shows it became leader and started the controllers" \
    bash -c "kubectl --kubeconfig '$WORK/workload.kubeconfig' logs -n '$MANAGER_POD_NS' '$pod' | grep -q 'Starting controllers'"
  manager_failover
  wl get pods -A -o wide 2>&1 | sed 's/^/    /'
}

# The providers clusterctl init installs: namespace, Deployment (each one Pod).
PROVIDER_DEPLOYMENTS=(
  cert-manager/cert-manager cert-manager/cert-manager-cainjector cert-manager/cert-manager-webhook
  capi-system/capi-controller-manager capi-kubeadm-bootstrap-system/capi-kubeadm-bootstrap-controller-manager
  capi-kubeadm-control-plane-system/capi-kubeadm-control-plane-controller-manager
  capkk-system/capkk-controller-manager
)
deployment_available() { # deployment_available NAMESPACE/NAME
  [ "$(wl get deployment -n "${1%/*}" "${1#*/}" -o jsonpath='{.status.conditions[?(@.type=="Available")].status}')" = True ]
}
process_done() { ! kill -0 "$1" 2>/dev/null; }

# CAPI's controllers come with liveness probes of 1 s timeout and no initial delay (30 s to answer): under TCG they
# start slower than that and are killed over and over. Their leader election (15 s lease, 10 s renew deadline) was
# lost under load once they ran (a renew took longer than 10 s; the manager exits and crash-loops). TCG knobs like
# those of tcg-knobs.py, set the way a user on slow machines would: no liveness probe (a 60 s start delay and
# 12 failures of 10 s were still too short once a busy guest took minutes to start them, and every kill restarted
# the slow start), longer readiness timeouts, and the leases tcg-knobs.py gives kube-controller-manager, patched
# into the Deployments clusterctl created.
TCG_PROBES='[{"op":"remove","path":"/spec/template/spec/containers/0/livenessProbe"},
{"op":"add","path":"/spec/template/spec/containers/0/readinessProbe/timeoutSeconds","value":10},
{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--leader-elect-lease-duration=60s"},
{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--leader-elect-renew-deadline=40s"},
{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--leader-elect-retry-period=10s"}]'

# The workload cluster becomes a management cluster the way every CAPI user makes one: the real clusterctl, our
# provider by name, a configuration file (test/clusterctl/config.sh) naming local repositories and the bridge
# registry. clusterctl waits for cert-manager itself; the providers are waited for here, after the TCG knob.
clusterctl_init() {
  local d
  stage "clusterctl init: every provider a Pod in $CLUSTER"
  push_manager_image "$NODE_REGISTRY/capkk-manager:$VERSION"
  "$ROOT/test/clusterctl/config.sh" "$NODE_REGISTRY" "$WORK/clusterctl" "$VERSION" >/dev/null
  # One node: the control plane takes workloads, as on any single-node cluster.
  [ "$((VMS - SPARE))" != 1 ] || wl taint node "$(vm_name 1)" node-role.kubernetes.io/control-plane:NoSchedule- >/dev/null 2>&1 || true
  run_bg "$WORK/clusterctl-init.log" "clusterctl init finished" 3600 \
    env KUBECONFIG="$WORK/workload.kubeconfig" clusterctl init --infrastructure kubekey \
    --config "$WORK/clusterctl/clusterctl.yaml" -v 2
  sed 's/^/    /' "$WORK/clusterctl-init.log" | tail -n 25
  check "clusterctl init --infrastructure kubekey exits 0 (exit $BG_RC)" test "$BG_RC" = 0
  for d in "${PROVIDER_DEPLOYMENTS[@]}"; do
    case $d in capi-*) wl_change patch deployment -n "${d%/*}" "${d#*/}" --type json -p "$TCG_PROBES" >/dev/null ;; esac
  done
  for d in "${PROVIDER_DEPLOYMENTS[@]}"; do
    wait_for "$d Available" 1200 deployment_available "$d"
  done
  log "  workload cluster after clusterctl init, kubectl get pods -A -o wide:"
  wl get pods -A -o wide 2>&1 | tee "$WORK/pods-after-init.txt" | sed 's/^/    /'
  wl get providers -A 2>&1 | sed 's/^/    /' || true
}

# ---------------------------------------------------------------------------------------------------------
# the README's install path, as written (make e2e-readme)

# The user's values the test supplies in place of the README's: exactly the names the README's values block
# exports (a name added there and not here fails the run, naming it).
README_VALUES=(REGISTRY SSH_KEY KUBERNETES_VERSION KUBEKEY_INSTANCES)
RD=''                                                                    # $WORK/readme, set by readme_install
dl() { kubectl --kubeconfig "$RD/demo.kubeconfig" --request-timeout=60s "$@"; } # the README's cluster "demo"
readme_block() { # readme_block NAME [--exports]: the README's block NAME, byte for byte (vm readme-block)
  "$VMCTL" readme-block --file "$ROOT/README.md" "$@"
}
# readme_run LOG DESCRIPTION TIMEOUT BLOCK [DIR [TAIL]]: the block's file run by sh -ex in DIR (the repository's
# root), after the test's values block, in the environment of this machine's user: kubectl and clusterctl (the
# management plane's binaries) talk to the management cluster on node containers, the clusterctl configuration
# is the run's own (XDG_CONFIG_HOME), podman pushes to the bridge registry (plain HTTP, its credentials).
readme_run() {
  local log=$1 desc=$2 timeout=$3 block=$4
  run_bg "$log" "$desc" "$timeout" env KUBECONFIG="$WORK/workload.kubeconfig" XDG_CONFIG_HOME="$RD/xdg" \
    REGISTRY_AUTH_FILE="$RD/auth.json" CONTAINERS_REGISTRIES_CONF="$RD/registries.conf" \
    sh -exc '. "$1"; cd "$2"; . "$3"' readme "$RD/values.sh" "${5:-$ROOT}" "$RD/$block.sh"
  sed 's/^/    /' "$log" | tail -n "${6:-20}"
  check "the README's $block block exits 0 (exit $BG_RC; log $log)" test "$BG_RC" = 0
}

readme_install() {
  local name b i role instances="" fp d
  RD=$WORK/readme
  stage "README: the install block, as written, into $CLUSTER (node containers)"
  rm -rf "$RD" && mkdir -p "$RD/xdg/cluster-api"
  # The blocks, taken out of README.md now: a block gone or changed in shape ends the run here, saying which.
  for b in values install cluster apply; do
    readme_block "$b" >"$RD/$b.sh" || die "README.md: the $b block (<!-- readme-test: $b --> right before a \`\`\`sh fence) is not there as the test needs it"
    log "  README block $b: $(grep -c . "$RD/$b.sh") line(s)"
  done
  mv "$RD/values.sh" "$RD/values-readme.sh"
  for name in $(readme_block values --exports); do
    [[ " ${README_VALUES[*]} " == *" $name "* ]] || die "README.md's values block sets $name, which this test does not supply (README_VALUES in $0)"
  done
  check "README.md's values block sets exactly ${README_VALUES[*]}" \
    test "$(readme_block values --exports | tr '\n' ' ')" = "${README_VALUES[*]} "
  check "README.md's Kubernetes version is the one the node artifacts serve ($KUBE_VERSION)" \
    grep -q "^export KUBERNETES_VERSION=$KUBE_VERSION " "$RD/values-readme.sh"
  # The test's values: the README's names, this fleet's hosts 2 and 3 (in no cluster yet), the fleet's client
  # key; then optional variables of the template a user of this machine sets (the binaries' mirror, pod and
  # service ranges inside the fleet's slot, flannel's image from the bridge registry).
  for i in $(seq 2 "$((1 + EXTRA_VMS))"); do
    fp=$(fleet_json "d['vms'][$i-1]['host_key_fingerprint']")
    role=worker
    [ "$i" != 2 ] || role=control-plane
    instances+="${instances:+, }{name: $(vm_name "$i"), address: $(vm_addr "$i"), roles: [$role], hostKeys: [\"$fp\"]}"
  done
  install -m 600 "$(fleet_json "d['private_key']")" "$RD/id_ed25519"
  cat >"$RD/values.sh" <<EOF
export REGISTRY=$NODE_REGISTRY
export SSH_KEY=$RD/id_ed25519
export KUBERNETES_VERSION=$KUBE_VERSION
export KUBEKEY_INSTANCES='[$instances]'
export KUBEKEY_COMPONENT='$(<"$WORK/serve/component.yaml")'
export POD_CIDR=$POD_NET SERVICE_CIDR=$SVC_NET FLANNEL_IMAGE=$NODE_REGISTRY/$FLANNEL_IMAGE_PATH
EOF
  log "  the test's values block (in place of the README's):"
  sed 's/^/    | /' "$RD/values.sh" | cut -c1-200
  # This machine's clusterctl configuration before the README's registration (an air-gapped user keeps one):
  # CAPI core and cert-manager from local repositories, their images from the bridge registry (test/clusterctl).
  CLUSTERCTL_CONFIG_NO_KUBEKEY=1 "$ROOT/test/clusterctl/config.sh" "$NODE_REGISTRY" "$RD/clusterctl" "$VERSION" >/dev/null
  cp "$RD/clusterctl/clusterctl.yaml" "$RD/xdg/cluster-api/clusterctl.yaml"
  printf '[[registry]]\nlocation = "%s"\ninsecure = true\n' "$NODE_REGISTRY" >"$RD/registries.conf"
  (umask 077 && printf '{"auths":{"%s":{"auth":"%s"}}}\n' "$NODE_REGISTRY" \
    "$(printf '%s:%s' "$REGISTRY_USER" "$REGISTRY_PASSWORD" | base64 -w0)" >"$RD/auth.json")
  # One node: the control plane takes workloads, as on any single-node cluster.
  wl taint node "$(vm_name 1)" node-role.kubernetes.io/control-plane:NoSchedule- >/dev/null 2>&1 || true
  log "  the README's install block:"
  sed 's/^/    | /' "$RD/install.sh"
  readme_run "$RD/install.log" "the README's install block finished" 2400 install "$ROOT" 40
  for d in "${PROVIDER_DEPLOYMENTS[@]}"; do
    check "$d Available" deployment_available "$d"
  done
  check "the management cluster runs our release's image from \$REGISTRY ($NODE_REGISTRY/capkk-manager:$VERSION)" \
    deployment_image_is capkk-system/capkk-controller-manager "$NODE_REGISTRY/capkk-manager:$VERSION"
  awk '/^\+ clusterctl init list-images/ {on=1; next} /^\+ / {on=0} on' "$RD/install.log" >"$RD/list-images.txt"
  log "  clusterctl init list-images --infrastructure kubekey:"
  sed 's/^/    /' "$RD/list-images.txt"
  check "list-images names our image from \$REGISTRY" grep -qx "$NODE_REGISTRY/capkk-manager:$VERSION" "$RD/list-images.txt"
  wl get providers -A 2>&1 | sed 's/^/    /' || true
}

demo_machines_running() { KUBECONFIG=$WORK/workload.kubeconfig NS=default machines_running cluster.x-k8s.io/cluster-name=demo 2; }
demo_kubeconfig() { on_mgmt clusterctl get kubeconfig demo >"$RD/demo.kubeconfig" 2>/dev/null && [ -s "$RD/demo.kubeconfig" ]; }
demo_nodes_ready() { # both Nodes of demo Ready
  local out
  out=$(dl get nodes -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}')
  [ "$(grep -c . <<<"$out")" = 2 ] && ! grep -qv '^True$' <<<"$out"
}
demo_pods_ready() { # demo_pods_ready NAMESPACE SELECTOR COUNT
  local out
  out=$(dl get pods -n "$1" -l "$2" -o jsonpath='{range .items[*]}{.status.phase}/{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}')
  [ "$(grep -c . <<<"$out")" = "$3" ] && ! grep -qv '^Running/True$' <<<"$out"
}

# The README's first cluster: its cluster block (clusterctl generate, flannel flavor), the container hosts'
# settings docs/container-hosts.md tells such users to add (test/vm/tcg-knobs.py --container-hosts, with this
# machine's registry for the Kubernetes images and the mirror's component versions), its apply block; then the
# cluster as the README promises it: both Nodes Ready with flannel, CoreDNS answering.
readme_cluster() {
  local hostknobs=(--container-hosts)
  stage "README: the first cluster (cluster block, container-host settings, apply block)"
  mkdir -p "$RD/cwd"
  readme_run "$RD/cluster.log" "the README's cluster block finished" 300 cluster "$RD/cwd"
  check "the cluster block wrote demo.yaml with the flannel ClusterResourceSet" grep -q 'kind: ClusterResourceSet' "$RD/cwd/demo.yaml"
  mv "$RD/cwd/demo.yaml" "$RD/demo-generated.yaml"
  [ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] || hostknobs+=(--cgroup-v1)
  python3 "$ROOT/test/vm/tcg-knobs.py" "$RD/demo-generated.yaml" "$RD/cwd/demo.yaml" "${hostknobs[@]}" \
    --registry "$NODE_REGISTRY" --registry-secret demo-registry \
    --containerd "$CONTAINERD_VERSION" --runc "$RUNC_VERSION" --crictl "$CRICTL_VERSION" \
    --pause "$NODE_REGISTRY/pause:$PAUSE_VERSION" \
    --pod-cidr "$POD_NET" --node-mask "$NODE_MASK" --no-static-cni --addons-after-init
  on_mgmt kubectl create secret generic demo-registry --from-literal=username="$REGISTRY_USER" \
    --from-literal=password="$REGISTRY_PASSWORD" >/dev/null
  readme_run "$RD/apply.log" "the README's apply block finished" 300 apply "$RD/cwd"
  wait_for "demo's 2 Machines Running with a nodeRef" 1800 demo_machines_running
  wait_for "clusterctl get kubeconfig demo" 120 demo_kubeconfig
  wait_for "demo's 2 Nodes Ready (flannel by the flavor's ClusterResourceSet)" 900 demo_nodes_ready
  wait_for "demo's CoreDNS Pods Running and Ready (answering their probes over the pod network)" 600 \
    demo_pods_ready kube-system k8s-app=kube-dns 2
  log "  demo, kubectl get nodes -o wide:"
  dl get nodes -o wide | tee "$RD/nodes.txt" | sed 's/^/    /'
  cp "$RD/nodes.txt" "$WORK/nodes.txt"
  on_mgmt clusterctl describe cluster demo 2>&1 | sed 's/^/    /' || true
}

lease_moved_to_another_pod() { # lease_moved_to_another_pod OLD: a Running manager Pod other than OLD holds it
  local holder
  holder=$(lease_field holderIdentity)
  [ -n "$holder" ] && [ "$holder" != "$1" ] &&
    [ "$(wl get pod -n "$MANAGER_POD_NS" "$holder" -o jsonpath='{.status.phase}' 2>/dev/null)" = Running ]
}

# Two replicas, as an operator scales the Deployment for availability: the second Pod is Ready without the Lease;
# deleting the leader hands the Lease to it (a graceful delete: the leader stops renewing, the other takes over
# after the lease expires or is released).
manager_failover() {
  local leader t0 took
  leader=$(lease_field holderIdentity)
  wl scale deployment -n "$MANAGER_POD_NS" capkk-controller-manager --replicas 2 >/dev/null
  wait_for "two manager Pods Running and Ready" 600 pods_ready "$MANAGER_POD_NS" "$MANAGER_POD_SEL" 2
  if ! lease_held_by "$leader"; then
    # Seen once in CI (load ~3): say why, from the Pods themselves (a renew past the deadline under load, a
    # restart, or the standby taking a live lease).
    log "  the Lease left $leader before its deletion; Lease: $(wl get lease -n "$MANAGER_POD_NS" "$LEASE" \
      -o jsonpath='{.spec.holderIdentity} renewed {.spec.renewTime} transitions {.spec.leaseTransitions}')"
    wl get pods -n "$MANAGER_POD_NS" -o wide 2>&1 | sed 's/^/    /'
    for p in $(wl get pods -n "$MANAGER_POD_NS" -l "$MANAGER_POD_SEL" -o jsonpath='{.items[*].metadata.name}'); do
      log "  last lines of $p (and of its previous run):"
      { wl logs -n "$MANAGER_POD_NS" "$p" --previous --tail 15 2>/dev/null; wl logs -n "$MANAGER_POD_NS" "$p" --tail 25; } |
        grep -iE 'lease|leader|renew|shut|stopp|panic|error' | sed 's/^/    /' || true
    done
  fi
  check "the first Pod still holds the Lease ($leader)" lease_held_by "$leader"
  t0=$(date +%s)
  wl delete pod -n "$MANAGER_POD_NS" "$leader" --wait=false >/dev/null
  wait_for "the other Pod takes the Lease after the leader Pod is deleted" 300 lease_moved_to_another_pod "$leader"
  took=$(($(date +%s) - t0))
  log "  the Lease moved to $(lease_field holderIdentity) ${took}s after the leader Pod's deletion (lease duration $(lease_field leaseDurationSeconds)s)"
}

# ---------------------------------------------------------------------------------------------------------
# the pivot: "mgmt" manages itself, scales itself, upgrades our provider, and hands its cluster back

on_mgmt() { KUBECONFIG=$WORK/workload.kubeconfig "$@"; } # on_mgmt CMD...: CMD's kubectl talks to the VM cluster

# run_bg LOG DESCRIPTION TIMEOUT CMD...: CMD in the background, its output in LOG (whose last line the progress
# lines show), waited for with the usual progress lines; its exit status in BG_RC (124: killed at TIMEOUT).
run_bg() {
  local log=$1 desc=$2 timeout=$3 pid
  shift 3
  CLUSTERCTL_LOG=$log
  "$@" >"$log" 2>&1 &
  pid=$!
  BG_RC=0
  if wait_for "$desc" "$timeout" process_done "$pid"; then wait "$pid" || BG_RC=$?; else kill "$pid" 2>/dev/null; BG_RC=124; fi
  CLUSTERCTL_LOG=
}

# The provisioning journals (capkk_service::provisioning::STATE_DIR) of VMs I...: a step is journaled once, after it
# ran, so a command run again changes its journal. host_journals FILE I...: each journal's digest and line count.
host_journals() {
  local out=$1 i
  shift
  for i in "$@"; do
    echo "== $(vm_name "$i")"
    vmsh "$i" 'cd /var/lib/capkk/provisioning 2>/dev/null || exit 0
      for j in *.journal; do [ -e "$j" ] && echo "$(sha256sum <"$j" | cut -c1-16) $(wc -l <"$j") lines $j"; done; true'
  done >"$out"
}
journals_unchanged() { # journals_unchanged BEFORE I...: the journals of VMs I... are those BEFORE recorded
  local before=$1
  shift
  host_journals "$WORK/journals-now.txt" "$@"
  grep -q 'lines' "$before" || { log "    $before records no journal at all"; return 1; }
  diff -u "$before" "$WORK/journals-now.txt" >"$WORK/journals.diff" || { sed 's/^/    /' "$WORK/journals.diff"; return 1; }
}
kkmachines_provisioned() { # kkmachines_provisioned COUNT: COUNT KKMachines in NS, each reporting provisioned
  local out
  out=$(kubectl get kkmachines -n "$NS" -o jsonpath='{range .items[*]}{.status.initialization.provisioned}{"\n"}{end}')
  [ "$(grep -c . <<<"$out")" = "$1" ] && ! grep -qv '^true$' <<<"$out"
}
cluster_absent() { ! kubectl get cluster -n "$NS" "$CLUSTER" >/dev/null 2>&1 && kubectl get ns >/dev/null; }
leader_pod_log() { local pod; pod=$(lease_field holderIdentity); [ -n "$pod" ] && wl logs -n "$MANAGER_POD_NS" "$pod"; }
# The Pod serves /metrics as the shipped Deployment does: HTTPS on :8443, to a bearer token allowed `get` on
# /metrics (TokenReview + SubjectAccessReview). The test reads it as a scraper would: a ServiceAccount bound to the
# provider's metrics-reader ClusterRole, its token from `kubectl create token`. The API server's Pod proxy forwards
# no bearer token, so the page is read through `kubectl port-forward`.
METRICS_SA=capkk-metrics-test
metrics_reader_token() { # a token of $METRICS_SA (created and bound on first use), cached in $WORK
  local f=$WORK/metrics-reader.token
  if [ ! -s "$f" ]; then
    wl create serviceaccount -n "$MANAGER_POD_NS" "$METRICS_SA" --dry-run=client -o yaml | wl apply -f - >/dev/null || return 1
    wl create clusterrolebinding "$METRICS_SA" --clusterrole=capkk-metrics-reader \
      --serviceaccount="$MANAGER_POD_NS:$METRICS_SA" --dry-run=client -o yaml | wl apply -f - >/dev/null || return 1
    (umask 077 && wl create token -n "$MANAGER_POD_NS" "$METRICS_SA" --duration=6h >"$f.new") && mv "$f.new" "$f" || return 1
  fi
  cat "$f"
}
# pod_metrics POD: its /metrics page into $WORK/pod-metrics.txt (or the error); the port-forward is stopped after.
pod_metrics() {
  local token port pf rc=1
  token=$(metrics_reader_token) || return 1
  port=$(free_port_pair) || return 1
  wl port-forward -n "$MANAGER_POD_NS" "pod/$1" "$port:8443" >"$WORK/port-forward.log" 2>&1 &
  pf=$!
  for _ in $(seq 50); do grep -q '^Forwarding from' "$WORK/port-forward.log" && break; sleep 0.2; done
  # -k: the manager's certificate is self-signed, as with CAPI's diagnostics endpoint. The token goes in a
  # header file (not the command line, which `ps` shows).
  if curl -sSk --max-time 30 -H @- -o "$WORK/pod-metrics.txt" -w '%{http_code}' "https://127.0.0.1:$port/metrics" \
    <<<"Authorization: Bearer $token" >"$WORK/pod-metrics.status" 2>>"$WORK/port-forward.log" &&
    [ "$(cat "$WORK/pod-metrics.status")" = 200 ]; then
    rc=0
  else
    { echo "HTTP $(cat "$WORK/pod-metrics.status" 2>/dev/null)"; cat "$WORK/port-forward.log"; } >>"$WORK/pod-metrics.txt"
  fi
  kill "$pf" 2>/dev/null || true
  wait "$pf" 2>/dev/null || true
  return "$rc"
}
# pod_reconciled CONTROLLER: the leader Pod's metrics count reconciles of CONTROLLER that did not fail. Its log is
# no evidence: a reconcile that finds nothing to do logs nothing at info. The metrics go to a file first: a pipe
# into `grep -q` under pipefail fails when grep exits before the writer has written everything (SIGPIPE).
pod_reconciled() {
  local pod
  pod=$(lease_field holderIdentity)
  [ -n "$pod" ] || return 1
  pod_metrics "$pod" || return 1
  grep -qE "^controller_runtime_reconcile_total\{controller=\"$1\",result=\"(success|requeue|requeue_after)\"\} [1-9]" "$WORK/pod-metrics.txt"
}
pod_reconcile_counts() { # what the last pod_reconciled read: the reconcile counters (or the error)
  grep -E '^controller_runtime_reconcile_total|^capkk_reconcile_errors' "$WORK/pod-metrics.txt" 2>/dev/null | sed 's/^/    /' ||
    sed 's/^/    /' "$WORK/pod-metrics.txt" 2>/dev/null | head -n 5 || true
}
# the Machines of the cluster that exist at this point of the run (control plane + workers)
cluster_machines() { echo "$((VMS - SPARE + SCALED))"; }
SCALED=0

# Where the cluster's objects live now (the progress lines list its KKMachines there).
KK_CTX=()

# clusterctl move to the VM cluster, as every CAPI user pivots: "mgmt" then manages itself, our manager Pod
# reconciling the KKMachines of the very nodes it runs on. Nothing runs on a host again (journals compared).
pivot() {
  local n
  n=$(cluster_machines)
  stage "clusterctl move: $CLUSTER manages itself (pivot)"
  host_journals "$WORK/journals-before-move.txt" $(seq "$n")
  # clusterctl discovers what to move by the label `clusterctl init` puts on every provider's CRDs; the local
  # plane's CAPI CRDs were applied without init (test/mgmt), so they get it here (ours have it from the components).
  local crd
  for crd in $(kubectl get crd -o name | grep -E '\.cluster\.x-k8s\.io$' | grep -v '\.clusterctl\.cluster\.x-k8s\.io$'); do
    kubectl label --overwrite "$crd" clusterctl.cluster.x-k8s.io= >/dev/null
  done
  run_bg "$WORK/clusterctl-move.log" "clusterctl move to $CLUSTER finished" 1200 \
    clusterctl move -n "$NS" --to-kubeconfig "$WORK/workload.kubeconfig" -v 3
  sed 's/^/    /' "$WORK/clusterctl-move.log" | tail -n 30
  check "clusterctl move --to-kubeconfig exits 0 (exit $BG_RC)" test "$BG_RC" = 0
  KK_CTX=(--kubeconfig "$WORK/workload.kubeconfig")
  check "the local plane no longer has the Cluster" cluster_absent
  wait_for "$n Machines Running with a nodeRef in $CLUSTER itself" 1200 \
    on_mgmt machines_running "cluster.x-k8s.io/cluster-name=$CLUSTER" "$n"
  wait_for "$n KKMachines report provisioned from the manager Pod" 900 on_mgmt kkmachines_provisioned "$n"
  wait_for "Cluster $CLUSTER is Provisioned in $CLUSTER" 600 on_mgmt cluster_provisioned
  log "  $CLUSTER after the pivot, kubectl get pods -A -o wide:"
  wl get pods -A -o wide 2>&1 | tee "$WORK/pods-after-move.txt" | sed 's/^/    /'
  wait_for "the manager Pod reconciled the moved KKMachines (its controller_runtime_reconcile_total)" 300 pod_reconciled kkmachine ||
    { pod_reconcile_counts; return 1; }
  log "  the manager Pod's reconcile counters after the pivot:"
  pod_reconcile_counts
  check "no step ran again on any VM (provisioning journals unchanged)" \
    journals_unchanged "$WORK/journals-before-move.txt" $(seq "$n")
}

# From the self-hosted cluster: a scale that needs a host. The manager Pod claims the spare VM over SSH, from the
# pod network, and the new Node joins the cluster the Pod runs in.
self_scale() {
  local w=$VMS name addr from=$((VMS - 1 - SPARE))
  name=$(vm_name "$w") addr=$(vm_addr "$w")
  stage "from $CLUSTER itself: scale $MD $from -> $((from + 1)), the Pod claims $name over SSH"
  host_journals "$WORK/journals-before-scale.txt" $(seq "$((w - 1))")
  wl_change scale machinedeployment -n "$NS" "$MD" --replicas "$((from + 1))" >/dev/null
  SCALED=1
  wait_for "$((from + 1)) worker Machine(s) Running with a nodeRef (in $CLUSTER)" "$SCALE_TIMEOUT" \
    on_mgmt machines_running "$MD_SEL" "$((from + 1))"
  node_joined "$name"
  nodes_wide
  cp "$WORK/nodes.txt" "$WORK/nodes-after-scale.txt"
  leader_pod_log | grep -E "$name|$addr" >"$WORK/pod-claim.log" || true
  log "  the manager Pod's log about $name ($addr), first lines:"
  head -n 12 "$WORK/pod-claim.log" | cut -c1-300 | sed 's/^/    /'
  check "the manager Pod's log shows the claim of $name" test -s "$WORK/pod-claim.log"
  check "the hosts already in $CLUSTER ran nothing again" \
    journals_unchanged "$WORK/journals-before-scale.txt" $(seq "$((w - 1))")
}

deployment_image_is() { # deployment_image_is NAMESPACE/NAME IMAGE
  [ "$(wl get deployment -n "${1%/*}" "${1#*/}" -o jsonpath='{.spec.template.spec.containers[0].image}')" = "$2" ]
}
lease_holder_runs() { # lease_holder_runs IMAGE: the Lease's holder is a Running Pod of IMAGE
  # (wait_for silences the command: an unbound variable here ends the whole run with its EXIT trap's output
  # silenced too; $2 instead of $1 did exactly that in lead-pv6.)
  local holder
  holder=$(lease_field holderIdentity)
  [ -n "$holder" ] &&
    [ "$(wl get pod -n "$MANAGER_POD_NS" "$holder" -o jsonpath='{.status.phase}/{.spec.containers[0].image}')" = "Running/$1" ]
}

# clusterctl upgrade of our provider in the self-hosted cluster, as a user takes a patch release. The next version
# is this build under the next patch version's tag and components (the upgrade path is what is tested: clusterctl
# replaces the components, the Deployment rolls, the new Pod takes the Lease and finds every host provisioned).
provider_upgrade() {
  local next=v0.1.1 img n
  img=$NODE_REGISTRY/capkk-manager:$next
  n=$(cluster_machines)
  stage "clusterctl upgrade: kubekey $VERSION -> $next in $CLUSTER, hosts untouched"
  host_journals "$WORK/journals-before-upgrade.txt" $(seq "$n")
  push_manager_image "$img"
  "$ROOT/test/clusterctl/config.sh" "$NODE_REGISTRY" "$WORK/clusterctl" "$next" >/dev/null
  on_mgmt clusterctl upgrade plan --config "$WORK/clusterctl/clusterctl.yaml" >"$WORK/upgrade-plan.txt" 2>&1 || true
  sed 's/^/    /' "$WORK/upgrade-plan.txt"
  check "clusterctl upgrade plan offers kubekey $VERSION -> $next" \
    grep -qE "infrastructure-kubekey +capkk-system +(InfrastructureProvider +)?$VERSION +$next( |$)" "$WORK/upgrade-plan.txt"
  run_bg "$WORK/clusterctl-upgrade.log" "clusterctl upgrade apply finished" 1200 \
    env KUBECONFIG="$WORK/workload.kubeconfig" clusterctl upgrade apply --config "$WORK/clusterctl/clusterctl.yaml" \
    --infrastructure "capkk-system/kubekey:$next" -v 2
  sed 's/^/    /' "$WORK/clusterctl-upgrade.log" | tail -n 20
  check "clusterctl upgrade apply exits 0 (exit $BG_RC)" test "$BG_RC" = 0
  check "the capkk Deployment runs $img" deployment_image_is capkk-system/capkk-controller-manager "$img"
  wait_for "capkk-system/capkk-controller-manager Available" 900 deployment_available capkk-system/capkk-controller-manager
  wait_for "a Pod of $next holds the Lease" 600 lease_holder_runs "$img"
  check "the provider inventory records kubekey $next" \
    bash -c "kubectl --kubeconfig '$WORK/workload.kubeconfig' get providers -n capkk-system -o jsonpath='{.items[*].version}' | grep -qx '$next'"
  wait_for "$n KKMachines report provisioned from the upgraded Pod" 900 on_mgmt kkmachines_provisioned "$n"
  wl get providers -A 2>&1 | sed 's/^/    /' || true
  check "no step ran again on any VM across the upgrade" \
    journals_unchanged "$WORK/journals-before-upgrade.txt" $(seq "$n")
}

# Back to the local plane, where the provider runs as a process (as it was before the pivot). clusterctl checks
# that the target has every provider of the source at the same or a later version; the local plane's providers
# run as processes without clusterctl's inventory, so the inventory of "mgmt" is copied to it first.
move_back() {
  local n
  n=$(cluster_machines)
  stage "clusterctl move back to the local plane"
  wl get crd providers.clusterctl.cluster.x-k8s.io -o json | python3 -c '
import json, sys
o = json.load(sys.stdin)
o["metadata"] = {k: v for k, v in o["metadata"].items() if k in ("name", "labels", "annotations")}
o.pop("status", None)
print(json.dumps(o))' | kubectl apply --server-side --force-conflicts -f - >/dev/null
  kubectl wait --for condition=established --timeout=60s crd/providers.clusterctl.cluster.x-k8s.io >/dev/null
  wl get providers -A -o json | python3 -c '
import json, sys
items = json.load(sys.stdin)["items"]
for o in items:
    o["metadata"] = {k: v for k, v in o["metadata"].items() if k in ("name", "namespace", "labels")}
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))' >"$WORK/inventory.json"
  local ns
  for ns in $(python3 -c 'import json,sys; print(" ".join({o["metadata"]["namespace"] for o in json.load(open(sys.argv[1]))["items"]}))' "$WORK/inventory.json"); do
    kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  done
  kubectl apply --server-side --force-conflicts -f "$WORK/inventory.json" >/dev/null
  host_journals "$WORK/journals-before-move-back.txt" $(seq "$n")
  run_bg "$WORK/clusterctl-move-back.log" "clusterctl move back finished" 1200 \
    env KUBECONFIG="$WORK/workload.kubeconfig" clusterctl move -n "$NS" --to-kubeconfig "$KUBECONFIG" -v 3
  sed 's/^/    /' "$WORK/clusterctl-move-back.log" | tail -n 15
  check "clusterctl move back exits 0 (exit $BG_RC)" test "$BG_RC" = 0
  KK_CTX=()
  check "$CLUSTER no longer holds its own Cluster" on_mgmt cluster_absent
  wait_for "$n Machines Running with a nodeRef on the local plane" 1200 \
    machines_running "cluster.x-k8s.io/cluster-name=$CLUSTER" "$n"
  wait_for "$n KKMachines report provisioned from the local manager" 900 kkmachines_provisioned "$n"
  check "no step ran again on any VM across the move back" \
    journals_unchanged "$WORK/journals-before-move-back.txt" $(seq "$n")
}

machine_count() { [ "$(kubectl get machines -n "$NS" -l "$1" -o name | grep -c .)" = "$2" ]; }
worker_machine_is() { # worker_machine_is "NODE...": the worker Machines' nodeRefs name exactly these Nodes
  [ "$(kubectl get machines -n "$NS" -l "$MD_SEL" -o jsonpath='{range .items[*]}{.status.nodeRef.name}{"\n"}{end}' |
    sort | tr '\n' ' ' | sed 's/ $//')" = "$(tr ' ' '\n' <<<"$1" | sort | tr '\n' ' ' | sed 's/ $//')" ]
}
cluster_provisioned() { [ "$(kubectl get cluster -n "$NS" "$CLUSTER" -o jsonpath='{.status.phase}')" = Provisioned ]; }
node_absent() { ! wl get node "$1" >/dev/null 2>&1 && wl get nodes >/dev/null; }

worker_hosts() { local i; for i in $(seq "$W1" "$((CPS + WORKERS))"); do vm_name "$i"; done | tr '\n' ' ' | sed 's/ $//'; }
workers() {
  local i
  stage "worker(s): host phases + kubeadm join + Machine Running"
  wait_for "$WORKERS worker Machine(s) Running with a nodeRef" "$WORKER_TIMEOUT" machines_running "$MD_SEL" "$WORKERS"
  phase_times 6
  check "the worker Machines' Nodes are $(worker_hosts)" worker_machine_is "$(worker_hosts)"
  stage "worker Node(s) Ready"
  for i in $(seq "$W1" "$((CPS + WORKERS))"); do node_joined "$(vm_name "$i")"; done
  wait_for "Cluster $CLUSTER is Provisioned" 300 cluster_provisioned
  check "every Machine of the Cluster Running ($CPS control plane(s) + $WORKERS worker(s))" \
    machines_running "cluster.x-k8s.io/cluster-name=$CLUSTER" "$((CPS + WORKERS))"
  nodes_wide
  timeline_capture
}

# What `capkk-bench node-ready` reads (docs/benchmarks.md): the Machines, KKMachines, KKInstances and Nodes as
# they are once every Node is Ready, each VM's clock against the machine's (a Node's conditions carry the VM's
# time: clock.txt has per VM the host's time before the ssh call, the VM's `date` and the host's time when its
# answer arrived; the VM's clock minus the last is its offset, within the answer's way back: the call's
# seconds go to connecting, before the VM reads its clock), the load and the manager; its log stays in $WORK/manager.log. REAL_VARIANT labels the run.
timeline_capture() {
  local d=$WORK/timeline i b v a k
  rm -rf "$d"
  mkdir -p "$d"
  for k in machines kkmachines kkinstances; do kubectl get "$k" -n "$NS" -o json >"$d/$k.json"; done
  wl get nodes -o json >"$d/nodes.json"
  for i in $(seq "$VMS"); do
    b=$(date +%s.%N)
    v=$(vmsh "$i" date +%s.%N)
    a=$(date +%s.%N)
    echo "$(vm_name "$i") $b $v $a" >>"$d/clock.txt"
  done
  python3 -c 'import json,sys; print(json.dumps(dict(zip(["run","variant","commit","manager","load_start","load_end","started_epoch_s","captured_epoch_s"], sys.argv[1:7] + [float(sys.argv[7]), float(sys.argv[8])]))))' \
    "$NAME" "${REAL_VARIANT:-after}" "$STARTED_COMMIT" "$MANAGER" "$LOAD_START" \
    "$(cat /proc/loadavg)" "$STARTED_EPOCH" "$(date +%s.%N)" >"$d/meta.json"
  log "    timeline for capkk-bench node-ready: $d"
}

pods_ready() { # pods_ready NAMESPACE SELECTOR COUNT: COUNT pods, every one Running and Ready
  local out
  out=$(wl get pods -n "$1" -l "$2" -o jsonpath='{range .items[*]}{.status.phase}/{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}')
  [ "$(grep -c . <<<"$out")" = "$3" ] && ! grep -qv '^Running/True$' <<<"$out"
}
coredns_from_local_registry() {
  wl get deployment -n kube-system coredns -o jsonpath='{.spec.template.spec.containers[*].image}' | grep -q "^$NODE_REGISTRY/"
}

addons() {
  local nodes=$((CPS + WORKERS))
  stage "kubeadm's addons: kube-proxy on all $nodes nodes, CoreDNS$([ "$CNI" != flannel ] || echo ', flannel')"
  wait_for "kube-proxy Running and Ready on all $nodes nodes" 900 pods_ready kube-system k8s-app=kube-proxy "$nodes"
  if [ "$CNI" = flannel ]; then
    wait_for "flannel Running and Ready on all $nodes nodes (the ClusterResourceSet applied it)" 900 \
      pods_ready kube-flannel app=flannel "$nodes"
    check "flannel's image comes from the local registry ($NODE_REGISTRY)" flannel_from_local_registry
  fi
  check "CoreDNS's image comes from the local registry ($NODE_REGISTRY)" coredns_from_local_registry
  # CoreDNS turns Ready once its kubernetes plugin has synced: through the apiserver's Service IP, i.e. kube-proxy.
  wait_for "CoreDNS Running and Ready (2 replicas)" 900 pods_ready kube-system k8s-app=kube-dns 2
}

hello_apply() { # the workload image as a Deployment pinned to the worker, and a Service in front of it
  wl apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: hello, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: hello}}
  template:
    metadata: {labels: {app: hello}}
    spec:
      nodeSelector: {kubernetes.io/hostname: $(vm_name "$W1")}
      containers:
      - name: hello
        image: $NODE_REGISTRY/$WORKLOAD_IMAGE
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 5, timeoutSeconds: 10}
---
apiVersion: v1
kind: Service
metadata: {name: hello, namespace: default}
spec:
  selector: {app: hello}
  ports: [{port: 80, targetPort: 8080}]
EOF
}
hello_ready() { # one hello pod, Running and Ready on the worker; sets HELLO_POD and HELLO_IP
  local out node phase ready
  out=$(wl get pods -n default -l app=hello -o jsonpath='{range .items[*]}{.metadata.name} {.spec.nodeName} {.status.phase} {.status.conditions[?(@.type=="Ready")].status} {.status.podIP}{"\n"}{end}')
  [ "$(grep -c . <<<"$out")" = 1 ] || return 1
  read -r HELLO_POD node phase ready HELLO_IP <<<"$out"
  [ "$node $phase $ready" = "$(vm_name "$W1") Running True" ]
}
in_cidr() { python3 -c 'import ipaddress, sys; sys.exit(ipaddress.ip_address(sys.argv[1]) not in ipaddress.ip_network(sys.argv[2]))' "$1" "$2"; }
answers() { # answers URL: the control-plane VM gets the hello pod's answer from URL
  [ "$(vmsh 1 "curl -fsS --max-time 10 $1")" = "hello from $HELLO_POD" ]
}
flannel_from_local_registry() {
  wl get ds -n kube-flannel -o jsonpath='{.items[*].spec.template.spec.containers[*].image}' | grep -q "^$NODE_REGISTRY/"
}
hello_answers() { # over the pod network (the pod IP, routed to the worker) and through the Service (kube-proxy)
  local svc i
  # With flannel the worker's pod subnet is what kube-controller-manager gave its Node.
  [ "$CNI" != flannel ] || WORKER_PODS=$(wl get node "$(vm_name "$W1")" -o jsonpath='{.spec.podCIDR}')
  check "the pod's IP $HELLO_IP is in the worker's pod subnet $WORKER_PODS" in_cidr "$HELLO_IP" "$WORKER_PODS"
  wait_for "the control-plane VM reaches the pod on the worker at $HELLO_IP:8080" 300 answers "http://$HELLO_IP:8080/"
  svc=$(wl get service -n default hello -o jsonpath='{.spec.clusterIP}')
  # The Service follows a new pod through kube-controller-manager's EndpointSlices and kube-proxy's sync: at load
  # 9-10 kube-controller-manager lost its lease and restarted right then, and 120 s were not enough (run 3).
  wait_for "the control-plane VM reaches it through its Service $svc:80 (kube-proxy)" 600 answers "http://$svc/"
  # Every other node too: the other control planes and workers, across flannel's routes.
  for i in $(seq 2 "$CPS") $(seq "$((W1 + 1))" "$((CPS + WORKERS))"); do
    wait_for "$(vm_name "$i") reaches the pod at $HELLO_IP:8080 and through its Service" 300 answers_from "$i" \
      "http://$HELLO_IP:8080/" "http://$svc/"
  done
}
answers_from() { # answers_from I URL...: host I gets the hello pod's answer from every URL
  local i=$1 u
  shift
  for u in "$@"; do [ "$(vmsh "$i" "curl -fsS --max-time 10 $u")" = "hello from $HELLO_POD" ] || return 1; done
}

pod_network() {
  stage "workload pod on the worker answers over the pod network"
  hello_apply
  wait_for "a $WORKLOAD_IMAGE pod Running and Ready on $(vm_name "$W1")" 900 hello_ready
  hello_answers
}

# The defaults mode's check: nothing in the applied YAML names a component version, and every KKMachine's
# status.components and every host's binaries are the component defaults of the cluster's Kubernetes version
# (the one table, pkg/service/src/components.rs, read by test/vm/artifacts/defaults.sh), the sandbox image from
# the KKCluster's private registry (the node artifacts' registry).
default_components() {
  stage "no component versions in the YAML: the hosts got the component defaults of $KUBE_VERSION"
  local defaults i want got
  defaults=$("$ROOT/test/vm/artifacts/defaults.sh" "$KUBE_VERSION") || die "no component defaults for $KUBE_VERSION"
  eval "$defaults"
  log "  component defaults of $KUBE_VERSION: containerd $DEFAULT_CONTAINERD, runc $DEFAULT_RUNC, crictl $DEFAULT_CRICTL, pause $DEFAULT_PAUSE"
  check "the applied YAML names no component version (KKMachineTemplates without containerManager values; the KKCluster's only override: CNI's checksum file)" \
    python3 -c '
import sys, yaml
bad = []
for d in yaml.safe_load_all(open(sys.argv[1])):
    if not d:
        continue
    spec = d.get("spec") or {}
    if d["kind"] == "KKMachineTemplate":
        cm = spec["template"]["spec"].get("containerManager") or {}
        name = d["metadata"]["name"]
        bad += [name + ": containerManager." + k for k in ("version", "runcVersion", "crictlVersion", "sandboxImage") if k in cm]
    if d["kind"] == "KKCluster":
        for o in (spec.get("component") or {}).get("overrides") or []:
            if o.get("id") != "cni" or "version" in o or "url" in o or "path" in o:
                bad.append("KKCluster: component.overrides " + str(o))
print("\n".join(bad))
sys.exit(1 if bad else 0)' "$WORK/cluster.yaml"
  log "  nodes:"
  nodes_wide
  log "  KKMachines' resolved components (status.components):"
  kubectl get kkmachines -n "$NS" -o custom-columns='KKMACHINE:.metadata.name,KUBERNETES:.status.components.kubernetesVersion,CONTAINERD:.status.components.containerd,RUNC:.status.components.runc,CRICTL:.status.components.crictl,SANDBOX:.status.components.sandboxImage,DEFAULTED:.status.components.defaulted' |
    tee "$WORK/components.txt" | sed 's/^/    /'
  want="$KUBE_VERSION $DEFAULT_CONTAINERD $DEFAULT_RUNC $DEFAULT_CRICTL $NODE_REGISTRY/pause:$DEFAULT_PAUSE version,runcVersion,crictlVersion,sandboxImage"
  got=$(kubectl get kkmachines -n "$NS" -o jsonpath='{range .items[*]}{.status.components.kubernetesVersion} {.status.components.containerd} {.status.components.runc} {.status.components.crictl} {.status.components.sandboxImage} {.status.components.defaulted}{"\n"}{end}' |
    sed -E 's/\["?//; s/"?\]$//; s/","/,/g' | sort -u)
  check "every KKMachine resolved exactly: $want" test "$got" = "$want"
  for i in $(seq "$VMS"); do
    log "  $(vm_name "$i"): $(vmsh "$i" 'containerd --version | cut -d" " -f3; runc --version | head -1; crictl --version; grep sandbox_image /etc/containerd/config.toml' | tr '\n' ';' | sed 's/  */ /g')"
    check "$(vm_name "$i") runs containerd v$DEFAULT_CONTAINERD" vmsh "$i" "containerd --version | grep -q ' v$DEFAULT_CONTAINERD '"
    check "$(vm_name "$i") runs runc ${DEFAULT_RUNC#v}" vmsh "$i" "runc --version | grep -qx 'runc version ${DEFAULT_RUNC#v}'"
    check "$(vm_name "$i") runs crictl $DEFAULT_CRICTL" vmsh "$i" "crictl --version | grep -qx 'crictl version $DEFAULT_CRICTL'"
    check "$(vm_name "$i")'s containerd sandbox image is $NODE_REGISTRY/pause:$DEFAULT_PAUSE" \
      vmsh "$i" "grep -qF 'sandbox_image = \"$NODE_REGISTRY/pause:$DEFAULT_PAUSE\"' /etc/containerd/config.toml"
  done
}

# The control plane power-cycled while its `kubeadm init` runs (node containers; the fault campaign's finding,
# docs/reliability.md): the host comes back with /run emptied by the boot (CABPK's kubeadm configuration with it)
# and kubeadm's half-done state (manifests, certificates, the static pods the kubelet starts again), over which
# kubeadm refuses to run. The provider writes the files again, undoes the state (`kubeadm reset -f`) and runs
# kubeadm init again; control_plane then waits for the Machine as always.
init_cut() {
  [ "$HOSTS" = containers ] || return 0
  local t0=$SECONDS
  stage "the control plane power-cycled while kubeadm init runs"
  # Out of band (not over the host's sshd) and often: kubeadm init takes ~15 s on a node container. The cut
  # comes once kubeadm has written its static pod manifests and waits for the API server: past its preflight,
  # whose image pulls fail (rather than being killed) when the shutdown stops containerd first, and the failure
  # is then journaled like any other (seen twice). The bracket keeps pgrep from matching its own shell.
  until "$VMCTL" inside --name "$NAME" --vm 1 -- \
    'pgrep -f "kubeadm [i]nit" >/dev/null && [ -e /etc/kubernetes/manifests/kube-apiserver.yaml ]' >/dev/null 2>&1; do
    [ $((SECONDS - t0)) -lt "$CP_TIMEOUT" ] || { check "kubeadm init seen waiting for its control plane on $(vm_name 1)" false; return 1; }
    sleep 0.3
  done
  check "kubeadm init seen waiting for its control plane on $(vm_name 1) after $((SECONDS - t0))s" true
  check "$(vm_name 1) power-cycled while kubeadm init ran" "$VMCTL" restart --name "$NAME" --vm 1
  wait_for "the provider undid kubeadm's half-done state (kubeadm reset) before running kubeadm init again" \
    "$CP_TIMEOUT" grep -q "Undid the half-done state of a kubeadm item cut short" "$WORK/manager.log"
}

# A worker power-cycled (node containers: `vm restart`; its disk survives, its network namespace, routes and
# pod sandboxes do not): its kubelet back, its Node Ready, and the pod network across nodes back through
# flannel's routes (the static routes of REAL_CNI=static would be gone).
node_restart() {
  local i=$((CPS + WORKERS)) w
  w=$(vm_name "$i")
  stage "$w power-cycled: kubelet and Node back, pods reached across nodes again (flannel)"
  check "$w restarted and answers over SSH again" "$VMCTL" restart --name "$NAME" --vm "$i"
  wait_for "$w's kubelet active again" 300 vmsh "$i" 'systemctl is-active -q kubelet'
  wait_for "$w Ready" 600 node_ready "$w"
  wait_for "flannel Running and Ready on all $((CPS + WORKERS)) nodes" 600 pods_ready kube-flannel app=flannel "$((CPS + WORKERS))"
  wait_for "$w reaches the pod on $(vm_name "$W1") at $HELLO_IP:8080 again (flannel's route to its subnet)" 300 \
    answers_from "$i" "http://$HELLO_IP:8080/"
}

scale_down() {
  local w m
  w=$(vm_name "$W1")
  stage "scale $WORKERS -> $((WORKERS - 1)): drain, delete, the worker host $w reset"
  # The Machine on $w goes: CAPI deletes the Machines marked for deletion first.
  m=$(kubectl get machines -n "$NS" -l "$MD_SEL" -o jsonpath="{.items[?(@.status.nodeRef.name==\"$w\")].metadata.name}")
  [ -n "$m" ] || die "no worker Machine on $w"
  kubectl annotate machine -n "$NS" "$m" cluster.x-k8s.io/delete-machine=yes >/dev/null
  kubectl scale machinedeployment -n "$NS" "$MD" --replicas "$((WORKERS - 1))" >/dev/null
  wait_for "the worker Machine $m on $w is gone" 900 machine_gone "$m"
  wait_for "$((WORKERS - 1)) worker Machine(s) left" 300 machine_count "$MD_SEL" "$((WORKERS - 1))"
  wait_for "$w was reset for real (no kubeadm state, kubelet, containerd, KUBE- rules, CNI links, owned paths)" \
    600 host_reset "$W1"
  if [ "$HOSTS" = containers ]; then
    # A host reset and then rebooted before its next claim (the fault campaign's violation: the reset left the
    # containerd it installed enabled while removing its stamp, so the boot started a containerd the next
    # install took for a foreign one): nothing of the node may start at boot.
    check "$w power-cycled after its reset" "$VMCTL" restart --name "$NAME" --vm "$W1"
    check "$w still reset after the power cycle (no containerd or kubelet started at boot)" host_reset "$W1"
  fi
  check "$w's Node is gone from the workload cluster" node_absent "$w"
  check "the control plane is still Ready" node_ready "$(vm_name 1)"
}

scale_up() {
  local w
  w=$(vm_name "$W1")
  stage "scale $((WORKERS - 1)) -> $WORKERS: the same host claimed, Machine Running"
  kubectl scale machinedeployment -n "$NS" "$MD" --replicas "$WORKERS" >/dev/null
  wait_for "$WORKERS worker Machine(s) Running with a nodeRef" "$WORKER_TIMEOUT" machines_running "$MD_SEL" "$WORKERS"
  check "the worker Machines' Nodes are $(worker_hosts) ($w claimed again)" worker_machine_is "$(worker_hosts)"
  stage "rejoined worker Node Ready, the pod back and answering"
  node_joined "$w"
  wait_for "the $WORKLOAD_IMAGE pod Running and Ready on $w again" 900 hello_ready
  hello_answers
  nodes_wide
}

phase_times() { # the host phases as the manager logged them: when each began, and the bootstrap data's commands
  grep -E 'Running step|Host provisioned|Host reset|step=runcmd' "$WORK/manager.log" 2>/dev/null |
    sed -E 's/^[0-9-]+T([0-9:]{8})[^ ]* +[A-Z]+ .*(Running step|Host provisioned|Host reset|step=runcmd)/\1 \2/' |
    tail -n "${1:-12}" | sed 's/^/    /' || true
}

# The paths the product owns on a host, quoted for the VM's shell: capkk_service::bootstrap::OWNED_PATHS as the
# vm binary prints it. A reset host has none of them.
owned_paths() {
  local p
  OWNED_PATHS=
  while read -r p; do OWNED_PATHS+=" $(printf '%q' "$p")"; done < <("$VMCTL" owned-paths)
  [ -n "$OWNED_PATHS" ] || die "$VMCTL owned-paths printed no path"
}

host_reset() { # host_reset I: the VM no longer carries a node (kubeadm state, services, processes, network, paths)
  local out
  # An owned path that is a mount point of its own (a node container's /var/lib/kubelet volume, a user's disk)
  # keeps its mount and loses its content (the reset's remove-paths.sh): left only if something is in it.
  out=$(vmsh "$1" "for p in $OWNED_PATHS; do if mountpoint -q \"\$p\"; then [ -z \"\$(ls -A \"\$p\")\" ] || echo \"left content in \$p\"; elif [ -e \"\$p\" ]; then echo \"left \$p\"; fi; done"'
    ls -d /var/lib/etcd/member 2>/dev/null
    systemctl is-active -q kubelet && echo kubelet-active
    systemctl is-active -q containerd && echo containerd-active
    for p in /proc/[0-9]*; do case $(cat $p/comm 2>/dev/null) in etcd|kube-apiserver|kube-controller|kube-scheduler|kube-proxy|kubelet|containerd|containerd-shim*|coredns|pause) echo "running $(cat $p/comm)";; esac; done
    ip -o link show | grep -E "cni0|flannel|kube-ipvs0|veth" | cut -d: -f2
    iptables-save 2>/dev/null | grep -cE "^-A KUBE-" | grep -v "^0$" | sed "s/^/kube-iptables-rules:/"
    true')
  [ -z "$out" ] || { log "    VM $1 not reset: $(tr '\n' ' ' <<<"$out")"; return 1; }
}

delete_cluster() {
  stage "delete the Cluster (real reset of every VM)"
  kubectl delete -n "$NS" cluster "$CLUSTER" --wait=false >/dev/null
  wait_for "the Cluster is gone" 1200 bash -c "! kubectl get -n '$NS' cluster '$CLUSTER' >/dev/null 2>&1"
  wait_for "every Machine, KKMachine, KKInstance is gone" 300 \
    bash -c "[ -z \"\$(kubectl get -n '$NS' machines,kkclusters,kkmachines,kkinstances -o name 2>/dev/null)\" ]"
  local i
  for i in $(seq "$VMS"); do
    if [ "$i" = "${KEPT_VM:-}" ]; then
      log "    $(vm_name "$i") was quarantined, then its KKInstance deleted: not reset, by design"
      continue
    fi
    check "$(vm_name "$i") was reset for real" host_reset "$i"
  done
}

# ---------------------------------------------------------------------------------------------------------
# day 2 (make e2e-real-day2): a cluster at the older Kubernetes (OLD_VERSION, the node artifacts' previous set)
# upgraded to KUBE_VERSION the way a CAPI user does it: the control plane first (rolling, onto the spare VM), then
# the worker (in place through CAPI's hooks); a KKRemediation repairs the worker; a change the hooks refuse rolls
# the worker onto the VM the old control plane freed.

machine_field() { # machine_field NAME JSONPATH
  kubectl get machine -n "$NS" "$1" -o jsonpath="{$2}"
}
worker_machine() { kubectl get machines -n "$NS" -l "$MD_SEL" -o jsonpath='{.items[*].metadata.name}'; }
cp_machine() { kubectl get machines -n "$NS" -l "$CP_SEL" -o jsonpath='{.items[*].metadata.name}'; }
machine_gone() { ! kubectl get machine -n "$NS" "$1" >/dev/null 2>&1 && kubectl get ns "$NS" >/dev/null; }
node_kubelet_version() { wl get node "$1" -o jsonpath='{.status.nodeInfo.kubeletVersion}'; }
node_at() { [ "$(node_kubelet_version "$1")" = "$2" ] && node_ready "$1"; } # node_at NODE VERSION: Ready at it
host_binaries_at() { # host_binaries_at I VERSION: kubeadm, kubelet and kubectl on VM I are that version
  local out
  out=$(vmsh "$1" 'kubeadm version -o short; kubelet --version | cut -d" " -f2; kubectl version --client -o json | sed -n "s/.*\"gitVersion\": \"\(.*\)\".*/\1/p"' | tr '\n' ' ')
  [ "$out" = "$2 $2 $2 " ] || { log "    VM $1 runs ${out}(want $2 for kubeadm, kubelet, kubectl)"; return 1; }
}
machine_up_to_date() { # machine_up_to_date NAME: CAPI's UpToDate True and no update in progress
  [ "$(machine_field "$1" '.status.conditions[?(@.type=="UpToDate")].status')" = True ] &&
    [ "$(machine_field "$1" '.status.conditions[?(@.type=="Updating")].status')" != True ]
}
machine_identity() { # machine_identity MACHINE FILE: Machine UID, KKMachine UID, providerID, Node (into $WORK/FILE)
  local m=$1 km
  km=$(machine_field "$m" .spec.infrastructureRef.name)
  {
    echo "machine $m uid $(machine_field "$m" .metadata.uid)"
    echo "kkmachine $km uid $(kubectl get kkmachine -n "$NS" "$km" -o jsonpath='{.metadata.uid}')"
    echo "providerID $(machine_field "$m" .spec.providerID) node $(machine_field "$m" .status.nodeRef.name)"
  } >"$WORK/$2"
  echo "    $(machine_field "$m" .spec.version) $(tr '\n' ' ' <"$WORK/$2")"
}
nodes_wide_to() { nodes_wide; cp "$WORK/nodes.txt" "$WORK/$1"; } # nodes_wide_to FILE: print and keep a copy

# A Deployment with a replica on each of two nodes (the control plane's taint tolerated) behind a NodePort
# Service (externalTrafficPolicy Local: a node answers with its own replica, so no traffic crosses the nodes'
# static pod routes, which the control plane's move breaks), and from this machine a probe every half second of
# every VM's node port: the Service counts as reachable while any node answers, as behind a load balancer.
spread_apply() {
  wl apply -f - >/dev/null <<EOT
apiVersion: apps/v1
kind: Deployment
metadata: {name: spread, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: spread}}
  template:
    metadata: {labels: {app: spread}}
    spec:
      tolerations: [{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}]
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: spread}}}
      containers:
      - name: hello
        image: $NODE_REGISTRY/$WORKLOAD_IMAGE
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 2, timeoutSeconds: 10}
---
apiVersion: v1
kind: Service
metadata: {name: spread, namespace: default}
spec:
  type: NodePort
  externalTrafficPolicy: Local
  selector: {app: spread}
  ports: [{port: 80, targetPort: 8080}]
EOT
}
spread_ready() { # two spread pods Running and Ready, on two different nodes
  local out
  out=$(wl get pods -n default -l app=spread -o jsonpath='{range .items[*]}{.spec.nodeName} {.status.phase} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}')
  [ "$(grep -c ' Running True$' <<<"$out")" = 2 ] && [ "$(grep -c . <<<"$out")" = 2 ] &&
    [ "$(cut -d' ' -f1 <<<"$out" | sort -u | grep -c .)" = 2 ]
}
spread_running() { # two spread pods Running and Ready (a node gone for a while may have taken both onto the other)
  [ "$(wl get pods -n default -l app=spread -o jsonpath='{range .items[*]}{.status.phase} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '^Running True$')" = 2 ]
}
gap_probe_start() { # gap_probe_start PORT: the probe loop, in the background, into $WORK/gap.log
  gap_probe_stop
  local addrs=() i
  for i in $(seq "$VMS"); do addrs+=("$(vm_addr "$i")"); done
  (
    last=0
    while :; do
      r=fail
      for k in $(seq 0 $((${#addrs[@]} - 1))); do
        j=$(((last + k) % ${#addrs[@]}))
        if curl -fsS --max-time 1 -o /dev/null "http://${addrs[$j]}:$1/"; then r=ok last=$j; break; fi
      done
      echo "$(date +%s.%N) $r"
      sleep 0.5
    done
  ) >>"$WORK/gap.log" 2>/dev/null &
  echo $! >"$WORK/gap.pid"
  echo "$1" >"$WORK/gap.port"
}
gap_probe_stop() {
  local pid
  pid=$(cat "$WORK/gap.pid" 2>/dev/null || true)
  [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
  rm -f "$WORK/gap.pid"
}
workload_probe() {
  local port
  stage "a 2-replica workload on two nodes, its NodePort Service probed every 0.5 s"
  spread_apply
  wait_for "one spread pod Running and Ready on each of two nodes" 900 spread_ready
  port=$(wl get service -n default spread -o jsonpath='{.spec.ports[0].nodePort}')
  rm -f "$WORK/gap.log" "$WORK/gaps.txt"
  gap_probe_start "$port"
  wait_for "the probe gets answers through node port $port" 120 grep -q ' ok$' "$WORK/gap.log"
}
# gap_report SINCE LABEL: the longest time between two answered probes since SINCE (epoch seconds), in
# $GAP_LOG (default: the workload probe's log)
gap_report() {
  python3 - "${GAP_LOG:-$WORK/gap.log}" "$1" "$2" <<'PY' | tee -a "$WORK/gaps.txt" | sed 's/^/    /'
import sys
path, since, label = sys.argv[1], float(sys.argv[2]), sys.argv[3]
rows = []
for line in open(path):
    parts = line.split()
    if len(parts) == 2:
        try:
            rows.append((float(parts[0]), parts[1]))
        except ValueError:
            pass
rows = [r for r in rows if r[0] >= since]
oks = [t for t, r in rows if r == "ok"]
fails = sum(1 for _, r in rows if r != "ok")
gap = max((b - a for a, b in zip(oks, oks[1:])), default=float("nan"))
print(f"{label}: {len(rows)} probes, {fails} unanswered, longest gap between answers {gap:.1f} s")
PY
}

# A control-plane `kubeadm join` can fail (d2r: kubeadm's fixed 2 s etcd deadline against an old member slowed by
# TCG); CAPI's answer is KCP remediation driven by a MachineHealthCheck on the control plane's Machines: a Machine
# without a Node after the startup timeout is deleted (its etcd member removed, our host reset) and KCP creates
# another, which claims the freed host again. No remediation template: KCP remediates control-plane Machines itself.
cp_health_check_apply() { # cp_health_check_apply [SECONDS]: a Node not Ready for SECONDS (300) is remediated
  local after=${1:-300}
  kubectl apply -f - >/dev/null <<EOT
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineHealthCheck
metadata: {name: $CLUSTER-control-plane, namespace: $NS}
spec:
  clusterName: $CLUSTER
  selector: {matchLabels: {$CP_SEL: ""}}
  checks:
    nodeStartupTimeoutSeconds: $CP_STARTUP_TIMEOUT
    unhealthyNodeConditions:
    - {type: Ready, status: Unknown, timeoutSeconds: $after}
    - {type: Ready, status: "False", timeoutSeconds: $after}
EOT
}

cp_upgrade() {
  local old new m0 m t0
  old=$(vm_name 1) new=$(vm_name 3)
  stage "rolling: KubeadmControlPlane $OLD_VERSION -> $KUBE_VERSION, the new control plane on the spare VM"
  check "both Nodes run $OLD_VERSION before" bash -c "[ \"\$(kubectl --kubeconfig '$WORK/workload.kubeconfig' get nodes -o jsonpath='{.items[*].status.nodeInfo.kubeletVersion}')\" = '$OLD_VERSION $OLD_VERSION' ]"
  nodes_wide_to nodes-before-cp.txt
  m0=$(cp_machine)
  machine_identity "$m0" identity-before-cp.txt
  cp_health_check_apply
  KCP_REMEDIATES=1
  t0=$(date +%s.%N)
  kubectl patch kubeadmcontrolplane -n "$NS" "$CLUSTER-control-plane" --type merge -p "{\"spec\":{\"version\":\"$KUBE_VERSION\"}}" >/dev/null
  wait_for "a second control-plane Machine, on $new" "$CP_TIMEOUT" bash -c \
    "kubectl get machines -n '$NS' -l '$CP_SEL' -o jsonpath='{.items[*].status.nodeRef.name}' | grep -qw '$new'"
  wait_for "the old control-plane Machine $m0 is gone" 1800 machine_gone "$m0"
  m=$(cp_machine)
  check "one control-plane Machine ($m), at $KUBE_VERSION" test "$(machine_field "$m" .spec.version)" = "$KUBE_VERSION"
  check "its Node is $new" test "$(machine_field "$m" .status.nodeRef.name)" = "$new"
  node_joined "$new"
  check "$new's Node reports $KUBE_VERSION" node_at "$new" "$KUBE_VERSION"
  check "kubeadm, kubelet and kubectl on $new are $KUBE_VERSION" host_binaries_at 3 "$KUBE_VERSION"
  wait_for "$old's Node is gone from the workload cluster" 600 node_absent "$old"
  wait_for "$old was reset for real and is free again" 600 host_reset 1
  wait_for "the workload back on two nodes" 900 spread_ready
  KCP_REMEDIATES=
  log "   .. control-plane joins that failed and KCP replaced during the roll: ${KCP_REMEDIATED:- none}"
  log "   .. $m remediation-for: $(kubectl get machine -n "$NS" "$m" -o jsonpath='{.metadata.annotations.controlplane\.cluster\.x-k8s\.io/remediation-for}' 2>/dev/null || true)"
  kubectl delete machinehealthcheck -n "$NS" "$CLUSTER-control-plane" >/dev/null
  gap_report "$t0" "control plane rolling upgrade"
  machine_identity "$m" identity-after-cp.txt
  nodes_wide_to nodes-after-cp.txt
}

# Our manager serves CAPI's in-place update hooks over TLS on 127.0.0.1 (CAPI's controllers run beside it on this
# machine): `mgmt.sh runtime-extension` writes a CA, the serving certificate and the ExtensionConfig that points
# CAPI at it, for this run's namespace only (cert-manager's job in a cluster install, config/inplace).
EXTENSION=capkk-$NAME
extension_certs() {
  local port
  port=$(cat "$WORK/extension.port" 2>/dev/null || true)
  [ -n "$port" ] || { port=$(free_port_pair); echo "$port" >"$WORK/extension.port"; }
  MANAGER_ARGS=(--runtime-extension-bind-address "127.0.0.1:$port" --runtime-extension-cert-dir "$WORK/extension")
  [ ! -s "$WORK/extension/tls.crt" ] || return 0
  "$ROOT/test/mgmt/scripts/mgmt.sh" runtime-extension --out "$WORK/extension" --url "https://127.0.0.1:$port" --name "$EXTENSION" \
    --namespace "$NS" >/dev/null 2>>"$WORK/build.log" || die "mgmt.sh runtime-extension failed"
}
register_extension() { kubectl apply -f "$WORK/extension/extensionconfig.yaml" >/dev/null; }
unregister_extension() { kubectl delete --ignore-not-found extensionconfig "$EXTENSION" >/dev/null; }
extension_discovered() {
  [ "$(kubectl get extensionconfig "$EXTENSION" -o jsonpath='{.status.conditions[?(@.type=="Discovered")].status}')" = True ]
}
extension_up() {
  stage "runtime extension: the manager serves the in-place hooks, CAPI discovers them"
  extension_certs
  # The same manager restarted with the hooks on: the Lease and everything it knows carry over (as a Deployment
  # rollout would).
  start_manager 120 "${MANAGER_ARGS[@]}"
  register_extension
  wait_for "CAPI discovered the extension (ExtensionConfig Discovered)" 300 extension_discovered
}

inplace_upgrade() {
  local w m0 t0 m
  w=$(vm_name 2)
  stage "in place: MachineDeployment $OLD_VERSION -> $KUBE_VERSION on the same Machine and host"
  check "the worker runs $OLD_VERSION before" node_at "$w" "$OLD_VERSION"
  nodes_wide_to nodes-before-inplace.txt
  m0=$(worker_machine)
  machine_identity "$m0" identity-before-inplace.txt
  host_journals "$WORK/journals-before-inplace.txt" 2
  t0=$(date +%s.%N)
  # maxSurge 0: CAPI counts a Machine updated in place as unavailable; with maxSurge 1 (the default) it first
  # creates a Machine for the new version, which needs a free host.
  kubectl patch machinedeployment -n "$NS" "$MD" --type merge -p "{\"spec\":{\"template\":{\"spec\":{\"version\":\"$KUBE_VERSION\"}},\"rollout\":{\"strategy\":{\"type\":\"RollingUpdate\",\"rollingUpdate\":{\"maxSurge\":0,\"maxUnavailable\":1}}}}}" >/dev/null
  wait_for "the worker's Node reports kubelet $KUBE_VERSION and is Ready" "$WORKER_TIMEOUT" node_at "$w" "$KUBE_VERSION"
  wait_for "the Machine is up to date (CAPI's UpToDate True, not Updating)" 600 machine_up_to_date "$m0"
  m=$(worker_machine)
  check "the same Machine ($m0), no second one" test "$m" = "$m0"
  machine_identity "$m0" identity-after-inplace.txt
  check "same Machine UID, KKMachine UID, providerID and Node" \
    diff "$WORK/identity-before-inplace.txt" "$WORK/identity-after-inplace.txt"
  check "the Machine's spec.version is $KUBE_VERSION" test "$(machine_field "$m0" .spec.version)" = "$KUBE_VERSION"
  check "kubeadm, kubelet and kubectl on $w are $KUBE_VERSION" host_binaries_at 2 "$KUBE_VERSION"
  check "the host was not reset or provisioned again (its journal unchanged)" journals_unchanged "$WORK/journals-before-inplace.txt" 2
  check "the KKInstance has the event UpgradedInPlace" bash -c \
    "kubectl get events -n '$NS' --field-selector reason=UpgradedInPlace -o name | grep -q ."
  gap_report "$t0" "in-place upgrade"
  nodes_wide_to nodes-after-inplace.txt
}

remediation_apply() { # remediation_apply [RETRY_LIMIT TIMEOUT]
  local retries=${1:-2} timeout=${2:-600s}
  kubectl apply -f - >/dev/null <<EOT
apiVersion: infrastructure.cluster.x-k8s.io/v1beta1
kind: KKRemediationTemplate
metadata: {name: $CLUSTER-workers, namespace: $NS}
spec:
  template:
    spec:
      strategy: {type: Tiered, retryLimit: $retries, timeout: $timeout}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: MachineHealthCheck
metadata: {name: $CLUSTER-workers, namespace: $NS}
spec:
  clusterName: $CLUSTER
  selector: {matchLabels: {cluster.x-k8s.io/deployment-name: $MD}}
  checks:
    unhealthyNodeConditions:
    - {type: Ready, status: Unknown, timeoutSeconds: 30}
    - {type: Ready, status: "False", timeoutSeconds: 30}
  remediation:
    templateRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta1, kind: KKRemediationTemplate, name: $CLUSTER-workers}
EOT
}
kkremediation_seen() { # kkremediation_seen MACHINE: it exists; its last status is kept in $WORK/kkremediation.yaml
  kubectl get kkremediation -n "$NS" "$1" -o yaml >"$WORK/kkremediation.now.yaml" 2>/dev/null || return 1
  mv -f "$WORK/kkremediation.now.yaml" "$WORK/kkremediation.yaml"
}
kkremediation_condition() { # kkremediation_condition MACHINE TYPE STATUS
  kkremediation_seen "$1" &&
    [ "$(kubectl get kkremediation -n "$NS" "$1" -o jsonpath="{.status.conditions[?(@.type==\"$2\")].status}")" = "$3" ]
}
kkremediation_restarted() { kkremediation_condition "$1" ServicesRestarted True; } # the restart tier ran and said so
kkremediation_gone() { ! kubectl get kkremediation -n "$NS" "$1" >/dev/null 2>&1 && kubectl get ns "$NS" >/dev/null; }
node_not_ready() { [ "$(wl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" != True ]; }

remediate_restart() {
  local w m uid
  w=$(vm_name 2)
  m=$(worker_machine)
  uid=$(machine_field "$m" .metadata.uid)
  stage "remediation (a): kubelet stopped on $w -> MachineHealthCheck -> KKRemediation restarts it"
  remediation_apply
  vmsh 2 'systemctl stop kubelet'
  wait_for "$w NotReady (the node controller's grace period)" 600 node_not_ready "$w"
  wait_for "CAPI created KKRemediation $m from the template" 600 kkremediation_seen "$m"
  wait_for "the restart tier ran (ServicesRestarted True)" 600 kkremediation_restarted "$m"
  wait_for "$w Ready again" 600 node_ready "$w"
  wait_for "CAPI deleted the KKRemediation (the Machine is healthy)" 600 kkremediation_gone "$m"
  check "the same Machine ($m, uid $uid)" test "$(machine_field "$m" .metadata.uid)" = "$uid"
  log "    the KKRemediation's last status:"
  sed -n '/^status:/,$p' "$WORK/kkremediation.yaml" | sed 's/^/      /'
  check "its events say which tier ran (ServicesRestarted)" bash -c \
    "kubectl get events -n '$NS' --field-selector involvedObject.kind=KKRemediation -o jsonpath='{.items[*].reason}' | grep -q ServicesRestarted"
  # The next stage's join takes minutes under TCG: no health check may replace that Machine meanwhile.
  kubectl delete -n "$NS" machinehealthcheck "$CLUSTER-workers" >/dev/null
}

boot_id() { vmsh "$1" 'cat /proc/sys/kernel/random/boot_id'; }

# Remediation, the reboot tier: the worker's kubelet masked until the next boot (`systemctl mask --runtime`
# writes the mask under /run) and stopped. Restarting the services cannot bring it back (a masked unit does not
# start), so attempt 1 fails on the host; after its timeout attempt 2 reboots the host over SSH, /run starts
# empty and the kubelet, still enabled, starts at boot: the same Machine recovers. This mode's VMs restart on a
# guest reboot (CAPKK_VM_REBOOT=1; otherwise QEMU exits).
remediate_reboot() {
  local w m uid boot0
  w=$(vm_name 2)
  m=$(worker_machine)
  uid=$(machine_field "$m" .metadata.uid)
  stage "remediation, reboot tier: the kubelet masked on $w until it reboots -> restart fails -> reboot"
  boot0=$(boot_id 2)
  remediation_apply 2 300s
  # A runtime drop-in (in /run, gone at the next boot) that makes every start of the kubelet fail. Not
  # `systemctl mask --runtime`: our kubelet unit lives in /etc/systemd/system, which outranks /run, so the mask
  # had no effect and the restart tier simply brought the kubelet back (run rb16).
  vmsh 2 'mkdir -p /run/systemd/system/kubelet.service.d &&
    printf "[Service]\nExecStartPre=/bin/false\n" >/run/systemd/system/kubelet.service.d/capkk-test-broken.conf &&
    systemctl daemon-reload && systemctl stop kubelet'
  wait_for "$w NotReady (the node controller's grace period)" 600 node_not_ready "$w"
  wait_for "CAPI created KKRemediation $m from the template" 600 kkremediation_seen "$m"
  # The event, not the condition: ServicesRestarted is False before attempt 1 has run too.
  wait_for "attempt 1, the restart, failed on the host (event ServicesRestartFailed)" 600 bash -c \
    "kubectl get events -n '$NS' --field-selector involvedObject.kind=KKRemediation,reason=ServicesRestartFailed -o name | grep -q ."
  check "its condition says so (ServicesRestarted False)" kkremediation_condition "$m" ServicesRestarted False
  wait_for "attempt 2 rebooted the host (HostRebooted True)" 900 kkremediation_condition "$m" HostRebooted True
  wait_for "$w Ready again" 600 node_ready "$w"
  wait_for "CAPI deleted the KKRemediation (the Machine is healthy)" 600 kkremediation_gone "$m"
  check "the same Machine ($m, uid $uid)" test "$(machine_field "$m" .metadata.uid)" = "$uid"
  check "$w booted again (a new boot ID)" test "$(boot_id 2)" != "$boot0"
  check "the kubelet is active after the reboot" vmsh 2 'systemctl is-active --quiet kubelet'
  log "    the KKRemediation's last status:"
  sed -n '/^status:/,$p' "$WORK/kkremediation.yaml" | sed 's/^/      /'
  check "its events say which tiers ran (ServicesRestartFailed, HostRebooted)" bash -c \
    "kubectl get events -n '$NS' --field-selector involvedObject.kind=KKRemediation -o jsonpath='{.items[*].reason}' | grep -q ServicesRestartFailed &&
     kubectl get events -n '$NS' --field-selector involvedObject.kind=KKRemediation -o jsonpath='{.items[*].reason}' | grep -q HostRebooted"
  kubectl delete -n "$NS" machinehealthcheck "$CLUSTER-workers" >/dev/null
  kubectl delete -n "$NS" kkremediationtemplate "$CLUSTER-workers" >/dev/null
}

kkremediation_handed_over() { kkremediation_condition "$1" OwnerRemediationRequested True; } # gave the Machine back
host_quarantined() { # host_quarantined HOST: its KKInstance carries spec.quarantine and the quarantined label
  [ "$(kubectl get kkinstances -n "$NS" -l kkinstance.infrastructure.cluster.x-k8s.io/quarantined=true \
    -o jsonpath='{range .items[?(@.spec.quarantine)]}{.spec.name}{"\n"}{end}')" = "$1" ]
}

# Remediation (b): the worker's VM cut off (its tap down: a pulled cable). Neither tier can reach it, so the
# KKRemediation gives the Machine back; CAPI's MachineSet deletes and replaces it; the new Machine claims the
# spare VM; the old host cannot be reset and is quarantined (--quarantine-after, shortened for the run) instead
# of freed. The network comes back only after that: the quarantined host must have been left as it was.
remediate_cutoff() {
  local w s m uid tap t0 t_gone t_ready
  w=$(vm_name 2) s=$(vm_name 3)
  m=$(worker_machine)
  uid=$(machine_field "$m" .metadata.uid)
  tap=$(fleet_json "d['vms'][1]['tap']")
  stage "remediation (b): $w cut off -> KKRemediation exhausted -> Machine replaced on $s, $w quarantined"
  remediation_apply 2 120s
  t0=$(date +%s)
  CUT_TAP=$tap
  ip link set "$tap" down
  wait_for "$w NotReady (unreachable)" 600 node_not_ready "$w"
  wait_for "CAPI created KKRemediation $m from the template" 600 kkremediation_seen "$m"
  wait_for "both tiers failed to reach $w and the Machine was handed back (OwnerRemediationRequested True)" 900 \
    kkremediation_handed_over "$m"
  log "    the KKRemediation's last status ($(($(date +%s) - t0)) s after the cut):"
  sed -n '/^status:/,$p' "$WORK/kkremediation.yaml" | sed 's/^/      /'
  # kubectl prints a condition's fields in order: its status is the line before its type.
  check "the restart tier reported failure (ServicesRestarted False)" bash -c \
    "grep -B1 'type: ServicesRestarted' '$WORK/kkremediation.yaml' | grep -q 'status: \"False\"'"
  check "the reboot tier reported failure (HostRebooted False)" bash -c \
    "grep -B1 'type: HostRebooted' '$WORK/kkremediation.yaml' | grep -q 'status: \"False\"'"
  check "its events name both tiers' attempts" bash -c \
    "kubectl get events -n '$NS' --field-selector involvedObject.kind=KKRemediation -o jsonpath='{.items[*].message}' | grep -q 'attempt 2 of 2'"
  wait_for "the Machine $m (uid $uid) is gone" 1200 machine_gone "$m"
  t_gone=$(($(date +%s) - t0))
  wait_for "a new worker Machine Running with a nodeRef" "$WORKER_TIMEOUT" machines_running "$MD_SEL" 1
  check "its Node is $s (the spare VM)" worker_machine_is "$s"
  node_joined "$s"
  t_ready=$(($(date +%s) - t0))
  wait_for "$w's KKInstance quarantined (unreachable past --quarantine-after)" 900 host_quarantined "$w"
  log "    cut -> Machine gone ${t_gone} s; cut -> replacement Node Ready on $s ${t_ready} s; quarantined after $(($(date +%s) - t0)) s"
  kubectl get kkinstances -n "$NS" -o wide | sed 's/^/      /'
  ip link set "$tap" up
  CUT_TAP=
  check "the quarantined $w was left as it was (its kubelet still installed and enabled: no reset ran)" \
    vmsh 2 'systemctl is-enabled -q kubelet'
  kubectl delete -n "$NS" machinehealthcheck "$CLUSTER-workers" >/dev/null
  # What a person does after fixing the host: delete its KKInstance; the claim is given back without a reset.
  kubectl delete kkinstances -n "$NS" -l kkinstance.infrastructure.cluster.x-k8s.io/quarantined=true --wait=false >/dev/null
  KEPT_VM=2
}

# ---------------------------------------------------------------------------------------------------------
# ha (make e2e-real-ha): 3 control planes behind the endpoint the provider serves (a keepalived VIP, haproxy on
# every control plane), a worker and a spare; the host holding the VIP loses its power.

# The live control planes that hold the VIP now (host numbers; the spare counts once it is a control plane).
vip_holders() {
  local i
  for i in $(seq "$CPS") "$VMS"; do
    [ "$i" = "$DEAD_HOST" ] && continue
    [ "$i" != "$VMS" ] || [ -n "$DEAD_HOST" ] || continue
    timeout 20 "$VMCTL" ssh --name "$NAME" --vm "$i" -- "ip -o -4 addr show | grep -q ' $VIP/'" 2>/dev/null && echo "$i"
  done
  return 0
}
vip_held_once() { VIP_HOLDER=$(vip_holders); [ -n "$VIP_HOLDER" ] && [ "$(grep -c . <<<"$VIP_HOLDER")" = 1 ]; }
lb_active() { vmsh "$1" 'systemctl is-active -q keepalived && systemctl is-active -q haproxy'; } # lb_active I

# etcd's members as the etcd of control plane I lists them (its v3 JSON gateway, with kubeadm's health-check
# client certificate: the etcd image carries no etcdctl), one "NAME PEER_URLS voting|learner" a line, into $WORK/FILE.
etcd_members() { # etcd_members I FILE
  vmsh "$1" 'curl -sS --max-time 10 --cacert /etc/kubernetes/pki/etcd/ca.crt \
    --cert /etc/kubernetes/pki/etcd/healthcheck-client.crt --key /etc/kubernetes/pki/etcd/healthcheck-client.key \
    -X POST -d "{}" https://127.0.0.1:2379/v3/cluster/member/list' |
    python3 -c 'import json, sys
for m in json.load(sys.stdin).get("members", []):
    print(m.get("name") or "(not-started)", ",".join(m.get("peerURLs", [])), "learner" if m.get("isLearner") else "voting")' \
    >"$WORK/$2.new" && mv -f "$WORK/$2.new" "$WORK/$2"
}
etcd_voting_are() { # etcd_voting_are I FILE "NAME...": control plane I's etcd lists exactly these members, all voting
  etcd_members "$1" "$2" || return 1
  [ "$(awk '{print $1, $3}' "$WORK/$2" | sort | tr '\n' ' ')" = "$(tr ' ' '\n' <<<"$3" | sort | sed 's/$/ voting/' | tr '\n' ' ')" ]
}
kcp_ready() { # kcp_ready N: the KubeadmControlPlane reports N ready replicas of N
  [ "$(kubectl get kubeadmcontrolplane -n "$NS" "$CLUSTER-control-plane" -o jsonpath='{.status.readyReplicas}/{.status.replicas}')" = "$1/$1" ]
}

ha_endpoint() {
  local i
  stage "the endpoint: VIP $VIP:$VIP_PORT held by one control plane, keepalived and haproxy on all $CPS"
  check "the workload kubeconfig's server is https://$VIP:$VIP_PORT (the Cluster's endpoint)" \
    grep -q "server: https://$VIP:$VIP_PORT\$" "$WORK/workload.kubeconfig"
  for i in $(seq "$CPS"); do
    wait_for "keepalived and haproxy active on $(vm_name "$i")" 300 lb_active "$i"
  done
  wait_for "exactly one control plane holds the VIP" 120 vip_held_once
  log "    the VIP is on $(vm_name "$VIP_HOLDER")"
  check "the API answers through the VIP (GET /readyz)" api_ready
  wait_for "etcd has $CPS voting members: $(cp_hosts)" 300 etcd_voting_are 1 etcd-before.txt "$(cp_hosts)"
  log "    etcd members before (from $(vm_name 1)):"
  sed 's/^/      /' "$WORK/etcd-before.txt"
  # KCP writes its status on its own resync: a control plane joined seconds ago may not be counted yet.
  wait_for "KCP reports $CPS ready replicas" 300 kcp_ready "$CPS"
}

FAILOVER_PROBE_PID=''
failover_probe_stop() {
  [ -z "$FAILOVER_PROBE_PID" ] || { kill "$FAILOVER_PROBE_PID" 2>/dev/null; wait "$FAILOVER_PROBE_PID" 2>/dev/null; } || true
  FAILOVER_PROBE_PID=''
}
# probe_saw KIND [SINCE] [NOT_DETAIL]: the failover log (lines `TIME KIND ok|fail SECONDS DETAIL`) has an
# answered KIND sample at or after SINCE (whose detail is not NOT_DETAIL); prints that sample's time.
probe_saw() {
  awk -v k="$1" -v since="${2:-0}" -v not="${3:-}" \
    '$1 >= since && $2 == k && $3 == "ok" && $5 != not { print $1; found = 1; exit } END { exit !found }' \
    "$WORK/failover.log" 2>/dev/null
}
probe_sees_all() { # the probe has answers of the API and the workload, and sees host NAME hold the VIP
  probe_saw api >/dev/null && probe_saw workload >/dev/null &&
    awk -v h="$1" '$2 == "vip" && $3 == "ok" && $5 == h { found = 1; exit } END { exit !found }' "$WORK/failover.log"
}
api_ready() { [ "$(wl get --raw=/readyz)" = ok ]; } # the workload cluster's API answers /readyz with ok

# The host holding the VIP loses its power (`vm power-off`: a node container's processes all killed at once, its
# network namespace gone; a VM's QEMU killed). capkk-bench failover samples, every 100 ms from the machine, the
# API through the VIP (/readyz on a fresh connection), the workload through a NodePort Service on the worker,
# and which host answers for the VIP in the machine's neighbour table; its report is the failover table's row.
ha_failover() {
  local h port url i hosts=() dead moved
  [ -n "$VIP_HOLDER" ] || wait_for "exactly one control plane holds the VIP" 120 vip_held_once
  h=$VIP_HOLDER dead=$(vm_name "$VIP_HOLDER")
  stage "failover: $dead, holding the VIP, loses its power; the VIP moves, API and workload answer again"
  wl apply -f - >/dev/null <<EOT
apiVersion: v1
kind: Service
metadata: {name: hello-np, namespace: default}
spec:
  type: NodePort
  selector: {app: hello}
  ports: [{port: 80, targetPort: 8080}]
EOT
  port=$(wl get service -n default hello-np -o jsonpath='{.spec.ports[0].nodePort}')
  url=http://$(vm_addr "$W1"):$port/
  wait_for "the workload answers at $url (NodePort on $(vm_name "$W1"))" 300 http_ok "$url"
  for i in $(seq "$VMS"); do hosts+=(--host "$(vm_name "$i")=$(fleet_json "d['vms'][$i-1]['mac']")"); done
  rm -f "$WORK/failover.log"
  "$BENCH" failover probe --kubeconfig "$WORK/workload.kubeconfig" --workload "$url" --vip "$VIP" "${hosts[@]}" \
    --interval-ms 100 --timeout-ms 1000 --out "$WORK/failover.log" >"$WORK/failover-probe.out" 2>&1 &
  FAILOVER_PROBE_PID=$!
  wait_for "the probe gets answers from the API through the VIP and the workload, and sees $dead hold the VIP" 120 \
    probe_sees_all "$dead"
  # The control-plane MachineHealthCheck before the failure: a Node Unknown for REAL_HA_UNHEALTHY_SECS (30 s; it was
  # 60 s until the kubelet's leases and kube-controller-manager's ran at kubeadm's defaults on node containers)
  # is remediated by KCP.
  cp_health_check_apply "${REAL_HA_UNHEALTHY_SECS:-30}"
  sleep 5 # answers before the failure, in the log
  FAILOVER_T0=$(date +%s.%N)
  check "$dead powered off" "$VMCTL" power-off --name "$NAME" --vm "$h"
  DEAD_HOST=$h
  printf 'DEAD_HOST=%s\nFAILOVER_T0=%s\n' "$DEAD_HOST" "$FAILOVER_T0" >"$WORK/failover.env"
  wait_for "the VIP moved to another control plane (the machine's neighbour entry for $VIP)" 120 \
    probe_saw vip "$FAILOVER_T0" "$dead"
  moved=$(probe_saw vip "$FAILOVER_T0" "$dead")
  wait_for "the API answers through the VIP again" 120 probe_saw api "$moved"
  # Late gaps count too (a load balancer still sending to the dead API server): 20 s more.
  sleep 20
  failover_probe_stop
  log "    the failover (capkk-bench failover report; $WORK/failover.log):"
  "$BENCH" failover report --log "$WORK/failover.log" --since "$FAILOVER_T0" --label "$HOSTS" --header |
    tee "$WORK/failover.txt" | sed 's/^/      /'
  check "the VIP moved; neither the API nor the workload went unanswered longer than $HA_MAX_GAP s" \
    "$BENCH" failover report --log "$WORK/failover.log" --since "$FAILOVER_T0" --max-gap-s "$HA_MAX_GAP" --quiet
  wait_for "one live control plane holds the VIP" 120 vip_held_once
  log "    the VIP is on $(vm_name "$VIP_HOLDER") now"
}

# KCP replaces the dead control plane's Machine on the spare host: the MachineHealthCheck marks it (its Node
# Unknown for REAL_HA_UNHEALTHY_SECS), KCP removes its etcd member and deletes it (its host unreachable: quarantined after
# CAPKK_QUARANTINE_AFTER instead of reset), then creates a Machine that claims the spare.
ha_remediation() {
  local dead spare m t_unknown t_gone t_ready cps=() i
  # shellcheck disable=SC1091 # a REAL_FROM run: what ha_failover of the kept run recorded
  [ -n "$DEAD_HOST" ] || source "$WORK/failover.env"
  dead=$(vm_name "$DEAD_HOST") spare=$(vm_name "$VMS")
  stage "remediation: KCP replaces $dead's Machine on the spare host $spare; etcd back at $CPS voting members"
  m=$(kubectl get machines -n "$NS" -l "$CP_SEL" -o jsonpath="{.items[?(@.status.nodeRef.name==\"$dead\")].metadata.name}")
  [ -n "$m" ] || die "no control-plane Machine on $dead"
  KCP_REMEDIATES=1
  wait_for "$dead NotReady (unreachable)" 600 node_not_ready "$dead"
  t_unknown=$(since_failover)
  wait_for "KCP deleted the Machine $m (MachineHealthCheck; etcd member removed; host quarantined)" 1800 machine_gone "$m"
  t_gone=$(since_failover)
  wait_for "$CPS control-plane Machines Running with a nodeRef" "$CP_TIMEOUT" machines_running "$CP_SEL" "$CPS"
  for i in $(seq "$CPS"); do [ "$i" = "$DEAD_HOST" ] || cps+=("$(vm_name "$i")"); done
  cps+=("$spare")
  check "the control-plane Machines' Nodes are ${cps[*]} (the spare took $dead's place)" cp_machines_are "${cps[*]}"
  node_joined "$spare"
  t_ready=$(since_failover)
  KCP_REMEDIATES=
  wait_for "$dead's Node is gone from the workload cluster" 600 node_absent "$dead"
  wait_for "KCP reports $CPS ready replicas" 600 kcp_ready "$CPS"
  wait_for "etcd has $CPS voting members again: ${cps[*]}" 600 etcd_voting_are "$VMS" etcd-after.txt "${cps[*]}"
  log "    etcd members before (from $(vm_name 1)):"
  sed 's/^/      /' "$WORK/etcd-before.txt"
  log "    etcd members after (from $spare):"
  sed 's/^/      /' "$WORK/etcd-after.txt"
  for i in $(seq "$CPS") "$VMS"; do
    [ "$i" = "$DEAD_HOST" ] || wait_for "keepalived and haproxy active on $(vm_name "$i")" 300 lb_active "$i"
  done
  wait_for "one control plane holds the VIP" 120 vip_held_once
  check "the API answers through the VIP (GET /readyz)" api_ready
  wait_for "$dead's KKInstance quarantined (unreachable past --quarantine-after)" 900 host_quarantined "$dead"
  log "    power off -> Node NotReady ${t_unknown} s; -> Machine deleted ${t_gone} s; -> replacement Node Ready on $spare ${t_ready} s"
  echo "| $HOSTS | $dead | $spare | $t_unknown | $t_gone | $t_ready |" >"$WORK/remediation.txt"
  kubectl delete -n "$NS" machinehealthcheck "$CLUSTER-control-plane" >/dev/null
  nodes_wide
  # The dead host stays as it is (powered off); its KKInstance goes, as a person does after giving a host up.
  kubectl delete kkinstances -n "$NS" -l kkinstance.infrastructure.cluster.x-k8s.io/quarantined=true --wait=false >/dev/null
  KEPT_VM=$DEAD_HOST
  {
    echo
    echo "failover ($HOSTS; load now $(cut -d' ' -f1-3 /proc/loadavg)):"
    cat "$WORK/failover.txt"
    echo
    echo "| hosts | lost control plane | replacement | power off -> NotReady (s) | -> Machine deleted (s) | -> new Node Ready (s) |"
    echo "|---|---|---|---|---|---|"
    cat "$WORK/remediation.txt"
    echo
    echo "etcd members before:"
    cat "$WORK/etcd-before.txt"
    echo "etcd members after:"
    cat "$WORK/etcd-after.txt"
  } | tee "$WORK/ha-table.md"
}
since_failover() { python3 -c "import sys, time; print(round(time.time() - float(sys.argv[1])))" "$FAILOVER_T0"; }

# ---------------------------------------------------------------------------------------------------------
# roll (make e2e-real-roll): the whole cluster at OLD_VERSION behind the endpoint the provider serves (the ha
# flavor: a keepalived VIP, haproxy on every control plane; also with one control plane, so that its Machine can
# move to another host), then upgraded to KUBE_VERSION the way a CAPI user does it: the KubeadmControlPlane's
# version (KCP rolls its Machines one at a time, maxSurge 1: a new control plane on a free host, then an old one
# removed, its host reset and free for the next), then the MachineDeployment's (its worker onto a host an old
# control plane left). A 2-replica workload is probed through its NodePort all along, the API through the VIP.
# Hosts: the worker first in the inventory (hosts are claimed in its order; worker role only), then the control
# planes and the spare, which may serve either role.

host_index() { # host_index NAME: the fleet's number of the host NAME
  local i
  for i in $(seq "$VMS"); do [ "$(vm_name "$i")" != "$1" ] || { echo "$i"; return 0; }; done
  return 1
}
cp_nodes() { # the control-plane Machines' Nodes, sorted, one line
  kubectl get machines -n "$NS" -l "$CP_SEL" -o jsonpath='{range .items[*]}{.status.nodeRef.name}{"\n"}{end}' |
    grep . | sort | tr '\n' ' ' | sed 's/ $//'
}
machines_at() { # machines_at SELECTOR COUNT VERSION: exactly COUNT Machines, every one at VERSION, Running, a nodeRef
  local out
  out=$(kubectl get machines -n "$NS" -l "$1" -o jsonpath='{range .items[*]}{.spec.version} {.status.phase} {.status.nodeRef.name}{"\n"}{end}')
  [ "$(grep -c . <<<"$out")" = "$2" ] && [ "$(grep -c "^$3 Running [^ ]" <<<"$out")" = "$2" ]
}
host_images_at() { # host_images_at I VERSION: the control plane's static Pods on host I run VERSION's images
  local out
  # A running container names its image by ID: the image list gives that ID's tags.
  out=$(vmsh "$1" 'crictl ps -o json; echo "#images"; crictl images -o json' | python3 -c 'import json, sys
ps, images = sys.stdin.read().split("#images")
tags = {i["id"]: i.get("repoTags") or [] for i in json.loads(images)["images"]}
for c in json.loads(ps)["containers"]:
    n = c["metadata"]["name"]
    if n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        ids = [c.get("imageRef"), c["image"]["image"], "sha256:" + c["image"]["image"]]
        found = next((tags[i] for i in ids if i in tags), [])
        print(n, " ".join(t.rsplit(":", 1)[-1] for t in found) or c["image"]["image"])' | sort)
  [ "$(grep -c " $2\( \|\$\)" <<<"$out")" = 3 ] || { log "    host $1 runs: $(tr '\n' ' ' <<<"$out")(want $2)"; return 1; }
}
lb_gone() { # lb_gone I: host I runs neither keepalived nor haproxy and holds no configuration capkk wrote
  vmsh "$1" '! systemctl is-active -q keepalived && ! systemctl is-active -q haproxy &&
    ! grep -qs capkk /etc/keepalived/keepalived.conf /etc/haproxy/haproxy.cfg'
}
vip_held_by_one_of() { # vip_held_by_one_of "I...": exactly one host holds the VIP, one of these
  local i held=()
  for i in $(seq "$VMS"); do
    timeout 20 "$VMCTL" ssh --name "$NAME" --vm "$i" -- "ip -o -4 addr show | grep -q ' $VIP/'" 2>/dev/null && held+=("$i")
  done
  [ "${#held[@]}" = 1 ] && [[ " $1 " == *" ${held[0]} "* ]] && VIP_HOLDER=${held[0]}
}
api_probe_start() { # the API through the VIP (/readyz, a fresh connection) every 0.5 s into $WORK/api-gap.log
  api_probe_stop
  (
    while :; do
      r=fail
      curl -ksSf --max-time 1 -o /dev/null "https://$VIP:$VIP_PORT/readyz" && r=ok
      echo "$(date +%s.%N) $r"
      sleep 0.5
    done
  ) >>"$WORK/api-gap.log" 2>/dev/null &
  echo $! >"$WORK/api-gap.pid"
}
api_probe_stop() {
  local pid
  pid=$(cat "$WORK/api-gap.pid" 2>/dev/null || true)
  [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
  rm -f "$WORK/api-gap.pid"
}
roll_probes() {
  stage "probes: the workload through its NodePort and the API through the VIP, every 0.5 s"
  workload_probe
  rm -f "$WORK/api-gap.log"
  api_probe_start
  wait_for "the API answers through the VIP $VIP:$VIP_PORT" 120 grep -q ' ok$' "$WORK/api-gap.log"
}
roll_gaps() { # roll_gaps SINCE LABEL: the workload's and the API's longest gaps since SINCE, into $WORK/roll-gaps.txt
  gap_report "$1" "$2: workload" | tee -a "$WORK/roll-gaps.txt"
  GAP_LOG=$WORK/api-gap.log gap_report "$1" "$2: API through the VIP" | tee -a "$WORK/roll-gaps.txt"
}

cp_roll() {
  local before after t0 i n reused=0 freed=() patch
  before=$(cp_nodes)
  stage "control-plane roll: KubeadmControlPlane $OLD_VERSION -> $KUBE_VERSION ($CPS control plane(s) + a spare host)"
  check "every Node runs $OLD_VERSION before" bash -c "[ -z \"\$(kubectl --kubeconfig '$WORK/workload.kubeconfig' get nodes -o jsonpath='{range .items[*]}{.status.nodeInfo.kubeletVersion}{\"\\n\"}{end}' | grep -v '^$OLD_VERSION\$')\" ]"
  nodes_wide_to nodes-before-roll.txt
  etcd_members 1 etcd-before-roll.txt
  cp_health_check_apply
  KCP_REMEDIATES=1
  # The version, and the etcd and CoreDNS tags the rendering pinned for OLD_VERSION: what kubeadm takes for
  # KUBE_VERSION (a user who pinned them changes them with the version).
  patch="{\"spec\":{\"version\":\"$KUBE_VERSION\",\"kubeadmConfigSpec\":{\"clusterConfiguration\":{\"etcd\":{\"local\":{\"imageTag\":\"$ETCD_IMAGE_TAG\"}},\"dns\":{\"imageTag\":\"$COREDNS_VERSION\"}}}}}"
  t0=$(date +%s.%N)
  kubectl patch kubeadmcontrolplane -n "$NS" "$CLUSTER-control-plane" --type merge -p "$patch" >/dev/null
  wait_for "$CPS control-plane Machines, every one at $KUBE_VERSION, Running" "$CP_TIMEOUT" machines_at "$CP_SEL" "$CPS" "$KUBE_VERSION"
  wait_for "KCP reports $CPS ready replicas" 900 kcp_ready "$CPS"
  KCP_REMEDIATES=
  log "   .. control-plane joins that failed and KCP replaced during the roll: ${KCP_REMEDIATED:- none}"
  kubectl delete machinehealthcheck -n "$NS" "$CLUSTER-control-plane" >/dev/null
  after=$(cp_nodes)
  log "    control planes before: $before; after: $after"
  for n in $after; do
    i=$(host_index "$n")
    node_joined "$n"
    check "$n's Node reports $KUBE_VERSION" node_at "$n" "$KUBE_VERSION"
    check "kubeadm, kubelet and kubectl on $n are $KUBE_VERSION" host_binaries_at "$i" "$KUBE_VERSION"
    check "$n's API server, controller manager and scheduler run $KUBE_VERSION's images" host_images_at "$i" "$KUBE_VERSION"
    wait_for "keepalived and haproxy active on $n" 300 lb_active "$i"
    [[ " $before " != *" $n "* ]] || reused=$((reused + 1))
  done
  # KCP's surge takes the spare first; every later new control plane takes the host an old one left.
  check "$((CPS - 1)) host(s) of the old control planes carry a new one (reused across versions)" test "$reused" = "$((CPS - 1))"
  for n in $before; do [[ " $after " == *" $n "* ]] || freed+=("$n"); done
  check "one host left the control plane: ${freed[*]}" test "${#freed[@]}" = 1
  wait_for "${freed[0]}'s Node is gone from the workload cluster" 600 node_absent "${freed[0]}"
  i=$(host_index "${freed[0]}")
  wait_for "${freed[0]} was reset for real and is free again" 600 host_reset "$i"
  check "${freed[0]} lost keepalived and haproxy with its reset" lb_gone "$i"
  local cps=()
  for n in $after; do cps+=("$(host_index "$n")"); done
  wait_for "exactly one control plane holds the VIP" 120 vip_held_by_one_of "${cps[*]}"
  wait_for "etcd has $CPS voting members: $after" 600 etcd_voting_are "${cps[0]}" etcd-after-roll.txt "$after"
  log "    etcd members before:"
  sed 's/^/      /' "$WORK/etcd-before-roll.txt"
  log "    etcd members after:"
  sed 's/^/      /' "$WORK/etcd-after-roll.txt"
  wait_for "the workload back on two nodes" 900 spread_ready
  roll_gaps "$t0" "control plane roll ($CPS)"
  nodes_wide_to nodes-after-cp-roll.txt
  ROLL_FREED=$i
  echo "$i" >"$WORK/roll-freed"
}

worker_roll() {
  local m0 m t0 n w_old
  m0=$(worker_machine)
  w_old=$(machine_field "$m0" .status.nodeRef.name)
  [ -n "$ROLL_FREED" ] || ROLL_FREED=$(cat "$WORK/roll-freed" 2>/dev/null || true)
  stage "worker roll: MachineDeployment $OLD_VERSION -> $KUBE_VERSION, onto $(vm_name "$ROLL_FREED") (an old control plane's host)"
  t0=$(date +%s.%N)
  kubectl patch machinedeployment -n "$NS" "$MD" --type merge -p "{\"spec\":{\"template\":{\"spec\":{\"version\":\"$KUBE_VERSION\"}}}}" >/dev/null
  wait_for "the old worker Machine $m0 is gone" "$WORKER_TIMEOUT" machine_gone "$m0"
  wait_for "$WORKERS worker Machine(s), at $KUBE_VERSION, Running" "$WORKER_TIMEOUT" machines_at "$MD_SEL" "$WORKERS" "$KUBE_VERSION"
  m=$(worker_machine)
  n=$(machine_field "$m" .status.nodeRef.name)
  check "the new worker ($m) is on $(vm_name "$ROLL_FREED"), the host the old control plane left" test "$n" = "$(vm_name "$ROLL_FREED")"
  node_joined "$n"
  check "$n's Node reports $KUBE_VERSION" node_at "$n" "$KUBE_VERSION"
  check "kubeadm, kubelet and kubectl on $n are $KUBE_VERSION" host_binaries_at "$ROLL_FREED" "$KUBE_VERSION"
  check "$n, a worker now, runs neither keepalived nor haproxy" lb_gone "$ROLL_FREED"
  wait_for "$w_old's Node is gone from the workload cluster" 600 node_absent "$w_old"
  wait_for "$w_old was reset for real and is free again" 600 host_reset "$(host_index "$w_old")"
  wait_for "the workload back on two nodes" 900 spread_ready
  roll_gaps "$t0" "worker roll"
  check "every Node runs $KUBE_VERSION" bash -c "[ -z \"\$(kubectl --kubeconfig '$WORK/workload.kubeconfig' get nodes -o jsonpath='{range .items[*]}{.status.nodeInfo.kubeletVersion}{\"\\n\"}{end}' | grep -v '^$KUBE_VERSION\$')\" ]"
  gap_probe_stop
  api_probe_stop
  nodes_wide_to nodes-after-roll.txt
  {
    echo
    echo "roll $OLD_VERSION -> $KUBE_VERSION, $CPS control plane(s) ($HOSTS; load now $(cut -d' ' -f1-3 /proc/loadavg)):"
    echo "nodes before:"
    cat "$WORK/nodes-before-roll.txt"
    echo "nodes after:"
    cat "$WORK/nodes-after-roll.txt"
    cat "$WORK/roll-gaps.txt"
  } | tee "$WORK/roll-table.md"
}

# A change the hooks cannot do in place (the bootstrap template: kubeadm's join configuration is only read at
# join) is answered "no", and CAPI rolls the MachineDeployment: the new Machine claims the first free worker host,
# the VM the old control plane left (it ran OLD_VERSION before its reset), the old worker's VM is reset.
rolling_fallback() {
  local w_old w_new m0 m t0 i_new=1 strategy=""
  w_old=$(vm_name 2) w_new=$(vm_name 1)
  # Two VMs: no free host, so the old worker goes first (maxSurge 0) and the new Machine claims its reset VM.
  if [ "$VMS" = 2 ]; then
    w_new=$w_old i_new=2
    strategy=',"rollout":{"strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":0,"maxUnavailable":1}}}'
  fi
  stage "rolling: a bootstrap template change the hooks refuse, the worker onto a free (reset) VM"
  m0=$(worker_machine)
  machine_identity "$m0" identity-before-rolling.txt
  kubectl get kubeadmconfigtemplate -n "$NS" "$MD" -o json | python3 -c '
import json, sys
t = json.load(sys.stdin)
t["metadata"] = {"name": t["metadata"]["name"] + "-rolled", "namespace": t["metadata"]["namespace"]}
spec = t["spec"]["template"].setdefault("spec", {})
spec["postKubeadmCommands"] = spec.get("postKubeadmCommands", []) + ["echo capkk-day2-rolled > /var/lib/capkk-day2-rolled"]
json.dump(t, sys.stdout)' | kubectl apply -f - >/dev/null
  t0=$(date +%s.%N)
  kubectl patch machinedeployment -n "$NS" "$MD" --type merge -p "{\"spec\":{\"template\":{\"spec\":{\"bootstrap\":{\"configRef\":{\"name\":\"$MD-rolled\"}}}}$strategy}}" >/dev/null
  wait_for "the old worker Machine $m0 is gone" "$WORKER_TIMEOUT" machine_gone "$m0"
  wait_for "worker Machine Running with a nodeRef" "$WORKER_TIMEOUT" machines_running "$MD_SEL" 1
  m=$(worker_machine)
  check "a new Machine ($m), not updated in place" test "$m" != "$m0"
  check "its Node is $w_new (a free VM: the one the old control plane left, or with 2 VMs the old worker's, reset)" \
    worker_machine_is "$w_new"
  node_joined "$w_new"
  check "$w_new's Node reports $KUBE_VERSION" node_at "$w_new" "$KUBE_VERSION"
  check "kubeadm, kubelet and kubectl on $w_new are $KUBE_VERSION" host_binaries_at "$i_new" "$KUBE_VERSION"
  check "its KKInstance was provisioned anew (the new bootstrap template's command ran)" \
    vmsh "$i_new" 'test -s /var/lib/capkk-day2-rolled'
  [ "$VMS" = 2 ] || wait_for "$w_old was reset and is free again" 600 host_reset 2
  wait_for "the workload's two replicas Running and Ready" 900 spread_running
  gap_report "$t0" "worker rolling (fallback)"
  machine_identity "$m" identity-after-rolling.txt
  nodes_wide_to nodes-after-rolling.txt
}

# The test's objects lose their finalizers (the manager is gone; CAPI controllers may still create a Machine
# between a pass and the namespace deletion, so this runs again until the namespace is gone or 60 s passed).
strip_finalizers() {
  local i
  for i in $(seq 12); do
    drop_finalizers
    kubectl get ns "$NS" >/dev/null 2>&1 || return 0
    [ "$i" = 1 ] && kubectl delete ns "$NS" --wait=false >/dev/null 2>&1
    sleep 5
  done
}

teardown() {
  # A run stopped during remediation (b) with REAL_KEEP=1 keeps its VMs: their network comes back.
  [ -z "${CUT_TAP:-}" ] || ip link set "$CUT_TAP" up 2>/dev/null || true
  stop_manager
  serve_down
  gap_probe_stop
  api_probe_stop
  failover_probe_stop
  tcp_lb_down "$WORK"
  # The provider inventory move_back copied onto the shared local plane: left there, every later `clusterctl move`
  # from that plane (mgmt_clusterctl_move in make test) requires its target to run those providers.
  if [ -n "${KUBECONFIG:-}" ] && [ -s "$WORK/inventory.json" ]; then
    kubectl delete --ignore-not-found -f "$WORK/inventory.json" >/dev/null 2>&1 || true
  fi
  if [ -n "${KUBECONFIG:-}" ] && kubectl get ns "$NS" >/dev/null 2>&1; then
    strip_finalizers
  fi
  # Cluster-scoped: left behind, CAPI would keep calling a manager that is gone.
  [[ $MODE != day2* ]] || [ -z "${KUBECONFIG:-}" ] || unregister_extension 2>/dev/null || true
  # shellcheck disable=SC2015 # `|| true` is meant for both: no vm binary, or nothing to take down
  [ -x "${VMCTL:-}" ] && "$VMCTL" down --name "$NAME" >/dev/null 2>&1 || true
}

# attach: what the stages before REAL_FROM would have set, from a kept run of the same REAL_NAME.
attach() {
  mgmt_env
  owned_paths
  # shellcheck disable=SC1091
  source "$CAPKK_CACHE/node-artifacts/current.env"
  [ "$SERVE_PREV" != 1 ] || prev_artifacts
  if [ ! -s "$WORK/serve/serve.env" ] || [ ! -s "/tmp/capkk-sandbox/$NAME/state.json" ]; then
    die "REAL_FROM=$FROM: no kept run of $NAME (run it with REAL_KEEP=1 first)"
  fi
  # shellcheck disable=SC1091
  source "$WORK/serve/serve.env"
  # shellcheck disable=SC1091
  source "$WORK/serve/registry.cred"
  BRIDGE=$(fleet_json "d['bridge_address']")
  INNER=$(fleet_json "d['inner_cidr']")
  cluster_nets
  ha_vip
  pod_subnets
  if [ "$MODE" = day2 ]; then
    [ "$VMS" != 3 ] || lb_up
    [ ! -s "$WORK/gap.port" ] || gap_probe_start "$(cat "$WORK/gap.port")"
  fi
  if [ "$MODE" = roll ] && [ -s "$WORK/gap.port" ]; then
    gap_probe_start "$(cat "$WORK/gap.port")"
    api_probe_start
  fi
  [ -s "$WORK/workload.kubeconfig" ] || workload_kubeconfig
  # After the pivot the cluster's objects live in the VM cluster: the progress lines list them there.
  if ! kubectl get cluster -n "$NS" "$CLUSTER" >/dev/null 2>&1 && wl get cluster -n "$NS" "$CLUSTER" >/dev/null 2>&1; then
    KK_CTX=(--kubeconfig "$WORK/workload.kubeconfig")
  fi
  local pid
  pid=$(cat "$WORK/manager.pid" 2>/dev/null || true)
  if [ -z "$pid" ] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != manager ]; then
    # A kept day-2 run past extension_up: its manager serves the hooks again with the same certificate.
    [ "$MODE" != day2 ] || [ ! -s "$WORK/extension/tls.crt" ] || extension_certs
    start_manager 120 "${MANAGER_ARGS[@]}"
  fi
}

explore() { # what a person can do with a cluster left running
  local down=down
  [ "$MODE" = smoke ] || down=$MODE-down
  cat <<EOF

The cluster $CLUSTER is left running: its hosts ($HOSTS, /tmp/capkk-sandbox/$NAME), the mirror and registry on
${BRIDGE:-the fleet bridge}, the manager (pid $(cat "$WORK/manager.pid" 2>/dev/null)). Explore it:

  export PATH=$BIN_DIR:\$PATH KUBECONFIG=$KUBECONFIG
  clusterctl describe cluster $CLUSTER -n $NS --show-conditions all
  kubectl get cluster,kkcluster,machines,kkmachines,kkinstances -n $NS
  kubectl --kubeconfig $WORK/workload.kubeconfig get nodes -o wide
  kubectl --kubeconfig $WORK/workload.kubeconfig get pods -A -o wide
  kubectl scale machinedeployment $MD -n $NS --replicas 0   # resets the worker host; --replicas 1 claims it again
  $VMCTL ssh --name $NAME --vm 1 -- crictl ps

Logs: $WORK/manager.log (the provider); hosts: $VMCTL inside --name $NAME --vm 1 -- journalctl (containers), /tmp/capkk-sandbox/$NAME/vm*/console.log (VMs).
Tear down: REAL_NAME=$NAME test/vm/real.sh $down$([ "$MODE" = quickstart ] && echo "   (make quickstart-down)")
EOF
}

finish() { # finish RC: the EXIT trap of smoke, e2e and quickstart
  local rc=$1
  end_stage failed
  timing_table
  if [ -s "$WORK/nodes.txt" ]; then
    echo
    echo "workload cluster, kubectl get nodes -o wide:"
    cat "$WORK/nodes.txt"
  fi
  echo
  [ "$MANAGER_RESTARTS" = 0 ] || echo "the manager exited and was restarted $MANAGER_RESTARTS time(s) during the run"
  echo "real $MODE: $PASSED passed, $FAILED failed"
  if [ "$KEEP" = 1 ] || { [ "$MODE" = quickstart ] && [ "$rc" = 0 ]; }; then
    explore
  else
    teardown
  fi
  exit "$rc"
}

main() {
  local steps=() step started=1
  case $MODE in
    smoke)
      VMS=1
      steps=(build mgmt_up release vms_up serve_up render_apply init_cut control_plane manager_pod delete_cluster)
      ;;
    defaults)
      # e2e's cluster with no component versions, checked against the component defaults; no scale stages.
      [ "$CNI" = flannel ] || die "REAL_CNI=$CNI: the defaults mode runs flannel"
      WORKERS=1 VMS=2
      steps=(build mgmt_up release vms_up serve_up render_apply control_plane workers addons pod_network
        default_components delete_cluster)
      ;;
    e2e | quickstart)
      WORKERS=${REAL_WORKERS:-1}
      case $WORKERS in 1) ;; [23]) [ "$CNI" = flannel ] || die "REAL_WORKERS=$WORKERS needs REAL_CNI=flannel" ;;
        *) die "REAL_WORKERS=$WORKERS: 1 to 3" ;; esac
      VMS=$((1 + WORKERS))
      steps=(build mgmt_up release vms_up serve_up render_apply control_plane workers addons pod_network)
      if [ "$MODE" != quickstart ]; then
        [ "$HOSTS/$CNI" != containers/flannel ] || [ "$WORKERS" -lt 2 ] || steps+=(node_restart)
        steps+=(scale_down scale_up delete_cluster)
      fi
      ;;
    clusterctl)
      # 3 VMs: "mgmt" is a control plane and a worker, the third VM a spare host that the self-hosted cluster
      # claims when it scales its MachineDeployment. With 1 or 2 VMs there is no spare: no scale stage.
      # REAL_SPARE=1 with 2 VMs: "mgmt" is one node (control plane taking workloads) and the second VM the
      # spare, so that until the scale the one busy VM has both of a 2-core machine's cores under TCG.
      VMS=${REAL_VMS:-3}
      case $VMS in 1 | 2 | 3) ;; *) die "REAL_VMS=$VMS: 1, 2 or 3" ;; esac
      SPARE=${REAL_SPARE:-$([ "$VMS" = 3 ] && echo 1 || echo 0)}
      case $VMS/$SPARE in 3/1 | 2/1 | [123]/0) ;; *) die "REAL_SPARE=$SPARE with REAL_VMS=$VMS: one spare at most, never the only VM" ;; esac
      steps=(build mgmt_up release vms_up serve_up render_apply control_plane)
      [ "$((VMS - 1 - SPARE))" = 0 ] || steps+=(workers)
      steps+=(clusterctl_init pivot)
      # The upgrade before the scale: the hosts it must leave untouched are the ones the pivot moved.
      steps+=(provider_upgrade)
      [ "$SPARE" = 0 ] || steps+=(self_scale)
      steps+=(move_back delete_cluster)
      ;;
    readme)
      # Host 1 becomes the management cluster (our controllers on the local plane make it, as in the clusterctl
      # mode); hosts 2 and 3 are in no cluster: the README's KUBEKEY_INSTANCES, for its cluster "demo".
      [ "$CNI" = flannel ] || die "REAL_CNI=$CNI: the readme mode runs flannel (the README's flavor)"
      VMS=1 EXTRA_VMS=2
      steps=(build mgmt_up release vms_up serve_up render_apply control_plane readme_install readme_cluster)
      ;;
    day2)
      # 3 VMs: the control plane's roll too (at load 10-13 on a 2-core machine it failed: kubeadm's fixed 10 s
      # client timeout in the control-plane join, see docs/upgrades.md).
      VMS=${REAL_VMS:-2}
      case $VMS in 2) SPARE=0 ;; 3) SPARE=1 ;; *) die "REAL_VMS=$VMS: 2 or 3" ;; esac
      steps=(build mgmt_up release vms_up serve_up render_apply control_plane workers addons workload_probe)
      [ "$VMS" = 2 ] || steps+=(cp_upgrade)
      steps+=(extension_up inplace_upgrade remediate_restart rolling_fallback delete_cluster)
      ;;
    remediation)
      VMS=3 SPARE=1
      # A host that stays unreachable is quarantined after this long (10 min by default).
      export CAPKK_QUARANTINE_AFTER=${CAPKK_QUARANTINE_AFTER:-3m}
      # The reboot tier reboots a VM: it must come back, not end its QEMU.
      export CAPKK_VM_REBOOT=1
      steps=(build mgmt_up release vms_up serve_up render_apply control_plane workers remediate_reboot remediate_cutoff
        delete_cluster)
      ;;
    ha)
      # Control planes 1-3, the worker 4, the spare 5 (a control-plane host in no Machine: KCP's replacement).
      CPS=3 W1=4 VMS=5 SPARE=1
      # An unreachable host's Machine is deleted (and the host quarantined) after this long (10 min by default):
      # KCP replaces a lost control plane only once its Machine is gone. Counted from the first failed reset, and a
      # powered-off node container refuses at once: 20 s (it was 1 min, which was only waiting).
      export CAPKK_QUARANTINE_AFTER=${CAPKK_QUARANTINE_AFTER:-20s}
      steps=(build mgmt_up release vms_up serve_up render_apply control_plane workers addons pod_network ha_endpoint
        ha_failover ha_remediation delete_cluster)
      ;;
    roll)
      # REAL_CPS control planes (hosts 1..CPS), the worker (CPS+1), the spare (CPS+2): at OLD_VERSION.
      CPS=${REAL_CPS:-3}
      case $CPS in 1 | 3) ;; *) die "REAL_CPS=$CPS: 1 or 3" ;; esac
      W1=$((CPS + 1)) VMS=$((CPS + 2)) SPARE=1
      steps=(build mgmt_up release vms_up serve_up render_apply control_plane workers addons ha_endpoint roll_probes
        cp_roll worker_roll delete_cluster)
      ;;
    *-down | down)
      mgmt_env
      teardown
      return 0
      ;;
  esac
  # A signal is a failure: without these the EXIT trap could see the status of the last command (0) and take an
  # interrupted quickstart for a finished one (left running instead of torn down).
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'finish $?' EXIT
  if [ -n "$FROM" ]; then
    FROM=${FROM//-/_}
    [[ " ${steps[*]} " == *" $FROM "* ]] || die "REAL_FROM=$FROM: not a stage of $MODE (${steps[*]})"
    started=0
    attach
  fi
  if [ -n "$TO" ]; then
    [[ " ${steps[*]} " == *" ${TO//-/_} "* ]] || die "REAL_TO=$TO: not a stage of $MODE (${steps[*]})"
  fi
  # The MachineDeployment's workers: every host but the control plane's and the spare (e2e sets its own).
  WORKERS=${WORKERS:-$((VMS - CPS - SPARE))}
  # On node containers, every mode ends with the machine's kernel settings checked.
  [ "$HOSTS" != containers ] || steps+=(machine_unchanged)
  for step in "${steps[@]}"; do
    [ "$step" = "$FROM" ] && started=1
    [ "$started" = 1 ] || continue
    "$step"
    [ "$step" != "${TO//-/_}" ] || break
  done
  end_stage
  [ "$FAILED" = 0 ]
}

# Everything runs from main, parsed in full before it starts: editing this file during a run is harmless.
main "$@"; exit $?
