#!/usr/bin/env bash
# Real nodes: the provider's production path against Debian VMs under QEMU (test/vm) with real kubeadm,
# kubelet and containerd, the node artifacts built here (test/vm/artifacts) served by a real file mirror and a
# real OCI registry on the VMs' bridge.
#
#   test/vm/real.sh smoke        1 VM: KubeadmControlPlane (1 replica) inits it through our controllers, the
#                                Node goes Ready with our providerID, deleting the Cluster resets the VM
#                                (make test-real-smoke; not yet part of make test, see test/vm/README.md)
#   test/vm/real.sh down         tear down what a failed or interrupted smoke left (VMs, mirror, manager, namespace)
#
# Not yet here: the e2e-real lifecycle (a worker VM joining, scale down/up, a pod over the pod network) and the
# quickstart-real cluster left running; see test/vm/README.md for where that stands.
#
# Nothing here reaches into the product: the cluster is rendered by the real `clusterctl generate cluster` from
# our default template; the TCG knobs (ECDSA keys, leader-election leases, kubeadm timeouts, probe thresholds),
# the registry and the mirror are set in the rendered KubeadmControlPlane/KubeadmConfigTemplate/KKCluster like
# a user would. The hosts are "pre-made machines" whose only preparation is their apt source (the local Debian
# package mirror), as a user's hosts come with their package mirror configured.
#
# shellcheck disable=SC2016,SC2317 # single-quoted scripts are for the VMs' shells; most functions run only
# through check, wait_for and the traps, where shellcheck does not see them called.
set -euo pipefail

MODE=${1:-smoke}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
case $MODE in
  smoke | down) NAME=${REAL_NAME:-real-smoke} ;;
  *) echo "usage: $0 smoke|down" >&2; exit 2 ;;
esac
CLUSTER=$NAME
NS=capkk-$NAME
WORK=${REAL_WORK:-$ROOT/target/real/$NAME}
VERSION=${VERSION:-v0.1.0}
CAPKK_CACHE=${CAPKK_CACHE:-$HOME/.cache/capkk-rs}
export CAPKK_CACHE CLUSTERCTL_DISABLE_VERSIONCHECK=true
CARGO=${CARGO:-cargo}
# Budgets under TCG on a shared 2-core machine (see ../shared/reference/real-nodes.md): minutes, not seconds.
CP_TIMEOUT=${REAL_CP_TIMEOUT:-3600}
# shellcheck disable=SC2034 # for the worker stage still to come ("Not yet here" above)
WORKER_TIMEOUT=${REAL_WORKER_TIMEOUT:-1500}

# Stages take minutes under TCG, and their times depend on the machine's load: whole seconds, the load average
# with every stage, polls and progress lines less often, the time each wait took. A failed check ends the run
# (set -e): every stage builds on the one before, and waiting on a broken VM costs minutes.
HARNESS_POLL_SECS=5 HARNESS_PROGRESS_SECS=60 HARNESS_WAIT_SECS=1 HARNESS_LOAD=1
HARNESS_STAGE_DECIMALS=0 HARNESS_STAGE_WIDTH=58
# shellcheck source=SCRIPTDIR/../lib/harness.sh
source "$ROOT/test/lib/harness.sh"
# shellcheck source=SCRIPTDIR/../lib/provider.sh
source "$ROOT/test/lib/provider.sh"

progress() {
  log "   .. $(kubectl get kkmachines -n "$NS" --no-headers \
    -o custom-columns=M:.metadata.name,PHASE:.status.phase,STEP:.status.step 2>/dev/null | tr -s ' ' | tr '\n' ';') \
load $(cut -d' ' -f1-3 /proc/loadavg)"
}

diagnostics() {
  provider_diagnostics 30
  local i
  for i in $(seq "${VMS:-0}"); do
    log "-- VM $i: kubelet and containers"
    vmsh "$i" 'systemctl is-active containerd kubelet; journalctl -u kubelet --no-pager -n 15; crictl ps -a 2>/dev/null | head -20' 2>&1 |
      sed 's/^/    /' || true
  done
}

