#!/usr/bin/env bash
# The whole cluster lifecycle on real Cluster API controllers, against sandbox SSH hosts.
#
#   test/e2e/e2e.sh run          e2e: assert and time every stage, tear everything down (make e2e)
#   test/e2e/e2e.sh quickstart   the same flow for a person: stops once the cluster is Running and leaves it up
#                                (make quickstart-sim; `make quickstart` is the real-node one, test/vm/real.sh)
#   test/e2e/e2e.sh down         tear down what quickstart (or a crashed run) left (make quickstart-sim-down)
#   test/e2e/e2e.sh hosts        the setup stages only, left running: the plane, the manager watching every
#                                namespace, 4 free sandbox hosts and the mirror; $WORK/hosts.env describes them for
#                                CAPI's test framework (make capi-e2e-hosts, test/capi-e2e); `down` removes them
#   test/e2e/e2e.sh chaos        the setup stages and the cluster rendered (1 control plane, 2 workers) into
#                                $WORK/cluster.yaml, not applied, left running for the fault campaign on sandbox
#                                hosts (make chaos-smoke CHAOS_HOSTS=sandbox, test/chaos); `down` removes them
#
# Pieces: the local management plane (test/mgmt: etcd, kube-apiserver, CAPI core/CABPK/KCP), 4 sandbox hosts
# (test/sandbox), the provider's CRDs + RBAC from `clusterctl generate provider` of our local repository
# (make release-manifests), the manager as a local process authenticated as its ServiceAccount (so it has
# exactly config/rbac's permissions), a test mirror on the sandbox bridge serving stand-in release artifacts
# (kubeadm = test/kubeadm-sim), and the cluster rendered by the real `clusterctl generate cluster`.
# Why not `clusterctl init`: see docs/clusterctl.md.
#
# shellcheck disable=SC2016,SC2317 # single-quoted scripts are for the hosts' shells; most functions run only
# through check, wait_for and the traps, where shellcheck does not see them called.
set -euo pipefail

MODE=${1:-run}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
case $MODE in run) NAME=${E2E_NAME:-e2e} ;; hosts) NAME=${E2E_NAME:-capi-e2e} ;; chaos) NAME=${E2E_NAME:-chaos} ;;
  *) NAME=${E2E_NAME:-quickstart} ;; esac
CLUSTER=${E2E_CLUSTER:-$NAME}
NS=${E2E_NAMESPACE:-capkk-$NAME}
WORK=${E2E_WORK:-$ROOT/target/e2e/$NAME}
VERSION=${VERSION:-v0.1.0}
CAPKK_CACHE=${CAPKK_CACHE:-$HOME/.cache/capkk-rs}
export CAPKK_CACHE CLUSTERCTL_DISABLE_VERSIONCHECK=true
CARGO=${CARGO:-cargo}
HOSTS=4

# In `run`, a failed check is counted and the run goes on: one run reports every failed assertion. The quickstart
# stops at the first: it is to leave a working cluster, and its exit trap shows the diagnostics.
HARNESS_KEEP_GOING=$([ "$MODE" = run ] && echo 1 || echo 0)
# shellcheck source=SCRIPTDIR/../lib/harness.sh
source "$ROOT/test/lib/harness.sh"
# shellcheck source=SCRIPTDIR/../lib/provider.sh
source "$ROOT/test/lib/provider.sh"
# shellcheck source=SCRIPTDIR/../lib/heartbeat.sh
source "$ROOT/test/lib/heartbeat.sh"

progress() {
  if [ "$MODE" = quickstart ]; then
    clusterctl describe cluster "$CLUSTER" -n "$NS" --grouping=false 2>/dev/null | sed 's/^/    /' || true
  else
    kubectl get machines -n "$NS" --no-headers \
      -o custom-columns=MACHINE:.metadata.name,PHASE:.status.phase,NODE:.status.nodeRef.name 2>/dev/null |
      sed 's/^/    /' || true
  fi
}

diagnostics() {
  provider_diagnostics 40
}

# ---------------------------------------------------------------------------------------------------------
# environment

mgmt_env() {
  # shellcheck source=../mgmt/scripts/common.sh
  BIN_DIR=$(bash -c 'source "$1/test/mgmt/scripts/common.sh" && echo "$BIN_DIR"' _ "$ROOT")
  KUBE_VERSION=$(bash -c 'source "$1/test/mgmt/scripts/common.sh" && echo "$KUBE_VERSION"' _ "$ROOT")
  export PATH=$BIN_DIR:$PATH
  export KUBECONFIG=${CAPKK_MGMT_DIR:-$CAPKK_CACHE/mgmt}/kubeconfig
  SANDBOX=${CARGO_TARGET_DIR:-$ROOT/target}/debug/sandbox
  MANAGER=${CARGO_TARGET_DIR:-$ROOT/target}/debug/manager
  MIRROR_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/capkk-mirror
}

sb() { "$SANDBOX" "$@"; }
http_ok() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5).read(1)' "$1"; }
inside() { sb exec --name "$NAME" --host "$1" -- "$2"; }
host_name() { echo "$NAME-$1"; }
host_addr() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['hosts'][int(sys.argv[2])-1]['address'])" "$SB_DIR/state.json" "$1"; }

build() {
  stage "build (cargo, go, mgmt binaries)"
  mkdir -p "$WORK"
  # `make build` is the test build (one feature set for everything): building single packages would
  # compile their dependencies a second time with other features.
  make -s -C "$ROOT" build CARGO="$CARGO"
  make -s -C "$ROOT" mgmt-bin
  mgmt_env
  "$ROOT/test/kubeadm-sim/build.sh" "$WORK/bin/kubeadm" "$BIN_DIR"
}

mgmt_up() {
  stage "management plane up"
  make -s -C "$ROOT" mgmt-up
  check "management plane answers" kubectl get --raw=/readyz
}

# ---------------------------------------------------------------------------------------------------------
# provider: local clusterctl repository, CRDs + RBAC from `clusterctl generate provider`, manager process

