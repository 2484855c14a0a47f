# shellcheck shell=bash
# shellcheck disable=SC2034 # the versions and CAPI_BINS are read by the scripts that source this file
# Shared settings of the management plane scripts (sourced, not executed).
# Paths: see ../README.md.

MGMT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TOOLS_DIR=$MGMT_DIR/tools
CAPKK_CACHE=${CAPKK_CACHE:-$HOME/.cache/capkk-rs}
CAPKK_MGMT_DIR=${CAPKK_MGMT_DIR:-$CAPKK_CACHE/mgmt}

# Bump when the build recipe (flags, binary set) changes, so cached binaries are rebuilt.
BUILD_RECIPE=4

# Versions, read from the pinning go.mod files (the single source of truth).
mod_version() { # <tools subdir> <module path>
  awk -v m="$2" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' \
    "$TOOLS_DIR/$1/go.mod"
}
KUBE_VERSION=$(mod_version kube k8s.io/kubernetes)
ETCD_VERSION=$(mod_version etcd go.etcd.io/etcd/server/v3)
CAPI_VERSION=$(mod_version capi sigs.k8s.io/cluster-api)

go_version() { go env GOVERSION 2>/dev/null || echo no-go; }

# Directory for binaries built from the current pins: $CAPKK_CACHE/bin/<hash of pins + go version + recipe>.
# The plane's pin sets are named, not globbed: Flux (tools/flux) is a set of its own, so that changing its pins
# rebuilds only Flux, and adding it did not rebuild the plane.
PLANE_PINS="capi etcd kube"
pins_hash() { # [<tools subdir>...]: default the plane's
  local dirs=("$@") d
  [ ${#dirs[@]} -gt 0 ] || read -ra dirs <<<"$PLANE_PINS"
  { for d in "${dirs[@]}"; do cat "$TOOLS_DIR/$d/go.mod"; done
    for d in "${dirs[@]}"; do cat "$TOOLS_DIR/$d/go.sum"; done
    go_version; echo "recipe=$BUILD_RECIPE"; } | sha256sum | cut -c1-16
}
BIN_DIR=$CAPKK_CACHE/bin/$(pins_hash)
# Flux's source-controller and kustomize-controller and their CRDs (make flux-bin; test/gitops).
FLUX_BIN_DIR=$CAPKK_CACHE/bin/flux-$(pins_hash flux)
FLUX_VERSION=$(mod_version flux github.com/fluxcd/source-controller)
FLUX_BINS="source-controller kustomize-controller"
# The Cluster API Operator and its CRDs (make operator-bin; controllers/tests/operator_*.rs, docs/operator.md):
# a pin set of its own, like Flux, because its CAPI and Kubernetes libraries are not the plane's.
OPERATOR_BIN_DIR=$CAPKK_CACHE/bin/operator-$(pins_hash operator)
OPERATOR_VERSION=$(mod_version operator sigs.k8s.io/cluster-api-operator)

# Binaries that KUBEBUILDER_ASSETS (envtest's etcd, kube-apiserver, kubectl) may provide instead.
asset_bin() { # <name>: prints the path to use for etcd / kube-apiserver / kubectl
  if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -x "$KUBEBUILDER_ASSETS/$1" ]; then
    echo "$KUBEBUILDER_ASSETS/$1"
  else
    echo "$BIN_DIR/$1"
  fi
}

CAPI_BINS="cluster-api-controller kubeadm-bootstrap-controller kubeadm-control-plane-controller clusterctl"

log() { echo "mgmt: $*" >&2; }

# No silent minute: heartbeat LABEL COMMAND... prints a line every 30 s while a long command (a Go build) runs.
# shellcheck source=../../lib/heartbeat.sh
source "$MGMT_DIR/../lib/heartbeat.sh"