# ---------------------------------------------------------------------------------------------------------
# environment

mgmt_env() {
  BIN_DIR=$(bash -c 'source "$1/test/mgmt/scripts/common.sh" && echo "$BIN_DIR"' _ "$ROOT")
  export PATH=$BIN_DIR:$PATH
  export KUBECONFIG=${CAPKK_MGMT_DIR:-$CAPKK_CACHE/mgmt}/kubeconfig
  VMCTL=$ROOT/target/debug/vm
  MANAGER=$ROOT/target/debug/manager
}

build() {
  stage "build (cargo; mgmt binaries; node artifacts)"
  mkdir -p "$WORK"
  # `make build` is the test build (one feature set for everything): no crate compiles twice.
  make -s -C "$ROOT" build CARGO="$CARGO" >"$WORK/build.log" 2>&1 || { tail -n 30 "$WORK/build.log"; die "make build failed"; }
  make -s -C "$ROOT" mgmt-bin >>"$WORK/build.log" 2>&1 || { tail -n 30 "$WORK/build.log"; die "make mgmt-bin failed"; }
  make -s -C "$ROOT" node-artifacts >>"$WORK/build.log" 2>&1 || { tail -n 30 "$WORK/build.log"; die "make node-artifacts failed"; }
  mgmt_env
  # shellcheck disable=SC1091
  source "$CAPKK_CACHE/node-artifacts/current.env"
  [ -n "${KUBE_VERSION:-}" ] || die "node artifacts: KUBE_VERSION missing in current.env"
}

mgmt_up() {
  stage "management plane up"
  make -s -C "$ROOT" mgmt-up >"$WORK/mgmt-up.log" 2>&1 || { tail -n 30 "$WORK/mgmt-up.log"; die "make mgmt-up failed"; }
  check "management plane answers" bash -c 'kubectl get --raw=/readyz >/dev/null'
}

http_ok() { curl -fsS -o /dev/null --max-time 10 "$1"; }

release() {
  stage "release-manifests + provider CRDs/RBAC + manager process"
  provider_release
  # A namespace of a crashed run may still hold objects whose finalizers no manager removes any more.
  provider_install strip_finalizers
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
  stage "VMs boot to SSH ($VMS VM(s), image from cache or built)"
  local specs=(--vm 2x3072) guard=$$
  [ "$VMS" = 2 ] && specs+=(--vm 1x2048)
  "$VMCTL" up --name "$NAME" "${specs[@]}" --guard-pid "$guard" >/dev/null
  BRIDGE=$(fleet_json "d['bridge_address']")
  INNER=$(fleet_json "d['inner_cidr']")
  local i
  for i in $(seq "$VMS"); do
    log "  $(vm_name "$i") $(vm_addr "$i") ready $(fleet_json "round(d['vms'][$i-1]['boot_secs'])")s after QEMU start (image build $(fleet_json "round(d['image_build_secs'])")s)"
  done
  check "VM 1 answers over SSH with the pinned host key" vmsh 1 true
}

serve_up() {
  stage "mirror + registry on the bridge ($BRIDGE)"
  mkdir -p "$WORK/serve"
  REGISTRY_USER=capkk
  REGISTRY_PASSWORD=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
  NODE_REGISTRY_USER=$REGISTRY_USER NODE_REGISTRY_PASSWORD=$REGISTRY_PASSWORD \
    "$ROOT/test/vm/artifacts/serve.sh" start "$WORK/serve" "$BRIDGE" >/dev/null
  # shellcheck disable=SC1091
  source "$WORK/serve/serve.env"
  check "the mirror serves kubeadm ($NODE_MIRROR_URL)" \
    http_ok "$NODE_MIRROR_URL/kubernetes-release/release/$KUBE_VERSION/bin/linux/amd64/kubeadm.sha256"
  local i
  for i in $(seq "$VMS"); do
    # The host's package mirror: the one thing a user's pre-made machine brings along.
    vmsh "$i" "rm -f /etc/apt/sources.list.d/*; echo '$NODE_APT_SOURCE' > /etc/apt/sources.list"
  done
}