release() {
  stage "release-manifests + clusterctl"
  provider_release
  check "clusterctl generate provider renders the components" \
    grep -q "image: ghcr.io/capkk-rs/capkk-manager:$VERSION" "$WORK/components.yaml"
  clusterctl generate cluster "$CLUSTER" -n "$NS" --infrastructure "kubekey:$VERSION" --config "$CCONF" \
    --list-variables >"$WORK/variables.txt"
  local v missing=""
  for v in KUBERNETES_VERSION KUBEKEY_INSTANCES CONTROL_PLANE_MACHINE_COUNT WORKER_MACHINE_COUNT \
    KUBEKEY_SSH_USER KUBEKEY_SSH_SECRET KUBEKEY_COMPONENT POD_CIDR SERVICE_CIDR; do
    grep -q -- "- $v\b" "$WORK/variables.txt" || missing+=" $v"
  done
  check "generate cluster --list-variables lists the documented variables${missing:+ (missing:$missing)}" \
    test -z "$missing"
  clusterctl generate cluster "$CLUSTER" -n "$NS" --infrastructure "kubekey:$VERSION" --config "$CCONF" \
    --flavor kube-vip --list-variables >"$WORK/variables-kube-vip.txt"
  check "the kube-vip flavor asks for KUBEKEY_CONTROL_PLANE_VIP" grep -q -- "- KUBEKEY_CONTROL_PLANE_VIP" \
    "$WORK/variables-kube-vip.txt"
  clusterctl generate cluster "$CLUSTER" -n "$NS" --infrastructure "kubekey:$VERSION" --config "$CCONF" \
    --flavor ha --list-variables >"$WORK/variables-ha.txt"
  check "the ha flavor asks for CONTROL_PLANE_VIP" grep -q -- "- CONTROL_PLANE_VIP$" "$WORK/variables-ha.txt"
  clusterctl generate cluster "$CLUSTER" -n "$NS" --infrastructure "kubekey:$VERSION" --config "$CCONF" \
    --flavor capkk --list-variables >"$WORK/variables-capkk.txt"
  local got want="CONTROL_PLANE_ENDPOINT_IP INSTANCES KKZONE PASSWORD USER_NAME VIP_NETWORK_INTERFACE"
  got=$(grep -oE '^ *- [A-Z_0-9]+' "$WORK/variables-capkk.txt" | awk '{print $2}' |
    grep -vxE 'CLUSTER_NAME|NAMESPACE|KUBERNETES_VERSION|CONTROL_PLANE_MACHINE_COUNT|WORKER_MACHINE_COUNT' | sort | xargs)
  check "the capkk flavor takes exactly CAPKK's variables ($got)" test "$got" = "$want"
}

install_provider() {
  stage "provider CRDs + RBAC, manager process"
  # shellcheck disable=SC2119 # nothing to run first on a Terminating namespace: teardown already dropped the finalizers
  provider_install
  check "the ServiceAccount may list KKMachines cluster-wide (config/rbac)" \
    kubectl auth can-i list kkmachines.infrastructure.cluster.x-k8s.io --all-namespaces \
    --as "system:serviceaccount:$MANAGER_SA_NS:$MANAGER_SA"
  # The default of --max-concurrent-hosts, pinned: a CAPKK_MAX_CONCURRENT_HOSTS in the caller's environment
  # would change how many of the hosts provision at once.
  start_manager 60 --max-concurrent-hosts 10
}

# ---------------------------------------------------------------------------------------------------------
# hosts and the test mirror

