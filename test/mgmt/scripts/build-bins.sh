#!/usr/bin/env bash
# Builds the management plane binaries from the Go modules pinned in test/mgmt/tools/*/go.mod into
# $CAPKK_CACHE/bin/<pins hash>/ (outside the repo). Idempotent: binaries already built for the same pins
# are skipped. etcd, kube-apiserver and kubectl are taken from $KUBEBUILDER_ASSETS when it holds them.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

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

build() { # <tools subdir> <output name> <package> <ldflags>
  local dir=$1 name=$2 pkg=$3 ldflags=$4 out=$BIN_DIR/$2 t0
  if [ -x "$out" ]; then
    log "$name: cached ($out)"
    return
  fi
  log "$name: building $pkg ..."
  t0=$(date +%s)
  (cd "$TOOLS_DIR/$dir" && "${GOBUILD[@]}" -ldflags "$ldflags" -o "$out.tmp.$$" "$pkg")
  mv -f "$out.tmp.$$" "$out"
  log "$name: built in $(( $(date +%s) - t0 ))s"
}

T0=$(date +%s)
log "pins: kubernetes $KUBE_VERSION, etcd $ETCD_VERSION, cluster-api $CAPI_VERSION, $(go_version)"
log "output: $BIN_DIR"

if [ "$(asset_bin etcd)" = "$BIN_DIR/etcd" ]; then
  build etcd etcd go.etcd.io/etcd/server/v3 "-s -w"
else
  log "etcd: using $(asset_bin etcd) from KUBEBUILDER_ASSETS"
fi
if [ "$(asset_bin kube-apiserver)" = "$BIN_DIR/kube-apiserver" ]; then
  build kube kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$(k8s_ldflags)"
else
  log "kube-apiserver: using $(asset_bin kube-apiserver) from KUBEBUILDER_ASSETS"
fi
# Not part of envtest's assets: always built. Runs the garbage collector and namespace controllers.
build kube kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$(k8s_ldflags)"
if [ "$(asset_bin kubectl)" = "$BIN_DIR/kubectl" ]; then
  build kube kubectl k8s.io/kubernetes/cmd/kubectl "$(k8s_ldflags)"
else
  log "kubectl: using $(asset_bin kubectl) from KUBEBUILDER_ASSETS"
fi
build capi cluster-api-controller sigs.k8s.io/cluster-api/core "$(capi_ldflags)"
build capi kubeadm-bootstrap-controller sigs.k8s.io/cluster-api/bootstrap/kubeadm "$(capi_ldflags)"
build capi kubeadm-control-plane-controller sigs.k8s.io/cluster-api/controlplane/kubeadm "$(capi_ldflags)"
build capi clusterctl sigs.k8s.io/cluster-api/cmd/clusterctl "$(capi_ldflags)"

# CAPI's CRDs and webhook manifests (kustomize trees) from the pinned module source, so that mgmt-up
# needs neither the network nor the Go module cache.
if [ ! -f "$BIN_DIR/capi-src/.complete" ]; then
  src=$(cd "$TOOLS_DIR/capi" && go list -m -f '{{.Dir}}' sigs.k8s.io/cluster-api)
  [ -n "$src" ] && [ -d "$src/core/config" ] || { log "cannot locate the cluster-api module source"; exit 1; }
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