serve_down() {
  # shellcheck disable=SC2015 # `|| true` is meant for both: nothing to stop, or stopping failed
  [ -d "$WORK/serve" ] && "$ROOT/test/vm/artifacts/serve.sh" stop "$WORK/serve" >/dev/null 2>&1 || true
}

# ---------------------------------------------------------------------------------------------------------
# the cluster

render_apply() {
  stage "render (clusterctl generate cluster + TCG knobs) + apply"
  local i instances="" fp role
  for i in $(seq "$VMS"); do
    fp=$(fleet_json "d['vms'][$i-1]['host_key_fingerprint']")
    role=worker
    [ "$i" = 1 ] && role=control-plane
    instances+="${instances:+, }{name: $(vm_name "$i"), address: $(vm_addr "$i"), roles: [$role], hostKeys: [\"$fp\"]}"
  done
  local m=$NODE_MIRROR_URL kv=$KUBE_VERSION
  local component="{host: \"$m\", downloadOn: host, overrides: [
 {id: kubeadm, checksum: {path: /kubernetes-release/release/$kv/bin/linux/amd64/kubeadm.sha256}},
 {id: kubelet, checksum: {path: /kubernetes-release/release/$kv/bin/linux/amd64/kubelet.sha256}},
 {id: kubectl, checksum: {path: /kubernetes-release/release/$kv/bin/linux/amd64/kubectl.sha256}},
 {id: cni, checksum: {path: /containernetworking/plugins/releases/download/$CNI_VERSION/cni-plugins-linux-amd64-$CNI_VERSION.tgz.sha256}},
 {id: crictl, checksum: {path: /cri-tools/releases/download/$CRICTL_VERSION/crictl-$CRICTL_VERSION-linux-amd64.tar.gz.sha256}},
 {id: containerd, checksum: {path: /containerd/containerd/releases/download/v$CONTAINERD_VERSION/containerd-$CONTAINERD_VERSION-linux-amd64.tar.gz.sha256sum}},
 {id: runc, checksum: {path: /opencontainers/runc/releases/download/$RUNC_VERSION/runc.sha256sum}}]}"
  component=$(echo "$component" | tr -d '\n')
  # Pods get 198.19.N.0/25, Services 198.19.N.128/25: inside the fleet's slot, never routed on the machine.
  local base=${INNER%.0/24}
  KUBEKEY_INSTANCES="[$instances]" KUBEKEY_COMPONENT="$component" KUBEKEY_SSH_SECRET="$CLUSTER-ssh" \
    POD_CIDR="$base.0/25" SERVICE_CIDR="$base.128/25" \
    clusterctl generate cluster "$CLUSTER" -n "$NS" --infrastructure "kubekey:$VERSION" --config "$CCONF" \
    --kubernetes-version "$KUBE_VERSION" --control-plane-machine-count 1 --worker-machine-count "$((VMS - 1))" \
    >"$WORK/cluster-generated.yaml"
  python3 "$ROOT/test/vm/tcg-knobs.py" "$WORK/cluster-generated.yaml" "$WORK/cluster.yaml" \
    --registry "$NODE_REGISTRY" --registry-secret "$CLUSTER-registry" \
    --containerd "$CONTAINERD_VERSION" --runc "$RUNC_VERSION" --crictl "$CRICTL_VERSION" \
    --pause "$NODE_REGISTRY/pause:$PAUSE_VERSION" --pod-cidr "$base.0/25"
  check "the rendered cluster passes a server dry-run" bash -c "kubectl apply --dry-run=server -f '$WORK/cluster.yaml' >/dev/null"
  kubectl -n "$NS" create secret generic "$CLUSTER-ssh" \
    --from-file=privateKey="$(fleet_json "d['private_key']")" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl -n "$NS" create secret generic "$CLUSTER-registry" --from-literal=username="$REGISTRY_USER" \
    --from-literal=password="$REGISTRY_PASSWORD" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl apply -f "$WORK/cluster.yaml" >/dev/null
}