hosts_up() {
  stage "sandbox hosts + test mirror"
  sb up --name "$NAME" --hosts "$HOSTS" >/dev/null
  SB_DIR=/tmp/capkk-sandbox/$NAME
  [ -f "$SB_DIR/state.json" ] || die "sandbox state missing in $SB_DIR"
  local i h script f
  # Host image preparation (out of band): the stand-in kernel tools and package managers of test/assets, so
  # provisioning never touches the machine's kernel or reaches a real package repository.
  script="mkdir -p /usr/local/sbin; mountpoint -q /sys/module || mount -t tmpfs capkk-fake-sysmodule /sys/module"
  for f in "$ROOT"/test/assets/fake-kernel/* "$ROOT"/test/assets/fake-pm/*; do
    script+="; printf '%s' '$(base64 -w0 "$f")' | base64 -d > /usr/local/sbin/$(basename "$f"); chmod 755 /usr/local/sbin/$(basename "$f")"
  done
  for i in $(seq "$HOSTS"); do inside "$(host_name "$i")" "$script" >/dev/null; done
  check "$HOSTS sandbox hosts up (sandbox state)" test "$(python3 -c "import json; print(len(json.load(open('$SB_DIR/state.json'))['hosts']))")" = "$HOSTS"
  make_mirror
  start_mirror
}

# The component defaults of KUBE_VERSION (the one table, pkg/service/src/components.rs): the clusters here name
# no containerd, runc or crictl version, so the stand-ins are published at the versions the hosts resolve.
component_defaults() {
  local d
  d=$("$ROOT/test/vm/artifacts/defaults.sh" "$KUBE_VERSION") || die "no component defaults for $KUBE_VERSION"
  eval "$d"
}

make_mirror() {
  local m=$WORK/mirror arch=amd64 kv=$KUBE_VERSION t
  component_defaults
  local crictl=$DEFAULT_CRICTL containerd=$DEFAULT_CONTAINERD runc=$DEFAULT_RUNC
  rm -rf "$m"
  local k8s=$m/kubernetes-release/release/$kv/bin/linux/$arch
  mkdir -p "$k8s"
  cp "$WORK/bin/kubeadm" "$k8s/kubeadm"
  cp "$BIN_DIR/kubectl" "$k8s/kubectl"
  standin() { printf '#!/bin/sh\n# capkk e2e stand-in: %s\n%s\n' "$1" "$2"; }
  standin kubelet "case \"\$1\" in --version) echo 'Kubernetes $kv';; esac; exit 0" >"$k8s/kubelet"
  t=$(mktemp -d)
  for b in loopback bridge host-local portmap; do standin "cni $b" 'exit 0' >"$t/$b"; done
  chmod 755 "$t"/*
  mkdir -p "$m/containernetworking/plugins/releases/download/v1.3.0"
  tar -C "$t" -czf "$m/containernetworking/plugins/releases/download/v1.3.0/cni-plugins-linux-$arch-v1.3.0.tgz" .
  rm -rf "$t" && t=$(mktemp -d)
  standin crictl "echo \"crictl version $crictl\"" >"$t/crictl" && chmod 755 "$t/crictl"
  mkdir -p "$m/cri-tools/releases/download/$crictl"
  tar -C "$t" -czf "$m/cri-tools/releases/download/$crictl/crictl-$crictl-linux-$arch.tar.gz" crictl
  rm -rf "$t" && t=$(mktemp -d) && mkdir "$t/bin"
  standin containerd "if [ \"\$1\" = --version ]; then echo \"containerd github.com/containerd/containerd v$containerd standin\"; exit 0; fi
mkdir -p /run/containerd; exec sleep 2147483647" >"$t/bin/containerd"
  standin ctr 'exit 0' >"$t/bin/ctr"
  standin containerd-shim-runc-v2 'exit 0' >"$t/bin/containerd-shim-runc-v2"
  chmod 755 "$t"/bin/*
  mkdir -p "$m/containerd/containerd/releases/download/v$containerd"
  tar -C "$t" -czf "$m/containerd/containerd/releases/download/v$containerd/containerd-$containerd-linux-$arch.tar.gz" bin
  rm -rf "$t"
  mkdir -p "$m/opencontainers/runc/releases/download/$runc"
  standin runc "echo \"runc version ${runc#v}\"" >"$m/opencontainers/runc/releases/download/$runc/runc.$arch"
  chmod 755 "$k8s"/* "$m/opencontainers/runc/releases/download/$runc/runc.$arch"
  publish_checksums "$m"
}

# Upstream's checksum files next to every artifact, with upstream's names and formats (what a release mirror
# serves and what the binary service fetches for versions it has no pin for; docs/host-paths.md):
# dl.k8s.io `<binary>.sha256` (digest alone), CNI `.tgz.sha256` and containerd `.tar.gz.sha256sum`
# (`digest  file`), crictl `.tar.gz.sha256` (digest alone), runc `runc.sha256sum` (one line per arch).
publish_checksums() {
  local m=$1 f d
  while IFS= read -r f; do
    case $f in
      */kubernetes-release/release/*/bin/linux/*) sha "$f" >"$f.sha256" ;;
      */cni-plugins-linux-*.tgz) (cd "$(dirname "$f")" && sha256sum "$(basename "$f")" >"$(basename "$f").sha256") ;;
      */crictl-*.tar.gz) sha "$f" >"$f.sha256" ;;
      */containerd-*.tar.gz) (cd "$(dirname "$f")" && sha256sum "$(basename "$f")" >"$(basename "$f").sha256sum") ;;
    esac
  done < <(find "$m" -type f ! -name '*.sha256' ! -name '*.sha256sum')
  for d in "$m"/opencontainers/runc/releases/download/*/; do
    (cd "$d" && sha256sum runc.* | grep -v sha256sum >runc.sha256sum)
  done
}

sha() { sha256sum "$1" | cut -d' ' -f1; }

start_mirror() {
  stop_mirror
  local bridge
  bridge=$(ip -4 -o addr show "kkbr$(python3 -c "import json; print(json.load(open('$SB_DIR/state.json'))['index'])")" |
    awk '{print $4}' | cut -d/ -f1)
  [ -n "$bridge" ] || die "no sandbox bridge address"
  rm -f "$WORK/mirror.addr"
  setsid "$MIRROR_BIN" --listen "$bridge:0" --dir "$WORK/mirror" --addr-file "$WORK/mirror.addr" \
    </dev/null >>"$WORK/mirror.log" 2>&1 &
  echo $! >"$WORK/mirror.pid"
  for _ in $(seq 50); do [ -s "$WORK/mirror.addr" ] && break; sleep 0.1; done
  MIRROR=http://$(cat "$WORK/mirror.addr")
  local m=$WORK/mirror kv=$KUBE_VERSION arch=amd64
  local k8s=$m/kubernetes-release/release/$kv/bin/linux/$arch
  component_defaults
  local crictl=$DEFAULT_CRICTL containerd=$DEFAULT_CONTAINERD runc=$DEFAULT_RUNC
  COMPONENT="{host: \"$MIRROR\", overrides: [
 {id: kubeadm, checksum: {value: $(sha "$k8s/kubeadm")}},
 {id: kubelet, checksum: {value: $(sha "$k8s/kubelet")}},
 {id: kubectl, checksum: {value: $(sha "$k8s/kubectl")}},
 {id: cni, checksum: {value: $(sha "$m/containernetworking/plugins/releases/download/v1.3.0/cni-plugins-linux-$arch-v1.3.0.tgz")}},
 {id: crictl, checksum: {value: $(sha "$m/cri-tools/releases/download/$crictl/crictl-$crictl-linux-$arch.tar.gz")}},
 {id: containerd, checksum: {value: $(sha "$m/containerd/containerd/releases/download/v$containerd/containerd-$containerd-linux-$arch.tar.gz")}},
 {id: runc, checksum: {value: $(sha "$m/opencontainers/runc/releases/download/$runc/runc.$arch")}}]}"
  COMPONENT=$(echo "$COMPONENT" | tr -d '\n')
  check "test mirror serves the simulator as kubeadm ($MIRROR)" \
    http_ok "$MIRROR/kubernetes-release/release/$kv/bin/linux/$arch/kubeadm"
}

stop_mirror() {
  local pid
  pid=$(cat "$WORK/mirror.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = capkk-mirror ]; then kill "$pid" 2>/dev/null || true; fi
  rm -f "$WORK/mirror.pid"
}

# ---------------------------------------------------------------------------------------------------------
# the cluster

# INSTANCES (the hosts, host 1 control-plane, keys pinned) and the SSH Secret "$CLUSTER-ssh" the clusters use.
inventory() {
  local i instances="" fp role
  for i in $(seq "$HOSTS"); do
    fp=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['hosts'][int(sys.argv[2])-1]['host_key_fingerprint'])" "$SB_DIR/state.json" "$i")
    role=worker
    [ "$i" = 1 ] && role=control-plane
    instances+="${instances:+, }{name: $(host_name "$i"), address: $(host_addr "$i"), roles: [$role], hostKeys: [\"$fp\"]}"
  done
  INSTANCES="[$instances]"
  kubectl -n "$NS" create secret generic "$CLUSTER-ssh" \
    --from-file=privateKey="$(python3 -c "import json; print(json.load(open('$SB_DIR/state.json'))['credentials']['ed25519_key'])")" \
    --dry-run=client -o yaml | kubectl label --local -f - clusterctl.cluster.x-k8s.io/move= -o yaml |
    kubectl apply -f - >/dev/null # the move label: `clusterctl move` takes the Secret along (docs/clusterctl.md)
}

# The cluster of every mode (1 control plane, 2 workers) into $WORK/cluster.yaml, from the hosts' inventory.
render_cluster() {
  inventory
  KUBEKEY_INSTANCES="$INSTANCES" KUBEKEY_COMPONENT="$COMPONENT" KUBEKEY_SSH_SECRET="$CLUSTER-ssh" \
    clusterctl generate cluster "$CLUSTER" -n "$NS" --infrastructure "kubekey:$VERSION" --config "$CCONF" \
    --kubernetes-version "$KUBE_VERSION" --control-plane-machine-count 1 --worker-machine-count 2 \
    >"$WORK/cluster.yaml"
}

render_apply() {
  stage "render (clusterctl generate cluster) + apply"
  render_cluster
  check "clusterctl generate cluster renders a cluster the apiserver accepts (server dry-run)" \
    kubectl apply --dry-run=server -f "$WORK/cluster.yaml"
  local flavor
  for flavor in kube-vip ha topology; do
    KUBEKEY_INSTANCES="$INSTANCES" KUBEKEY_CONTROL_PLANE_VIP=198.18.0.100 CONTROL_PLANE_VIP=198.18.0.100 \
      clusterctl generate cluster "$CLUSTER-$flavor" -n "$NS" --infrastructure "kubekey:$VERSION" --config "$CCONF" \
      --kubernetes-version "$KUBE_VERSION" --flavor "$flavor" >"$WORK/cluster-$flavor.yaml"
    check "the $flavor flavor renders and passes a server dry-run" \
      kubectl apply --dry-run=server -f "$WORK/cluster-$flavor.yaml"
  done
  # The topology Cluster again, validated against its ClusterClass (variables and patches): create the class
  # and its templates for real, wait until CAPI has reconciled the class, dry-run the Cluster, remove the class.
  python3 - "$WORK/cluster-topology.yaml" "$WORK/clusterclass.yaml" <<'PY'
import sys
docs = open(sys.argv[1]).read().split("\n---\n")
keep = [d for d in docs if "\nkind: Cluster\n" not in "\n" + d + "\n"]
open(sys.argv[2], "w").write("\n---\n".join(keep) + "\n")
PY
  kubectl apply -f "$WORK/clusterclass.yaml" >/dev/null
  wait_for "CAPI reconciled the ClusterClass kubekey (VariablesReady)" 60 \
    kubectl wait -n "$NS" clusterclass/kubekey --for=condition=VariablesReady --timeout=5s
  check "the topology Cluster passes validation against the ClusterClass (variables, patches)" \
    kubectl apply --dry-run=server -f "$WORK/cluster-topology.yaml"
  kubectl delete -f "$WORK/clusterclass.yaml" --ignore-not-found --wait=false >/dev/null
  kubectl apply -f "$WORK/cluster.yaml"
}

# The cluster of the fault campaign (test/chaos): rendered like render_apply's, not applied (the campaign's
# create step applies it, again in every cycle).
render_chaos() {
  stage "render the campaign's cluster (clusterctl generate cluster)"
  render_cluster
  check "the campaign's cluster passes a server dry-run" kubectl apply --dry-run=server -f "$WORK/cluster.yaml"
}

machine_count() { [ "$(kubectl get machines -n "$NS" -l "$1" -o name | grep -c .)" = "$2" ]; }

MD_SEL() { echo "cluster.x-k8s.io/deployment-name=$CLUSTER-md-0"; }

wl() { kubectl --kubeconfig "$WORK/workload.kubeconfig" "$@"; }

control_plane() {
  stage "control plane Machine Running"
  wait_for "control-plane Machine Running with a nodeRef" 600 machines_running "$CP_SEL" 1
  wait_for "Cluster ControlPlaneInitialized" 120 kubectl wait -n "$NS" cluster/"$CLUSTER" \
    --for=condition=ControlPlaneInitialized --timeout=5s
}

workers() {
  stage "2 workers join"
  wait_for "2 worker Machines Running with a nodeRef" 600 machines_running "$(MD_SEL)" 2
  workload_kubeconfig
  check "3 workload Nodes" test "$(wl get nodes -o name | grep -c .)" = 3
  wait_for "every workload Node carries its providerID" 120 nodes_have_provider_ids
  wait_for "workers lost node.cluster.x-k8s.io/uninitialized" 120 no_uninitialized_taint
  clusterctl describe cluster "$CLUSTER" -n "$NS" --show-conditions all --echo >"$WORK/describe.txt" 2>&1 || true
  sed 's/^/    /' "$WORK/describe.txt"
  check "clusterctl describe cluster shows the KKCluster's conditions (HostsReachable, EndpointReady)" \
    bash -c 'grep -q "KKCluster" "$1" && grep -q "HostsReachable .*True" "$1" && grep -q "EndpointReady .*True" "$1"' _ "$WORK/describe.txt"
  check "clusterctl describe cluster shows the KKMachines' conditions (HostClaimed, InstanceReady)" \
    bash -c 'grep -q "KKMachine" "$1" && grep -q "HostClaimed .*True" "$1" && grep -q "InstanceReady .*True" "$1"' _ "$WORK/describe.txt"
}

nodes_have_provider_ids() {
  local out
  out=$(wl get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.spec.providerID}{"\n"}{end}')
  [ -n "$out" ] && ! grep -qv '=kk://' <<<"$out"
}
no_uninitialized_taint() {
  ! wl get nodes -o jsonpath='{range .items[*]}{.spec.taints[*].key}{"\n"}{end}' | grep -q node.cluster.x-k8s.io/uninitialized
}

gitops() {
  stage "GitOps: diff + re-apply"
  local out rc=0
  out=$(kubectl diff -f "$WORK/cluster.yaml" 2>&1) || rc=$?
  [ "$rc" = 0 ] || printf '%s\n' "$out" | head -60 | sed 's/^/    /'
  check "kubectl diff of the rendered cluster shows no difference (exit $rc)" test "$rc" = 0
  local gen='{range .items[*]}{.kind}/{.metadata.name} generation={.metadata.generation}{"\n"}{end}' before after
  before=$(kubectl get -f "$WORK/cluster.yaml" -o jsonpath="$gen")
  kubectl apply -f "$WORK/cluster.yaml" | sed 's/^/    /'
  after=$(kubectl get -f "$WORK/cluster.yaml" -o jsonpath="$gen")
  [ "$before" = "$after" ] || diff <(echo "$before") <(echo "$after") | sed 's/^/    /'
  check "re-applying it changes no spec (every object keeps its generation)" test "$before" = "$after"
}

# KKInstances are named `<kkcluster>.<host>` (two KKClusters may list the same host name), so a host is
# found by spec.name, never by the object's name.
claimed_hosts() {
  kubectl get kkinstances -n "$NS" -o jsonpath='{range .items[*]}{.spec.name}{"\n"}{end}'
}
host_claimed() { claimed_hosts | grep -qxF "$1"; }
host_free() {
  local out
  out=$(claimed_hosts) || return 1
  ! grep -qxF "$1" <<<"$out"
}
host_clean() { # no sentinel, no kubeadm state, no control-plane process
  local out
  # A host that cannot be reached is not known to be clean: the exec failing fails the check.
  out=$(inside "$1" 'ls -d /run/cluster-api/bootstrap-success.complete /etc/kubernetes/admin.conf /etc/kubernetes/kubelet.conf /etc/kubernetes/bootstrap-kubelet.conf /etc/kubernetes/pki/ca.crt /var/lib/etcd 2>/dev/null; for p in /proc/[0-9]*; do case $(cat $p/comm 2>/dev/null) in etcd|kube-apiserver) grep -q "^State:.*zombie" $p/status 2>/dev/null || echo "running $(cat $p/comm)";; esac; done; echo inside-ok') ||
    { log "    $1: cannot run a command inside the host"; return 1; }
  out=$(grep -vx 'inside-ok' <<<"$out" || true)
  [ -z "$out" ] || { log "    $1 not clean: $(tr '\n' ' ' <<<"$out")"; return 1; }
}
# The host names (not the claim names) behind the worker KKMachines' spec.instanceID `<kkcluster>.<host>`.
worker_hosts_of_machines() {
  kubectl get kkmachines -n "$NS" -o jsonpath='{range .items[*]}{.spec.instanceID}{"\n"}{end}' | grep . |
    sed 's/.*\.//' | sort
}

scale() {
  stage "scale MachineDeployment 2 -> 3"
  kubectl scale -n "$NS" machinedeployment "$CLUSTER-md-0" --replicas=3 >/dev/null
  wait_for "3 worker Machines Running with a nodeRef" 600 machines_running "$(MD_SEL)" 3
  check "the fourth host ($(host_name 4)) is claimed" host_claimed "$(host_name 4)"
  wait_for "4 workload Nodes" 120 bash -c "[ \"\$(kubectl --kubeconfig '$WORK/workload.kubeconfig' get nodes -o name | grep -c .)\" = 4 ]"

  stage "scale MachineDeployment 3 -> 1"
  local before after freed=() h
  before=$(worker_hosts_of_machines)
  kubectl scale -n "$NS" machinedeployment "$CLUSTER-md-0" --replicas=1 >/dev/null
  wait_for "1 worker Machine left" 600 machine_count "$(MD_SEL)" 1
  after=$(worker_hosts_of_machines)
  mapfile -t freed < <(comm -23 <(echo "$before") <(echo "$after"))
  check "two hosts were released (${freed[*]:-none})" test "${#freed[@]}" = 2
  for h in "${freed[@]}"; do
    wait_for "$h is free again (its KKInstance is gone)" 300 host_free "$h"
    check "$h was reset: sentinel and kubeadm state gone" host_clean "$h"
  done
  check "2 workload Nodes left" test "$(wl get nodes -o name | grep -c .)" = 2
}

delete_cluster() {
  stage "delete the Cluster"
  kubectl delete -n "$NS" cluster "$CLUSTER" --wait=false >/dev/null
  wait_for "the Cluster is gone" 600 bash -c "! kubectl get -n '$NS' cluster '$CLUSTER' >/dev/null 2>&1"
  local kinds=machines,machinesets,machinedeployments,kubeadmcontrolplanes,kubeadmconfigs,kkclusters,kkmachines,kkinstances
  wait_for "every Machine, KCP, KubeadmConfig, KKCluster, KKMachine, KKInstance is gone" 300 \
    bash -c "[ -z \"\$(kubectl get -n '$NS' $kinds -o name 2>/dev/null)\" ]"
  wait_for "every object of the rendered YAML is gone (templates garbage-collected)" 120 \
    bash -c "[ -z \"\$(kubectl get -f '$WORK/cluster.yaml' -o name 2>/dev/null)\" ]"
  wait_for "the cluster's Secrets (CA, kubeconfig, bootstrap data) are garbage-collected" 120 \
    bash -c "[ -z \"\$(kubectl get secrets -n '$NS' -l 'cluster.x-k8s.io/cluster-name=$CLUSTER' -o name 2>/dev/null)\" ]"
  local stuck
  stuck=$(kubectl get -n "$NS" "$kinds" -o jsonpath='{range .items[*]}{.kind}/{.metadata.name} {.metadata.finalizers}{"\n"}{end}' 2>/dev/null || true)
  check "no object stuck on a finalizer${stuck:+: $stuck}" test -z "$stuck"
  local i
  for i in $(seq "$HOSTS"); do check "$(host_name "$i") is clean" host_clean "$(host_name "$i")"; done
}

# A cluster from --flavor capkk, rendered from a CAPKK user's environment: hosts listed by address only (names
# derived from the addresses), inline password auth of a non-root user whose sudo asks for the password. The
# only addition to the rendered YAML is the site's download mirror (spec.component: this machine has no
# Internet; CAPKK's variables have none for it): kubeadm/kubelet/kubectl come with no checksum override, so their
# SHA-256 comes from the mirror's published `.sha256` files; the pinned ids (CNI, crictl, containerd, runc) are
# stand-ins and need their checksums as overrides. CONTROL_PLANE_ENDPOINT_IP is the control-plane host's own
# address: the sandbox runs no kube-vip (the static pod is written, not run), and with one control plane the
# endpoint is then that host.
capkk_flavor() {
  stage "capkk flavor: 1 CP + 1 worker from CAPKK's variables"
  local cc=$CLUSTER-capkk a1 a2 password
  a1=$(host_addr 1)
  a2=$(host_addr 2)
  password=$(python3 -c "import json; print(json.load(open('$SB_DIR/state.json'))['credentials']['password'])")
  INSTANCES="[{address: $a1}, {address: $a2}]" USER_NAME=kkuser PASSWORD="$password" KKZONE="" \
    CONTROL_PLANE_ENDPOINT_IP="$a1" \
    clusterctl generate cluster "$cc" -n "$NS" --infrastructure "kubekey:$VERSION" --config "$CCONF" \
    --flavor capkk --kubernetes-version "$KUBE_VERSION" --control-plane-machine-count 1 \
    --worker-machine-count 1 >"$WORK/cluster-capkk.yaml"
  local overrides
  overrides=$(python3 - "$COMPONENT" <<'PY'
import re, sys
# Keep only the overrides of the pinned ids: the Kubernetes binaries go through published checksums.
items = re.findall(r"\{id: (\w+), checksum: \{value: (\w+)\}\}", sys.argv[1])
print(", ".join(f"{{id: {i}, checksum: {{value: {v}}}}}" for i, v in items if i not in ("kubeadm", "kubelet", "kubectl")))
PY
)
  python3 - "$WORK/cluster-capkk.yaml" "$MIRROR" "$overrides" <<'PY'
import sys
path, mirror, overrides = sys.argv[1:4]
s = open(path).read()
# clusterctl re-serializes the YAML: find the KKCluster's spec.component by its indentation.
marker = "\n  component:\n"
assert s.count(marker) == 1, "expected one KKCluster spec.component"
s = s.replace(marker, marker + f"    host: {mirror}\n    overrides: [{overrides}]\n")
open(path, "w").write(s)
PY
  check "the capkk flavor renders and passes a server dry-run" kubectl apply --dry-run=server -f "$WORK/cluster-capkk.yaml"
  kubectl apply -f "$WORK/cluster-capkk.yaml" >/dev/null
  local n1 n2
  n1=$(echo "$a1" | tr -c 'a-z0-9\n' '-')
  n2=$(echo "$a2" | tr -c 'a-z0-9\n' '-')
  wait_for "capkk: control-plane Machine Running with a nodeRef" 600 \
    machines_running "cluster.x-k8s.io/cluster-name=$cc,cluster.x-k8s.io/control-plane" 1
  wait_for "capkk: worker Machine Running with a nodeRef" 600 \
    machines_running "cluster.x-k8s.io/cluster-name=$cc,!cluster.x-k8s.io/control-plane" 1
  local nodes
  nodes=$(kubectl get machines -n "$NS" -l "cluster.x-k8s.io/cluster-name=$cc" \
    -o jsonpath='{range .items[*]}{.status.nodeRef.name}{"\n"}{end}' | sort | xargs)
  check "capkk: Node names are the names derived from the addresses ($nodes)" \
    test "$nodes" = "$(printf '%s\n' "$n1" "$n2" | sort | xargs)"
  check "capkk: the KKCluster's hosts still have no name (spec not rewritten)" \
    test -z "$(kubectl get kkcluster -n "$NS" "$cc" -o jsonpath='{.spec.nodes.instances[*].name}')"
  local out rc=0
  out=$(kubectl diff -f "$WORK/cluster-capkk.yaml" 2>&1) || rc=$?
  [ "$rc" = 0 ] || printf '%s\n' "$out" | head -40 | sed 's/^/    /'
  check "capkk: kubectl diff of the rendered YAML is empty (exit $rc)" test "$rc" = 0
  check "capkk: kubeadm came with no checksum override (its published .sha256 was fetched)" \
    grep -q "kubernetes-release/release/$KUBE_VERSION/bin/linux/amd64/kubeadm.sha256" "$WORK/mirror.log"
  kubectl delete -n "$NS" cluster "$cc" --wait=false >/dev/null
  wait_for "capkk: the Cluster and its objects are gone" 600 bash -c \
    "[ -z \"\$(kubectl get -n '$NS' clusters,machines,kkclusters,kkmachines,kkinstances -o name 2>/dev/null)\" ]"
  local i
  for i in 1 2; do check "$(host_name "$i") is clean" host_clean "$(host_name "$i")"; done
}

topology() {
  stage "ClusterClass kubekey: 1 CP + 1 worker"
  local cc=$CLUSTER-cc
  [ -n "${INSTANCES:-}" ] || inventory # E2E_ONLY=topology: render_apply did not run
  KUBEKEY_INSTANCES="$INSTANCES" KUBEKEY_COMPONENT="$COMPONENT" KUBEKEY_SSH_SECRET="$CLUSTER-ssh" \
    clusterctl generate cluster "$cc" -n "$NS" --infrastructure "kubekey:$VERSION" --config "$CCONF" \
    --flavor topology --kubernetes-version "$KUBE_VERSION" --control-plane-machine-count 1 \
    --worker-machine-count 1 >"$WORK/cluster-cc.yaml"
  # The mirror goes into the class variable "component" (no clusterctl variable for it: see the template).
  python3 - "$WORK/cluster-cc.yaml" "$COMPONENT" <<'PY'
import sys
path, component = sys.argv[1], sys.argv[2]
s = open(path).read()
marker = "    variables:\n"
assert s.count(marker) == 1, "expected one spec.topology.variables"
s = s.replace(marker, marker + "    - name: component\n      value: " + component + "\n")
open(path, "w").write(s)
PY
  check "clusterctl adds the ClusterClass to the topology flavor's output" grep -q "^kind: ClusterClass" "$WORK/cluster-cc.yaml"
  kubectl apply -f "$WORK/cluster-cc.yaml" >/dev/null
  wait_for "the class's patches rendered the hosts into the KKCluster" 120 \
    bash -c "kubectl get kkcluster -n '$NS' -l 'cluster.x-k8s.io/cluster-name=$cc' -o jsonpath='{.items[0].spec.nodes.instances[*].name}' | grep -q '$(host_name 4)'"
  wait_for "topology: control-plane Machine Running with a nodeRef" 600 \
    machines_running "cluster.x-k8s.io/cluster-name=$cc,cluster.x-k8s.io/control-plane" 1
  wait_for "topology: worker Machine Running with a nodeRef" 600 \
    machines_running "cluster.x-k8s.io/cluster-name=$cc,!cluster.x-k8s.io/control-plane" 1
  rotate_worker_template "$cc"
  kubectl delete -n "$NS" cluster "$cc" --wait=false >/dev/null
  wait_for "topology: the Cluster and its objects are gone" 600 bash -c \
    "[ -z \"\$(kubectl get -n '$NS' clusters,machines,kkclusters,kkmachines,kkinstances -o name 2>/dev/null)\" ]"
  local i
  for i in $(seq "$HOSTS"); do check "$(host_name "$i") is clean" host_clean "$(host_name "$i")"; done
  python3 - "$WORK/cluster-cc.yaml" "$WORK/clusterclass-cc.yaml" <<'PY'
import sys
docs = open(sys.argv[1]).read().split("\n---\n")
keep = [d for d in docs if "\nkind: Cluster\n" not in "\n" + d + "\n"]
open(sys.argv[2], "w").write("\n---\n".join(keep) + "\n")
PY
  kubectl delete -f "$WORK/clusterclass-cc.yaml" --ignore-not-found --wait=false >/dev/null
  kubectl delete -n "$NS" kkmachinetemplate kubekey-default-worker-v2 --ignore-not-found --wait=false >/dev/null
}

# Template rotation of a ClusterClass-based Cluster: a new worker KKMachineTemplate (templates are immutable),
# the class pointed at it. CAPI's topology controller dry-runs the new spec against the Cluster's template
# (config/admission lets exactly that dry-run through), copies the new one and re-points the MachineDeployment,
# which rolls the worker out: a new Machine on a free host, the old one deleted and its host reset.
rotate_worker_template() {
  local cc=$1 sel="cluster.x-k8s.io/cluster-name=$1,!cluster.x-k8s.io/control-plane" old out
  old=$(kubectl get machines -n "$NS" -l "$sel" -o jsonpath='{.items[0].metadata.name}')
  out=$(kubectl patch -n "$NS" kkmachinetemplate kubekey-default-worker --type=merge \
    -p '{"spec":{"template":{"spec":{"roles":["worker","control-plane"]}}}}' 2>&1) && out="accepted: $out"
  check "topology: an ordinary edit of a KKMachineTemplate is refused (${out//$'\n'/ })" \
    grep -q "spec.template is immutable" <<<"$out"
  kubectl get -n "$NS" kkmachinetemplate kubekey-default-worker -o json | python3 -c '
import json, sys
t = json.load(sys.stdin)
new = {"apiVersion": t["apiVersion"], "kind": t["kind"],
       "metadata": {"name": "kubekey-default-worker-v2", "namespace": t["metadata"]["namespace"]},
       "spec": t["spec"]}
new["spec"]["template"].setdefault("metadata", {}).setdefault("labels", {})["capkk.rs/e2e-rotation"] = "v2"
print(json.dumps(new))' | kubectl apply -f - >/dev/null
  kubectl patch -n "$NS" clusterclass kubekey --type=json -p \
    '[{"op":"replace","path":"/spec/workers/machineDeployments/0/infrastructure/templateRef/name","value":"kubekey-default-worker-v2"}]' \
    >/dev/null
  wait_for "topology: the MachineDeployment references a copy of the new template" 120 md_on_rotated_template "$cc"
  wait_for "topology: the worker rolled out (one Running worker from the new template, $old gone)" 600 \
    worker_rolled_out "$sel" "$old"
}

md_on_rotated_template() { # md_on_rotated_template CLUSTER
  local t
  t=$(kubectl get md -n "$NS" -l "cluster.x-k8s.io/cluster-name=$1" -o jsonpath='{.items[0].spec.template.spec.infrastructureRef.name}')
  [ -n "$t" ] && [ "$(kubectl get kkmachinetemplate -n "$NS" "$t" \
    -o jsonpath='{.spec.template.metadata.labels.capkk\.rs/e2e-rotation}')" = v2 ]
}

worker_rolled_out() { # worker_rolled_out SELECTOR OLD_MACHINE
  machines_running "$1" 1 && ! kubectl get machine -n "$NS" "$2" >/dev/null 2>&1 &&
    [ "$(kubectl get kkmachines -n "$NS" -l capkk.rs/e2e-rotation=v2 -o name | grep -c .)" = 1 ]
}

# hosts.env: what a cluster on these hosts needs, for another harness (test/capi-e2e): every host (1 the
# control-plane candidate), their pinned keys, the mirror with its checksums, the private key file.
hosts_env() {
  local i instances="" fp role
  for i in $(seq "$HOSTS"); do
    fp=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['hosts'][int(sys.argv[2])-1]['host_key_fingerprint'])" "$SB_DIR/state.json" "$i")
    role=worker
    [ "$i" = 1 ] && role=control-plane
    instances+="${instances:+, }{name: $(host_name "$i"), address: $(host_addr "$i"), roles: [$role], hostKeys: [\"$fp\"]}"
  done
  {
    printf 'KUBEKEY_INSTANCES=%q\n' "[$instances]"
    printf 'KUBEKEY_COMPONENT=%q\n' "$COMPONENT"
    printf 'KUBERNETES_VERSION=%q\n' "$KUBE_VERSION"
    printf 'CAPI_E2E_SSH_KEY_FILE=%q\n' "$(python3 -c "import json; print(json.load(open('$SB_DIR/state.json'))['credentials']['ed25519_key'])")"
    printf 'CAPI_E2E_KUBECONFIG=%q\n' "$KUBECONFIG"
    printf 'CAPI_E2E_MANAGER_LOG=%q\n' "$WORK/manager.log"
  } >"$WORK/hosts.env"
  check "hosts.env describes $HOSTS hosts" grep -q "^KUBEKEY_INSTANCES=" "$WORK/hosts.env"
}

teardown() {
  stop_manager
  stop_mirror
  if [ -x "${SANDBOX:-}" ]; then sb down --name "$NAME" >/dev/null 2>&1 || true; fi
  if [ -n "${KUBECONFIG:-}" ] && kubectl get ns "$NS" >/dev/null 2>&1; then
    drop_finalizers
    kubectl delete ns "$NS" --wait=false >/dev/null 2>&1 || true
    # Give the namespace controller a moment, so that a following run finds a clean slate (it waits otherwise).
    kubectl wait --for=delete "ns/$NS" --timeout=60s >/dev/null 2>&1 || log "namespace $NS still terminating"
  fi
}

# Everything runs from main, parsed in full before it starts: editing this file during a run is harmless.
main() {
case $MODE in
  run)
    trap 'rc=$?; end_stage failed; timing_table; echo; echo "e2e: $PASSED passed, $FAILED failed"; teardown; exit $rc' EXIT
    build
    mgmt_up
    release
    install_provider
    hosts_up
    if [ -z "${E2E_ONLY:-}" ]; then
      render_apply
      control_plane
      workers
      gitops
      scale
      delete_cluster
    fi
    [ "${E2E_CAPKK:-1}" = 0 ] || [ "${E2E_ONLY:-capkk}" != capkk ] || capkk_flavor
    [ "${E2E_TOPOLOGY:-1}" = 0 ] || [ "${E2E_ONLY:-topology}" != topology ] || topology
    end_stage
    [ "$FAILED" = 0 ]
    ;;
  quickstart)
    trap 'rc=$?; if [ $rc != 0 ]; then end_stage failed; timing_table; diagnostics; log "failed; make quickstart-sim-down cleans up"; fi' EXIT
    build
    mgmt_up
    release
    install_provider
    hosts_up
    render_apply
    control_plane
    workers
    end_stage
    timing_table
    progress
    cat <<EOF

The cluster "$CLUSTER" is Running: $(( $(date +%s) - T_START ))s from start to 3 Ready Nodes.

Explore it (management plane):
  export PATH=$BIN_DIR:\$PATH KUBECONFIG=$KUBECONFIG
  clusterctl describe cluster $CLUSTER -n $NS --show-conditions all
  kubectl get cluster,kkcluster,machines,kkmachines,kkinstances -n $NS
  kubectl scale machinedeployment $CLUSTER-md-0 -n $NS --replicas 3     # claims the fourth host
Workload cluster (the simulated kube-apiserver on $(host_name 1)):
  kubectl --kubeconfig $WORK/workload.kubeconfig get nodes -o wide
Hosts (sandbox $NAME):
  $SANDBOX status --name $NAME
  $SANDBOX exec --name $NAME --host $(host_name 1) -- ls /etc/kubernetes
Files: rendered cluster $WORK/cluster.yaml, manager log $WORK/manager.log, mirror log $WORK/mirror.log
Tear down: make quickstart-sim-down
EOF
    ;;
  hosts)
    trap 'rc=$?; if [ $rc != 0 ]; then end_stage failed; timing_table; log "failed; E2E_NAME=$NAME test/e2e/e2e.sh down cleans up"; fi' EXIT
    export MANAGER_ALL_NAMESPACES=1
    build
    mgmt_up
    release
    install_provider
    hosts_up
    hosts_env
    end_stage
    timing_table
    log "hosts left running for CAPI's test framework: $WORK/hosts.env (tear down: E2E_NAME=$NAME test/e2e/e2e.sh down)"
    ;;
  chaos)
    trap 'rc=$?; end_stage failed; timing_table; if [ $rc != 0 ]; then log "failed; E2E_NAME=$NAME test/e2e/e2e.sh down cleans up"; fi' EXIT
    build
    mgmt_up
    release
    install_provider
    hosts_up
    render_chaos
    end_stage
    ;;
  down)
    mgmt_env
    teardown
    log "quickstart torn down (the management plane stays up: make mgmt-down)"
    ;;
  *) die "usage: $0 run|quickstart|hosts|chaos|down" ;;
esac
}

main "$@"; exit $?
