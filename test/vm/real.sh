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
WORKER_TIMEOUT=${REAL_WORKER_TIMEOUT:-1500}

T_START=$(date +%s)
declare -a STAGES=() STAGE_SECS=() STAGE_RESULT=()
PASSED=0
FAILED=0
CUR_STAGE=""
CUR_T0=0

log() { printf '[%s %s] %s\n' "$NAME" "$(date +%H:%M:%S)" "$*"; }
die() { log "FATAL: $*"; exit 1; }

STAGE_FAILED0=0
stage() {
  end_stage
  CUR_STAGE=$1
  CUR_T0=$(date +%s)
  STAGE_FAILED0=$FAILED
  log "== $1 (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
}
end_stage() {
  [ -n "$CUR_STAGE" ] || return 0
  STAGES+=("$CUR_STAGE")
  STAGE_SECS+=("$(($(date +%s) - CUR_T0))")
  local result=${1:-ok}
  [ "$FAILED" = "$STAGE_FAILED0" ] || result="FAILED ($((FAILED - STAGE_FAILED0)))"
  STAGE_RESULT+=("$result")
  CUR_STAGE=""
}

check() {
  local desc=$1
  shift
  if "$@"; then
    PASSED=$((PASSED + 1))
    log "  ok   $desc"
  else
    FAILED=$((FAILED + 1))
    log "  FAIL $desc"
    return 1
  fi
}

wait_for() { # wait_for DESCRIPTION TIMEOUT_SECONDS COMMAND...
  local desc=$1 timeout=$2
  shift 2
  local t0 deadline next
  t0=$(date +%s)
  deadline=$((t0 + timeout))
  next=$((t0 + 60))
  while ! "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      FAILED=$((FAILED + 1))
      log "  FAIL $desc (not within ${timeout}s)"
      diagnostics
      return 1
    fi
    if [ "$(date +%s)" -ge "$next" ]; then
      progress
      next=$(($(date +%s) + 60))
    fi
    sleep 5
  done
  PASSED=$((PASSED + 1))
  log "  ok   $desc ($(($(date +%s) - t0))s)"
}

progress() {
  log "   .. $(kubectl get kkmachines -n "$NS" --no-headers \
    -o custom-columns=M:.metadata.name,PHASE:.status.phase,STEP:.status.step 2>/dev/null | tr -s ' ' | tr '\n' ';') \
load $(cut -d' ' -f1-3 /proc/loadavg)"
}

diagnostics() {
  log "-- diagnostics"
  clusterctl describe cluster "$CLUSTER" -n "$NS" --show-conditions all 2>&1 | sed 's/^/    /' || true
  kubectl get kkinstances,kkmachines -n "$NS" -o wide 2>&1 | sed 's/^/    /' || true
  log "-- last manager log lines ($WORK/manager.log)"
  tail -n 30 "$WORK/manager.log" 2>/dev/null | sed 's/^/    /' || true
  local i
  for i in $(seq "${VMS:-0}"); do
    log "-- VM $i: kubelet and containers"
    vmsh "$i" 'systemctl is-active containerd kubelet; journalctl -u kubelet --no-pager -n 15; crictl ps -a 2>/dev/null | head -20' 2>&1 |
      sed 's/^/    /' || true
  done
}