# shellcheck disable=SC2034 # for the worker stage still to come ("Not yet here" above)
MD_SEL="cluster.x-k8s.io/deployment-name=$CLUSTER-md-0"

wl() { kubectl --kubeconfig "$WORK/workload.kubeconfig" --request-timeout=60s "$@"; }
node_ready() { [ "$(wl get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ]; }
node_provider_id_is_ours() { wl get node "$1" -o jsonpath='{.spec.providerID}' | grep -q "^kk:///$CLUSTER/$1\$"; }
node_untainted() { ! wl get node "$1" -o jsonpath='{.spec.taints[*].key}' | grep -q node.cluster.x-k8s.io/uninitialized; }

control_plane() {
  stage "control plane: host phases + kubeadm init + Machine Running"
  local cp
  cp=$(vm_name 1)
  wait_for "control-plane Machine Running with a nodeRef" "$CP_TIMEOUT" machines_running "$CP_SEL" 1
  phase_times
  workload_kubeconfig
  stage "control plane Node Ready"
  wait_for "$cp Ready" 900 node_ready "$cp"
  wait_for "$cp carries providerID kk:///$CLUSTER/$cp" 300 node_provider_id_is_ours "$cp"
  wait_for "$cp lost node.cluster.x-k8s.io/uninitialized" 300 node_untainted "$cp"
  wl get nodes -o wide | tee "$WORK/nodes.txt" | sed 's/^/    /'
}

phase_times() { # the host phases as the manager logged them (timestamps of phase completion)
  grep -E 'phase|step' "$WORK/manager.log" 2>/dev/null | grep -iE 'finished|done|completed' | tail -n 20 | sed 's/^/    /' || true
}

host_reset() { # host_reset I: the VM no longer carries a node
  local out
  out=$(vmsh "$1" 'ls -d /etc/kubernetes/admin.conf /etc/kubernetes/kubelet.conf /etc/kubernetes/pki /var/lib/etcd/member /var/lib/kubelet/config.yaml /run/cluster-api/bootstrap-success.complete 2>/dev/null
    systemctl is-active -q kubelet && echo kubelet-active
    for p in /proc/[0-9]*; do case $(cat $p/comm 2>/dev/null) in etcd|kube-apiserver|kube-controller|kube-scheduler|kubelet) echo "running $(cat $p/comm)";; esac; done
    ip -o link show | grep -E "cni0|flannel|kube-ipvs0" | cut -d: -f2
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
  for i in $(seq "$VMS"); do check "$(vm_name "$i") was reset for real" host_reset "$i"; done
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
  stop_manager
  serve_down
  if [ -n "${KUBECONFIG:-}" ] && kubectl get ns "$NS" >/dev/null 2>&1; then
    strip_finalizers
  fi
  # shellcheck disable=SC2015 # `|| true` is meant for both: no vm binary, or nothing to take down
  [ -x "${VMCTL:-}" ] && "$VMCTL" down --name "$NAME" >/dev/null 2>&1 || true
}

main() {
  case $MODE in
    smoke)
      VMS=1
      # shellcheck disable=SC2154 # rc is assigned in the trap's own first command
      trap 'rc=$?; end_stage failed; timing_table; echo; echo "real $MODE: $PASSED passed, $FAILED failed"; teardown; exit $rc' EXIT
      build
      mgmt_up
      release
      vms_up
      serve_up
      render_apply
      control_plane
      delete_cluster
      end_stage
      [ "$FAILED" = 0 ]
      ;;
    down)
      mgmt_env
      teardown
      ;;
  esac
}

# Everything runs from main, parsed in full before it starts: editing this file during a run is harmless.
main "$@"; exit $?
