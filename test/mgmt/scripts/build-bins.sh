#!/usr/bin/env bash
# Builds the management plane binaries from the Go modules pinned in test/mgmt/tools/{capi,etcd,kube}/go.mod
# into $CAPKK_CACHE/bin/<pins hash>/ (outside the repo). Idempotent: binaries already built for the same pins
# are skipped. etcd, kube-apiserver and kubectl are taken from $KUBEBUILDER_ASSETS when it holds them.
#   build-bins.sh flux   Flux's source-controller and kustomize-controller (tools/flux) and their CRDs into
#                        $CAPKK_CACHE/bin/flux-<hash of tools/flux>/ instead (make flux-bin)
#   build-bins.sh operator   the Cluster API Operator (tools/operator) and its CRDs into
#                        $CAPKK_CACHE/bin/operator-<hash of tools/operator>/ instead (make operator-bin)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

SET=${1:-plane}
case $SET in
  plane) ;;
  flux) BIN_DIR=$FLUX_BIN_DIR ;;
  operator) BIN_DIR=$OPERATOR_BIN_DIR ;;
  *) log "usage: $0 [flux|operator]"; exit 2 ;;
esac
command -v go >/dev/null || { log "go is required to build the management plane binaries"; exit 1; }
mkdir -p "$BIN_DIR"
exec 9>"$BIN_DIR/.build.lock"
flock 9