timing_table() {
  end_stage
  local total=$(($(date +%s) - T_START)) i
  printf '\n%-58s %8s  %s\n' "stage" "seconds" "result"
  printf '%-58s %8s  %s\n' "----------------------------------------------------------" "--------" "------"
  for i in "${!STAGES[@]}"; do
    printf '%-58s %8s  %s\n' "${STAGES[$i]}" "${STAGE_SECS[$i]}" "${STAGE_RESULT[$i]}"
  done
  printf '%-58s %8s\n' "total" "$total"
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
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
  "$ROOT/test/release/release-manifests.sh" "$WORK/repo" "$VERSION" "ghcr.io/capkk-rs/capkk-manager:$VERSION" >/dev/null
  CCONF=$WORK/repo/clusterctl.yaml
  clusterctl generate provider --infrastructure "kubekey:$VERSION" --config "$CCONF" >"$WORK/components.yaml"
  python3 - "$WORK/components.yaml" "$WORK/components-no-deployment.yaml" <<'PY'
import sys
docs = open(sys.argv[1]).read().split("\n---\n")
keep = [d for d in docs if "\nkind: Deployment\n" not in "\n" + d + "\n"]
open(sys.argv[2], "w").write("\n---\n".join(keep) + "\n")
PY
  kubectl apply --server-side --force-conflicts -f "$WORK/components-no-deployment.yaml" >/dev/null
  kubectl wait --for condition=established --timeout=60s crd/kkclusters.infrastructure.cluster.x-k8s.io \
    crd/kkmachines.infrastructure.cluster.x-k8s.io crd/kkinstances.infrastructure.cluster.x-k8s.io >/dev/null
  if [ "$(kubectl get ns "$NS" -o jsonpath='{.status.phase}' 2>/dev/null)" = Terminating ]; then
    strip_finalizers
    wait_for "namespace $NS of an earlier run finished terminating" 600 \
      bash -c "[ \"\$(kubectl get ns '$NS' -o jsonpath='{.status.phase}' 2>/dev/null)\" != Terminating ]"
  fi
  kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # The manager runs as a local process with its ServiceAccount's token (config/rbac's permissions only).
  local sa_ns=capkk-system sa=capkk-controller-manager server ca token
  server=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  token=$(kubectl -n "$sa_ns" create token "$sa" --duration=24h)
  umask 077
  cat >"$WORK/manager.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: mgmt, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: $sa, user: {token: "$token"}}]
contexts: [{name: manager, context: {cluster: mgmt, user: $sa, namespace: $sa_ns}}]
current-context: manager
EOF
  umask 022
  stop_manager
  local port=$((20000 + RANDOM % 20000))
  KUBECONFIG=$WORK/manager.kubeconfig POD_NAME=$NAME-manager POD_NAMESPACE=$sa_ns RUST_LOG=${RUST_LOG:-info} \
    setsid "$MANAGER" --namespace "$NS" --leader-elect --leader-election-namespace "$sa_ns" \
    --leader-election-id "capkk-$NAME" --health-probe-bind-address "127.0.0.1:$port" \
    --metrics-bind-address "127.0.0.1:$((port + 1))" --log-format text \
    </dev/null >>"$WORK/manager.log" 2>&1 &
  echo $! >"$WORK/manager.pid"
  wait_for "manager is ready (127.0.0.1:$port/readyz)" 120 http_ok "http://127.0.0.1:$port/readyz"
}

stop_manager() {
  local pid
  pid=$(cat "$WORK/manager.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = manager ]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
  fi
  rm -f "$WORK/manager.pid"
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

machines_running() {
  local sel=$1 want=$2 out
  out=$(kubectl get machines -n "$NS" -l "$sel" -o jsonpath='{range .items[*]}{.status.phase}/{.status.nodeRef.name}{"\n"}{end}')
  [ "$(grep -c . <<<"$out")" = "$want" ] && ! grep -qv '^Running/.\+' <<<"$out"
}
CP_SEL="cluster.x-k8s.io/control-plane"
MD_SEL="cluster.x-k8s.io/deployment-name=$CLUSTER-md-0"

workload_kubeconfig() {
  kubectl get secret -n "$NS" "$CLUSTER-kubeconfig" -o jsonpath='{.data.value}' | base64 -d >"$WORK/workload.kubeconfig"
}
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
  local o i
  for i in $(seq 12); do
    for o in $(kubectl get -n "$NS" clusters,machines,machinesets,machinedeployments,kubeadmcontrolplanes,kubeadmconfigs,kkclusters,kkmachines,kkinstances -o name 2>/dev/null); do
      kubectl patch -n "$NS" "$o" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
    done
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
  [ -x "${VMCTL:-}" ] && "$VMCTL" down --name "$NAME" >/dev/null 2>&1 || true
}

main() {
  case $MODE in
    smoke)
      VMS=1
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
