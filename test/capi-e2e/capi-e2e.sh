#!/usr/bin/env bash
# Make glue of CAPI's own provider test suite (test/capi-e2e, see README.md):
#
#   capi-e2e.sh build    the Ginkgo test binary, cached by content hash in $CAPKK_CACHE/capi-e2e/<hash>/
#   capi-e2e.sh run      build, then run it against the run named by CAPI_E2E_FROM:
#                          sandbox:NAME  the local management plane with the sandbox hosts of `test/e2e/e2e.sh hosts`
#                                        (E2E_NAME=NAME; make capi-e2e-hosts): QuickStartSpec only, default flavor
#                          real:NAME     a kept `test/vm/real.sh clusterctl` run (REAL_NAME=NAME, REAL_KEEP=1,
#                                        REAL_TO=clusterctl_init, REAL_EXTRA_VMS=2): its VM cluster, where clusterctl
#                                        init installed every provider, is the bootstrap cluster; the fleet's VMs in no
#                                        cluster are the spec clusters' hosts; "tcg" flavor; both specs
#                          plane:NAME    a kept `test/vm/real.sh clusterctl` run stopped before its own cluster
#                                        (REAL_NAME=NAME REAL_KEEP=1 REAL_TO=serve_up REAL_VMS=2
#                                        MANAGER_ALL_NAMESPACES=1): the local plane, with CAPI's controllers and ours
#                                        as processes, is the bootstrap cluster; VM 1 and VM 2 are the hosts; "tcg"
#                                        flavor, SelfHostedSpec on one untainted control-plane node ("tcg-single")
#
# Environment: CAPI_E2E_FOCUS (a Ginkgo focus regexp, default per mode), CAPI_E2E_OUT (default target/capi-e2e/NAME:
# artifacts, the clusterctl configuration, the flavor), CAPI_E2E_ARGS (more arguments for the binary), VERSION.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CAPKK_CACHE=${CAPKK_CACHE:-$HOME/.cache/capkk-rs}
VERSION=${VERSION:-v0.1.0}
export CAPKK_CACHE CLUSTERCTL_DISABLE_VERSIONCHECK=true CAPKK_VERSION=$VERSION
log() { echo "[capi-e2e $(date +%H:%M:%S)] $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Bump when the build command changes in a way the hashed files do not show.
RECIPE=1
binary_hash() {
  {
    cd "$HERE" && LC_ALL=C sha256sum go.mod go.sum ./*.go
    go env GOVERSION
    echo "recipe=$RECIPE"
  } | sha256sum | cut -c1-16
}

# build: prints the binary's path. Compiling takes minutes cold: nice (the machine is shared), a line every 30 s.
build() {
  command -v go >/dev/null || die "go is required (make deps)"
  local dir bin t0 pid rc=0
  dir=$CAPKK_CACHE/capi-e2e/$(binary_hash)
  bin=$dir/capi-e2e.test
  mkdir -p "$dir"
  exec 8>"$dir/.build.lock"
  flock 8
  if [ -x "$bin" ]; then
    log "test binary cached: $bin"
    echo "$bin"
    return 0
  fi
  log "building the test binary (go test -c, nice; cluster-api/test $(awk '$1 == "sigs.k8s.io/cluster-api/test" {print $2}' "$HERE/go.mod")) into $dir"
  t0=$(date +%s)
  (cd "$HERE" && nice -n 10 go test -c -vet=off -trimpath -o "$dir/.capi-e2e.test.tmp" .) >"$dir/build.log" 2>&1 &
  pid=$!
  while ! wait_secs 30 "$pid"; do
    log "  still compiling, $(($(date +%s) - t0))s (load $(cut -d' ' -f1-3 /proc/loadavg))"
  done
  wait "$pid" || rc=$?
  [ "$rc" = 0 ] || { tail -n 30 "$dir/build.log" >&2; die "go test -c failed (exit $rc, log $dir/build.log)"; }
  mv -f "$dir/.capi-e2e.test.tmp" "$bin"
  echo "$(($(date +%s) - t0))s, load $(cut -d' ' -f1-3 /proc/loadavg)" >"$dir/build-time.txt"
  log "built in $(($(date +%s) - t0))s: $bin"
  echo "$bin"
}
wait_secs() { # wait_secs N PID: 0 once PID has exited, 1 after N seconds while it still runs
  local _
  for _ in $(seq "$1"); do
    kill -0 "$2" 2>/dev/null || return 0
    sleep 1
  done
  ! kill -0 "$2" 2>/dev/null
}

mgmt_path() { # the management plane's kubectl and clusterctl (release-manifests.sh and config.sh run them)
  local bin_dir
  bin_dir=$(bash -c 'source "$1/test/mgmt/scripts/common.sh" && echo "$BIN_DIR"' _ "$ROOT")
  [ -x "$bin_dir/clusterctl" ] || die "clusterctl not built: make mgmt-bin"
  export PATH=$bin_dir:$PATH
}

# sandbox:NAME: what `test/e2e/e2e.sh hosts` left (its hosts.env); our local repository of that run.
from_sandbox() {
  local work=${E2E_WORK:-$ROOT/target/e2e/$1}
  [ -s "$work/hosts.env" ] || die "no $work/hosts.env: run 'make capi-e2e-hosts' (test/e2e/e2e.sh hosts, E2E_NAME=$1) first"
  set -a
  # shellcheck disable=SC1091
  source "$work/hosts.env"
  set +a
  CCONF=$work/repo/clusterctl.yaml
  [ -f "$CCONF" ] || die "no $CCONF (the e2e run's local repository)"
  export CAPI_E2E_FLAVOR=""
  # The e2e config's intervals are for TCG VMs; here a control plane is Running within a minute.
  export CAPI_E2E_INTERVAL_MAX=${CAPI_E2E_INTERVAL_MAX:-10m}
  # SelfHostedSpec runs clusterctl init into the spec's cluster: its Pods need a kubelet, which sandbox hosts (the
  # kubeadm simulator) do not have.
  FOCUS=${CAPI_E2E_FOCUS:-QuickStart}
  [ "$FOCUS" = QuickStart ] ||
    log "note: CAPI_E2E_FOCUS=$FOCUS on sandbox hosts: SelfHostedSpec cannot pass there (no kubelet runs clusterctl init's Pods)"
  log "sandbox:$1: bootstrap cluster = the local management plane ($CAPI_E2E_KUBECONFIG), hosts of $work/hosts.env, default flavor"
}

# spec_env WORK STATE [CLUSTER_YAML]: what both VM modes take from a kept real.sh run (WORK its work dir, STATE
# its fleet): the node artifacts' versions, the bridge mirror and registry, the hosts (hosts.py), the template's
# variables (clusterctl reads them from the environment) and the suite's settings.
spec_env() {
  local work=$1 hosts
  shift
  # shellcheck disable=SC1091
  source "$CAPKK_CACHE/node-artifacts/current.env"
  # shellcheck disable=SC1091
  source "$work/serve/serve.env"
  # shellcheck disable=SC1091
  source "$work/serve/registry.cred"
  hosts=$(python3 "$HERE/hosts.py" "$@") || die "cannot choose the spec clusters' hosts from $*"
  set -a
  eval "$hosts"
  set +a
  export KUBERNETES_VERSION=$KUBE_VERSION NODE_REGISTRY CONTAINERD_VERSION RUNC_VERSION CRICTL_VERSION PAUSE_VERSION
  # The fleet's 198.19.N.0/24 belongs to the management cluster's Pods and Services; these exist only inside the
  # spec cluster's VMs (the bridge CNI masquerades what leaves a node).
  export POD_CIDR=10.244.0.0/24 SERVICE_CIDR=10.96.0.0/24 CP_POD_CIDR=10.244.0.0/26 WORKER_POD_CIDR=10.244.0.64/26
  export CAPI_E2E_REGISTRY_USER=$REGISTRY_USER CAPI_E2E_REGISTRY_PASSWORD=$REGISTRY_PASSWORD
}

# real:NAME: a kept run of test/vm/real.sh (its work dir, fleet state, serve.env, registry credentials, rendered
# cluster). The spec clusters get the fleet's VMs that are in none of that run's clusters, the same mirror component,
# registry and node artifacts, and the "tcg" flavor: templates/cluster-template.yaml through test/vm/tcg-knobs.py,
# real.sh's own knobs, with the values left as template variables.
from_real() {
  local name=$1 work=${REAL_WORK:-$ROOT/target/real/$1} state=/tmp/capkk-sandbox/$1/state.json f
  for f in "$state" "$work/serve/serve.env" "$work/serve/registry.cred" "$work/workload.kubeconfig" "$work/cluster.yaml"; do
    [ -s "$f" ] || die "no $f: keep a run first (see test/capi-e2e/README.md: REAL_NAME=$name REAL_KEEP=1 REAL_TO=clusterctl_init REAL_EXTRA_VMS=2 make e2e-clusterctl)"
  done
  spec_env "$work" "$state" "$work/cluster.yaml"
  export CAPI_E2E_KUBECONFIG=$work/workload.kubeconfig CAPI_E2E_FLAVOR=tcg
  export CAPI_E2E_SELF_HOSTED_INIT_WAIT=${CAPI_E2E_SELF_HOSTED_INIT_WAIT-30m}
  # The clusterctl configuration of `make e2e-clusterctl` (the same registry, so SelfHostedSpec's clusterctl init
  # pulls what the management cluster's did), written afresh into OUT, plus the tcg flavors in our repository.
  tcg_repository
  FOCUS=${CAPI_E2E_FOCUS:-QuickStart|SelfHosted}
  log "real:$name: bootstrap cluster = its VM cluster ($CAPI_E2E_KUBECONFIG), hosts $CP_ADDRESS (control plane) and $WORKER_ADDRESS (worker), registry $NODE_REGISTRY, tcg flavor"
}

# The tcg flavor (and tcg-single: the same, the control-plane node untainted) in our repository under OUT, with
# the values left as template variables; CAPI's providers from TCG copies (tcg-providers.py).
tcg_repository() {
  "$ROOT/test/clusterctl/config.sh" "$NODE_REGISTRY" "$OUT/clusterctl" "$VERSION" >/dev/null
  CCONF=$OUT/clusterctl/clusterctl.yaml
  python3 "$HERE/tcg-providers.py" "$CCONF" "$OUT/clusterctl/capi-tcg"
  local extra flavor
  for flavor in tcg tcg-single; do
    extra=()
    [ "$flavor" = tcg ] || extra=(--untainted-control-plane)
    # shellcheck disable=SC2016 # the ${...} are the flavor's template variables, for clusterctl to fill
    python3 "$ROOT/test/vm/tcg-knobs.py" "$ROOT/templates/cluster-template.yaml" \
      "$OUT/clusterctl/infrastructure-kubekey/$VERSION/cluster-template-$flavor.yaml" \
      --registry '${NODE_REGISTRY}' --registry-secret capi-e2e-registry \
      --containerd '${CONTAINERD_VERSION}' --runc '${RUNC_VERSION}' --crictl '${CRICTL_VERSION}' \
      --pause '${NODE_REGISTRY}/pause:${PAUSE_VERSION}' --pod-cidr '${CP_POD_CIDR}' --worker-pod-cidr '${WORKER_POD_CIDR}' \
      --cp-routes '${WORKER_POD_CIDR}=${WORKER_ADDRESS}' --worker-routes '${CP_POD_CIDR}=${CP_ADDRESS}' \
      --addons-after-init "${extra[@]}"
  done
}

# plane:NAME: a kept run of test/vm/real.sh stopped at serve_up: the local plane is the bootstrap cluster (CAPI's
# controllers and ours run there as processes, ours watching every namespace), VMs 1 and 2 of its fleet the hosts.
from_plane() {
  local name=$1 work=${REAL_WORK:-$ROOT/target/real/$1} state=/tmp/capkk-sandbox/$1/state.json f
  for f in "$state" "$work/serve/serve.env" "$work/serve/registry.cred" "$work/serve/component.yaml"; do
    [ -s "$f" ] || die "no $f: keep a run first (see test/capi-e2e/README.md: REAL_NAME=$name REAL_KEEP=1 REAL_TO=serve_up REAL_VMS=2 MANAGER_ALL_NAMESPACES=1 make e2e-clusterctl)"
  done
  spec_env "$work" "$state"
  KUBEKEY_COMPONENT=$(<"$work/serve/component.yaml")
  export KUBEKEY_COMPONENT
  export CAPI_E2E_KUBECONFIG=${CAPKK_MGMT_DIR:-$CAPKK_CACHE/mgmt}/kubeconfig CAPI_E2E_FLAVOR=tcg
  export CAPI_E2E_SELF_HOSTED_FLAVOR=${CAPI_E2E_SELF_HOSTED_FLAVOR-tcg-single}
  export CAPI_E2E_SELF_HOSTED_WORKERS=${CAPI_E2E_SELF_HOSTED_WORKERS-0}
  # The self-hosted cluster's clusterctl init with a provider wait a one-node TCG cluster meets (the
  # framework's own init waits 5 min per provider; see e2e_suite_test.go); empty: the framework's init.
  export CAPI_E2E_SELF_HOSTED_INIT_WAIT=${CAPI_E2E_SELF_HOSTED_INIT_WAIT-30m}
  tcg_repository
  plane_for_move
  push_manager_image
  FOCUS=${CAPI_E2E_FOCUS:-QuickStart|SelfHosted}
  log "plane:$name: bootstrap cluster = the local plane ($CAPI_E2E_KUBECONFIG), hosts $CP_ADDRESS (control plane) and $WORKER_ADDRESS (worker), registry $NODE_REGISTRY, tcg flavor; SelfHosted: flavor '$CAPI_E2E_SELF_HOSTED_FLAVOR', $CAPI_E2E_SELF_HOSTED_WORKERS worker(s)"
}

# SelfHostedSpec's init pulls our manager from the bridge registry, as the components' image override says; in the
# real:NAME mode make e2e-clusterctl's init pushed it already. The image is `make image`'s (IMG, PODMAN as in make).
push_manager_image() {
  local podman ref=$NODE_REGISTRY/capkk-manager:$VERSION img=${IMG:-ghcr.io/capkk-rs/capkk-manager:dev}
  read -ra podman <<<"${PODMAN:-podman}"
  "${podman[@]}" image exists "$img" || die "no image $img: make image (IMG, PODMAN as for make)"
  "${podman[@]}" tag "$img" "$ref"
  "${podman[@]}" push -q --tls-verify=false --creds "$REGISTRY_USER:$REGISTRY_PASSWORD" "$ref" ||
    die "pushing $ref to the bridge registry failed"
  "${podman[@]}" rmi "$ref" >/dev/null 2>&1 || true
  log "pushed $img to the bridge registry as $ref"
}

plane_inventory_remove() {
  local p
  for p in capi-system/cluster-api capi-kubeadm-bootstrap-system/bootstrap-kubeadm \
    capi-kubeadm-control-plane-system/control-plane-kubeadm capkk-system/infrastructure-kubekey; do
    kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" delete --ignore-not-found -n "${p%/*}" \
      "provider.clusterctl.cluster.x-k8s.io/${p#*/}" >/dev/null 2>&1 || true
  done
  # The namespaces plane_for_move made for CAPI's inventory (nothing else lives there on the plane, whose CAPI
  # controllers are processes); capkk-system stays: the plane's managers keep their Leases there.
  kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" delete --ignore-not-found --wait=false namespace capi-system \
    capi-kubeadm-bootstrap-system capi-kubeadm-control-plane-system >/dev/null 2>&1 || true
}

# What `clusterctl init` would have left on the local plane, whose providers run as processes: the label by which
# clusterctl move finds the CRDs to move, and the provider inventory (clusterctl move checks that its target runs
# every provider of the source, at the same version or later: the move back of SelfHostedSpec needs it here).
plane_for_move() {
  local crd capi_src
  # Undone when the run ends: a provider inventory left on the shared plane would make every later
  # `clusterctl move` from it (mgmt_clusterctl_move in make test) require its target to run these providers.
  trap plane_inventory_remove EXIT
  for crd in $(kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" get crd -o name | grep -E '\.cluster\.x-k8s\.io$' | grep -v '\.clusterctl\.cluster\.x-k8s\.io$'); do
    kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" label --overwrite "$crd" clusterctl.cluster.x-k8s.io= >/dev/null
  done
  # shellcheck disable=SC1091
  source "$CAPKK_CACHE/clusterctl/current.env"
  capi_src=$(cd "$HERE" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
  [ -f "$capi_src/cmd/clusterctl/config/manifest/clusterctl-api.yaml" ] || die "no clusterctl-api.yaml in $capi_src"
  kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" apply --server-side --force-conflicts \
    -f "$capi_src/cmd/clusterctl/config/manifest/clusterctl-api.yaml" >/dev/null
  kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" wait --for condition=established --timeout=60s \
    crd/providers.clusterctl.cluster.x-k8s.io >/dev/null
  # shellcheck disable=SC2153 # CAPI_VERSION: from current.env
  python3 - "$CAPI_VERSION" "$VERSION" <<'PY' | kubectl --kubeconfig "$CAPI_E2E_KUBECONFIG" apply --server-side --force-conflicts -f - >/dev/null
import json, sys
capi, ours = sys.argv[1], sys.argv[2]
rows = [("cluster-api", "capi-system", "cluster-api", "CoreProvider", capi),
        ("bootstrap-kubeadm", "capi-kubeadm-bootstrap-system", "kubeadm", "BootstrapProvider", capi),
        ("control-plane-kubeadm", "capi-kubeadm-control-plane-system", "kubeadm", "ControlPlaneProvider", capi),
        ("infrastructure-kubekey", "capkk-system", "kubekey", "InfrastructureProvider", ours)]
items = []
for name, ns, provider, kind, version in rows:
    items.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    items.append({"apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3", "kind": "Provider",
                  "metadata": {"name": name, "namespace": ns, "labels": {
                      "clusterctl.cluster.x-k8s.io": "", "clusterctl.cluster.x-k8s.io/core": "inventory",
                      "cluster.x-k8s.io/provider": name}},
                  "providerName": provider, "type": kind, "version": version})
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
PY
}

run() {
  local bin from=${CAPI_E2E_FROM:-} name rc=0 t0
  [ -n "$from" ] || die "set CAPI_E2E_FROM=sandbox:NAME, real:NAME or plane:NAME (see test/capi-e2e/README.md)"
  name=${from#*:}
  OUT=${CAPI_E2E_OUT:-$ROOT/target/capi-e2e/$name}
  mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  bin=$(build)
  mgmt_path
  case $from in
    sandbox:?*) from_sandbox "$name" ;;
    real:?*) from_real "$name" ;;
    plane:?*) from_plane "$name" ;;
    *) die "CAPI_E2E_FROM=$from: expected sandbox:NAME, real:NAME or plane:NAME" ;;
  esac
  local artifacts
  artifacts=$OUT/artifacts-$(date +%Y%m%d-%H%M%S)
  log "focus '$FOCUS', artifacts $artifacts (ginkgo-log.txt, clusters/*/, clusterctl logs)"
  t0=$(date +%s)
  # -ginkgo.poll-progress-after: a spec waiting minutes on a TCG node reports what it waits on every minute.
  # -ginkgo.grace-period: after Ctrl-C the spec's cleanup deletes its cluster (host resets take minutes on VMs).
  # shellcheck disable=SC2086 # CAPI_E2E_ARGS: words
  (cd "$HERE" && "$bin" -test.v -ginkgo.v -ginkgo.no-color -ginkgo.focus="$FOCUS" -ginkgo.timeout=10h \
    -ginkgo.poll-progress-after=60s -ginkgo.poll-progress-interval=60s -ginkgo.grace-period=45m \
    -e2e.config="$HERE/config/capkk.yaml" -e2e.artifacts-folder="$artifacts" \
    -e2e.clusterctl-config="$CCONF" -e2e.use-existing-cluster=true ${CAPI_E2E_ARGS:-}) || rc=$?
  log "suite exit $rc after $(($(date +%s) - t0))s; artifacts $artifacts"
  return "$rc"
}

case ${1:-} in
  build) build >/dev/null ;;
  run) run ;;
  *) die "usage: $0 build|run" ;;
esac