GOBUILD=(go build -trimpath)
k8s_ldflags() { # <package prefix...>: version stamping as Kubernetes' hack/lib/version.sh does
  local v=$KUBE_VERSION major minor
  major=${v#v}; major=${major%%.*}
  minor=${v#v*.}; minor=${minor%%.*}
  local flags="-s -w"
  for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    flags+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    flags+=" -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$flags"
}
capi_ldflags() {
  local v=$CAPI_VERSION major minor p=sigs.k8s.io/cluster-api/version
  major=${v#v}; major=${major%%.*}
  minor=${v#v*.}; minor=${minor%%.*}
  echo "-s -w -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean" \
    "-X $p.buildDate=1970-01-01T00:00:00Z"
}

# -p: parallel build actions. Go defaults to GOMAXPROCS (the CPU count); with one invocation per module the
# actions of all its binaries share that pool, so compile work of one binary overlaps the (single-threaded)
# link of another. Override with CAPKK_GO_BUILD_P.
GO_P=${CAPKK_GO_BUILD_P:-$(nproc 2>/dev/null || echo 2)}

exec_name() { # <main package path>: the file name `go build -o DIR/` gives it (last element, /vN skipped)
  local p=$1 n=${1##*/}
  if [[ $n =~ ^v[0-9]+$ ]]; then p=${p%/*}; n=${p##*/}; fi
  echo "$n"
}

build_module() { # <tools subdir> <ldflags> <output name>=<package>...: the missing ones in ONE go build
  local dir=$1 ldflags=$2 t0 pair name pkg tmp
  shift 2
  local -a names=() pkgs=()
  declare -A seen=()
  for pair in "$@"; do
    name=${pair%%=*} pkg=${pair#*=}
    if [ -x "$BIN_DIR/$name" ]; then
      log "$name: cached ($BIN_DIR/$name)"
      continue
    fi
    # `go build -o DIR/` names each binary after its package and silently lets one overwrite another of
    # the same name: such a pair is an error here (build_module it in two calls).
    [ -z "${seen[$(exec_name "$pkg")]:-}" ] || { log "$pkg: same file name as another package of this call"; exit 1; }
    seen[$(exec_name "$pkg")]=1
    names+=("$name") pkgs+=("$pkg")
  done
  [ ${#pkgs[@]} -gt 0 ] || return 0
  log "${names[*]}: building ${pkgs[*]} (one go build, -p $GO_P) ..."
  t0=$(date +%s)
  tmp=$(mktemp -d "$BIN_DIR/.build.XXXXXX")
  (cd "$TOOLS_DIR/$dir" && heartbeat "mgmt: go build ${names[*]}" \
    "${GOBUILD[@]}" -p "$GO_P" -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}")
  for i in "${!names[@]}"; do
    mv -f "$tmp/$(exec_name "${pkgs[$i]}")" "$BIN_DIR/${names[$i]}"
  done
  rm -rf "$tmp"
  log "${names[*]}: built in $(( $(date +%s) - t0 ))s"
}

T0=$(date +%s)
if [ "$SET" = flux ]; then
  log "pins: flux source-controller and kustomize-controller $FLUX_VERSION, $(go_version)"
  log "output: $BIN_DIR"
  build_module flux "-s -w" source-controller=github.com/fluxcd/source-controller \
    kustomize-controller=github.com/fluxcd/kustomize-controller
  # Their CRDs from the pinned module source (as capi-src below): the test installs them from here.
  if [ ! -f "$BIN_DIR/crds/.complete" ]; then
    rm -rf "$BIN_DIR/crds" && mkdir -p "$BIN_DIR/crds"
    for m in source-controller kustomize-controller; do
      src=$(cd "$TOOLS_DIR/flux" && go list -m -f '{{.Dir}}' "github.com/fluxcd/$m")
      { [ -n "$src" ] && [ -d "$src/config/crd/bases" ]; } || { log "cannot locate the $m module source"; exit 1; }
      cp "$src"/config/crd/bases/*.yaml "$BIN_DIR/crds/"
    done
    chmod -R u+w "$BIN_DIR/crds"
    echo "$FLUX_VERSION" >"$BIN_DIR/crds/.complete"
    log "crds: copied the CRDs of source-controller and kustomize-controller $FLUX_VERSION"
  fi
  echo "flux $FLUX_VERSION" >"$BIN_DIR/VERSIONS"
  log "flux binaries ready in $(( $(date +%s) - T0 ))s"
  exit 0
fi
if [ "$SET" = operator ]; then
  log "pins: cluster-api-operator $OPERATOR_VERSION, $(go_version)"
  log "output: $BIN_DIR"
  # Stamped as the operator's hack/version.sh does, so that its log's "starting manager" line names the pin.
  v=$OPERATOR_VERSION p=sigs.k8s.io/cluster-api-operator/version
  major=${v#v}; major=${major%%.*}
  minor=${v#v*.}; minor=${minor%%.*}
  # Its libraries (CAPI v1.13, Kubernetes v0.35) are not the plane's: a cold build compiles them all, minutes
  # that the heartbeat keeps from being silent.
  heartbeat "operator: go build" build_module operator \
    "-s -w -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z" \
    operator=sigs.k8s.io/cluster-api-operator/cmd
  # Its CRDs from the pinned module source (one served version each: no conversion webhook to render).
  if [ ! -f "$BIN_DIR/crds/.complete" ]; then
    src=$(cd "$TOOLS_DIR/operator" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api-operator)
    { [ -n "$src" ] && [ -d "$src/config/crd/bases" ]; } || { log "cannot locate the cluster-api-operator module source"; exit 1; }
    rm -rf "$BIN_DIR/crds" && mkdir -p "$BIN_DIR/crds"
    cp "$src"/config/crd/bases/*.yaml "$BIN_DIR/crds/"
    chmod -R u+w "$BIN_DIR/crds"
    echo "$OPERATOR_VERSION" >"$BIN_DIR/crds/.complete"
    log "crds: copied the CRDs of cluster-api-operator $OPERATOR_VERSION"
  fi
  echo "cluster-api-operator $OPERATOR_VERSION" >"$BIN_DIR/VERSIONS"
  log "operator binary ready in $(( $(date +%s) - T0 ))s"
  exit 0
fi
log "pins: kubernetes $KUBE_VERSION, etcd $ETCD_VERSION, cluster-api $CAPI_VERSION, $(go_version)"
log "output: $BIN_DIR"

if [ "$(asset_bin etcd)" = "$BIN_DIR/etcd" ]; then
  build_module etcd "-s -w" etcd=go.etcd.io/etcd/server/v3
else
  log "etcd: using $(asset_bin etcd) from KUBEBUILDER_ASSETS"
fi
kube=()
for b in kube-apiserver kubectl; do
  if [ "$(asset_bin $b)" = "$BIN_DIR/$b" ]; then
    kube+=("$b=k8s.io/kubernetes/cmd/$b")
  else
    log "$b: using $(asset_bin $b) from KUBEBUILDER_ASSETS"
  fi
done
# kube-controller-manager is not part of envtest's assets: always built (garbage collector, namespaces).
build_module kube "$(k8s_ldflags)" "${kube[@]}" kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager
# The bootstrap and control-plane managers are both packages named .../kubeadm: two calls. The second
# compiles only what the first did not (the Go build cache holds every shared package by then).
build_module capi "$(capi_ldflags)" \
  cluster-api-controller=sigs.k8s.io/cluster-api/core \
  kubeadm-bootstrap-controller=sigs.k8s.io/cluster-api/bootstrap/kubeadm \
  clusterctl=sigs.k8s.io/cluster-api/cmd/clusterctl
build_module capi "$(capi_ldflags)" \
  kubeadm-control-plane-controller=sigs.k8s.io/cluster-api/controlplane/kubeadm

# CAPI's CRDs and webhook manifests (kustomize trees) from the pinned module source, so that mgmt-up
# needs neither the network nor the Go module cache.
if [ ! -f "$BIN_DIR/capi-src/.complete" ]; then
  src=$(cd "$TOOLS_DIR/capi" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
  { [ -n "$src" ] && [ -d "$src/core/config" ]; } || { log "cannot locate the cluster-api module source"; exit 1; }
  rm -rf "$BIN_DIR/capi-src"
  for d in core/config bootstrap/kubeadm/config controlplane/kubeadm/config; do
    mkdir -p "$BIN_DIR/capi-src/$d"
    cp -r "$src/$d/crd" "$src/$d/webhook" "$BIN_DIR/capi-src/$d/"
  done
  chmod -R u+w "$BIN_DIR/capi-src"
  echo "$CAPI_VERSION" > "$BIN_DIR/capi-src/.complete"
  log "capi-src: copied CRDs and webhook manifests of cluster-api $CAPI_VERSION"
fi

cat > "$BIN_DIR/VERSIONS" <<VERSIONS
kubernetes $KUBE_VERSION
etcd $ETCD_VERSION
cluster-api $CAPI_VERSION
go $(go_version)
VERSIONS
log "all binaries ready in $(( $(date +%s) - T0 ))s"
