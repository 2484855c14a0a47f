#!/usr/bin/env bash
# Builds everything `clusterctl init` installs besides our own provider, from pinned Go modules (see README.md):
# cert-manager v1.11.5 (controller, webhook, cainjector) and Cluster API v1.14.2 (core, kubeadm bootstrap, kubeadm
# control plane) as static binaries in minimal images, pushed into a real registry's filesystem storage; their
# manifests rendered from each module's own deploy sources and laid out as clusterctl local repositories.
#
# Output: $CAPKK_CACHE/clusterctl/<hash of pins, scripts, tool sources, go version>/, plus
# $CAPKK_CACHE/clusterctl/current.env describing it. Each piece leaves a stamp and is skipped when present; per-piece
# times go to stderr and <dir>/build-times.txt; a piece running longer than 30 s prints a heartbeat.
#
#   build.sh [PIECE...]     no argument: every piece, then current.env
#
# Needs: go, curl, python3, and the management plane's kubectl and clusterctl (`make mgmt-bin`).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
TOOLS=$HERE/tools
ART_TOOLS=$REPO/test/vm/artifacts/tools
# The management plane's pins and binaries: CAPI's version and module, kubectl (kustomize), clusterctl.
# shellcheck source=../mgmt/scripts/common.sh
source "$REPO/test/mgmt/scripts/common.sh"
log() { echo "clusterctl-artifacts: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Bump when the recipe changes in a way the hashed files do not show.
RECIPE=1
CM_MODULE=github.com/cert-manager/cert-manager
CM_VERSION=$(awk -v m="$CM_MODULE" '$1 == m && $2 ~ /^v/ { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' \
  "$TOOLS/cert-manager/go.mod")
[ -n "$CM_VERSION" ] || die "cannot read the $CM_MODULE pin from tools/cert-manager/go.mod"
CAPI_IMAGE_REPO=registry.k8s.io/cluster-api
CM_IMAGE_REPO=quay.io/jetstack
# cert-manager's images run as this user (its Containerfiles say USER 1000; its Deployments rely on it).
CM_USER=1000
# CAPI's images: distroless's nonroot user (its Deployments also set runAsUser 65532).
CAPI_USER=65532

command -v go >/dev/null || die "go is required"
command -v curl >/dev/null || die "curl is required"
command -v python3 >/dev/null || die "python3 is required"
KUBECTL=$(asset_bin kubectl)
CLUSTERCTL=$BIN_DIR/clusterctl
need_mgmt_bins() {
  if [ ! -x "$KUBECTL" ] || [ ! -x "$CLUSTERCTL" ]; then
    die "kubectl and clusterctl not built: run 'make mgmt-bin' first ($BIN_DIR)"
  fi
}

inputs_hash() {
  {
    cd "$HERE"
    { echo build.sh; find tools -type f \( -name go.mod -o -name go.sum -o -name '*.go' \); } | LC_ALL=C sort |
      xargs sha256sum
    (cd "$ART_TOOLS" && find images registry -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) |
      LC_ALL=C sort | xargs sha256sum)
    sha256sum "$REPO/test/mgmt/tools/capi/go.mod" "$REPO/test/mgmt/tools/capi/go.sum" | cut -c1-64
    echo "recipe=$RECIPE cm-user=$CM_USER capi-user=$CAPI_USER"
    go_version
  } | sha256sum | cut -c1-16
}
HASH=$(inputs_hash)
ROOT=$CAPKK_CACHE/clusterctl
OUT=$ROOT/$HASH
mkdir -p "$OUT/.stamps" "$OUT/bin"
exec 9>"$OUT/.build.lock"
flock 9

T0=$(date +%s)
log "output: $OUT"
log "pins: cert-manager $CM_VERSION, cluster-api $CAPI_VERSION, $(go_version)"
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

heartbeat() { # <name> <start>: every 30 s, until killed
  while sleep 30; do
    log "$1: still running, $(( $(date +%s) - $2 ))s (load $(cut -d' ' -f1 /proc/loadavg))"
  done
}
piece() { # <name> <function>: run once (stamped), timed, with a heartbeat
  local name=$1 fn=$2 t0 secs hb rc=0
  if [ -e "$OUT/.stamps/$name" ]; then
    log "$name: cached"
    return
  fi
  log "$name: building ..."
  t0=$(date +%s)
  heartbeat "$name" "$t0" &
  hb=$!
  "$fn" || rc=$?
  kill "$hb" 2>/dev/null; wait "$hb" 2>/dev/null || true
  [ "$rc" = 0 ] || die "$name failed (exit $rc)"
  secs=$(( $(date +%s) - t0 ))
  echo "$name ${secs}s load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' '/') $(date -u +%FT%TZ)" >> "$OUT/build-times.txt"
  touch "$OUT/.stamps/$name"
  log "$name: done in ${secs}s"
}

# nice: the machine is shared; these builds are batch work.
GOBUILD=(nice -n 10 go build -trimpath)
module_dir() { # <tools dir> <module>: the module's source in the module cache
  (cd "$1" && go list -m -f '{{.Dir}}' "$2")
}

# ---- host tools: imgtool and registry (the node artifacts' sources), helm ----
build_tools() {
  (cd "$ART_TOOLS/images" && CGO_ENABLED=0 "${GOBUILD[@]}" -ldflags "-s -w" -o "$OUT/bin/" ./imgtool)
  local p=github.com/distribution/distribution/v3/version v
  v=$(cd "$ART_TOOLS/registry" && go list -m -f '{{.Version}}' github.com/distribution/distribution/v3)
  (cd "$ART_TOOLS/registry" && CGO_ENABLED=0 "${GOBUILD[@]}" -ldflags "-s -w -X $p.version=$v -X $p.revision=$v" \
    -o "$OUT/bin/registry" .)
  # helm as its Makefile stamps it: its version, and the Kubernetes version `helm template` assumes from the
  # client-go it is built with (otherwise v1.20, below cert-manager's chart's kubeVersion constraint).
  local kv major minor h=helm.sh/helm/v3
  v=$(cd "$TOOLS/helm" && go list -m -f '{{.Version}}' $h)
  kv=$(cd "$TOOLS/helm" && go list -m -f '{{.Version}}' k8s.io/client-go)
  kv=${kv#v}; major=$(( ${kv%%.*} + 1 )); minor=${kv#*.}; minor=${minor%%.*}
  (cd "$TOOLS/helm" && CGO_ENABLED=0 "${GOBUILD[@]}" -ldflags "-s -w -X $h/internal/version.version=$v \
    -X $h/pkg/chartutil.k8sVersionMajor=$major -X $h/pkg/chartutil.k8sVersionMinor=$minor \
    -X $h/pkg/lint/rules.k8sVersionMajor=$major -X $h/pkg/lint/rules.k8sVersionMinor=$minor" \
    -o "$OUT/bin/helm" $h/cmd/helm)
}

# ---- cert-manager: its three controllers as its Makefile builds them (cgo off, -trimpath, version-stamped) ----
build_cert_manager() {
  local p=$CM_MODULE/pkg/util
  mkdir -p "$OUT/bin/cert-manager"
  (cd "$TOOLS/cert-manager" && CGO_ENABLED=0 "${GOBUILD[@]}" \
    -ldflags "-s -w -X $p.AppVersion=$CM_VERSION -X $p.AppGitCommit=$CM_VERSION" -o "$OUT/bin/cert-manager/" tool)
}

# ---- CAPI managers: static (cgo off, as CAPI's Dockerfile builds them). The management plane's builds link
# glibc (cgo on), so they cannot go into a minimal image as they are. ----
capi_ldflags() { # version stamping as test/mgmt/scripts/build-bins.sh does
  local v=$CAPI_VERSION major minor p=sigs.k8s.io/cluster-api/version
  major=${v#v}; major=${major%%.*}
  minor=${v#v*.}; minor=${minor%%.*}
  echo "-s -w -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean" \
    "-X $p.buildDate=1970-01-01T00:00:00Z"
}
build_capi() {
  local d=$OUT/bin/capi
  mkdir -p "$d/core" "$d/bootstrap" "$d/controlplane"
  # Both kubeadm managers are packages named kubeadm: one go build each output directory, in one invocation
  # per pair so that the shared packages compile once.
  (cd "$TOOLS_DIR/capi" && CGO_ENABLED=0 "${GOBUILD[@]}" -ldflags "$(capi_ldflags)" -o "$d/core/" \
    sigs.k8s.io/cluster-api/core)
  (cd "$TOOLS_DIR/capi" && CGO_ENABLED=0 "${GOBUILD[@]}" -ldflags "$(capi_ldflags)" -o "$d/bootstrap/" \
    sigs.k8s.io/cluster-api/bootstrap/kubeadm)
  (cd "$TOOLS_DIR/capi" && CGO_ENABLED=0 "${GOBUILD[@]}" -ldflags "$(capi_ldflags)" -o "$d/controlplane/" \
    sigs.k8s.io/cluster-api/controlplane/kubeadm)
  mv -f "$d/core/core" "$d/cluster-api-controller"
  mv -f "$d/bootstrap/kubeadm" "$d/kubeadm-bootstrap-controller"
  mv -f "$d/controlplane/kubeadm" "$d/kubeadm-control-plane-controller"
  rmdir "$d/core" "$d/bootstrap" "$d/controlplane"
}

# ---- images: static binary + a minimal root (passwd/group naming the non-root users, /tmp), no base image ----
build_images() {
  local dir=$OUT/images root=$OUT/rootfs it=$OUT/bin/imgtool c n
  rm -rf "$dir" "$root"; mkdir -p "$dir" "$root/etc" "$root/tmp"
  chmod 1777 "$root/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%s:%s:nonroot:/home/nonroot:/sbin/nologin\ncert-manager:x:%s:%s::/:/sbin/nologin\n' \
    "$CAPI_USER" "$CAPI_USER" "$CM_USER" "$CM_USER" > "$root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:%s:\ncert-manager:x:%s:\n' "$CAPI_USER" "$CM_USER" > "$root/etc/group"
  for c in controller webhook cainjector; do
    # cert-manager's Containerfiles: /app/cmd/<name>/<name>, USER 1000.
    "$it" build -o "$dir/cert-manager-$c.tar" -tag "$CM_IMAGE_REPO/cert-manager-$c:$CM_VERSION" -layer-dir "$root" \
      -file "$OUT/bin/cert-manager/$c=/app/cmd/$c/$c" -entrypoint "/app/cmd/$c/$c" -user "$CM_USER"
  done
  for n in cluster-api-controller kubeadm-bootstrap-controller kubeadm-control-plane-controller; do
    # CAPI's Dockerfile: /manager, USER 65532 (its Deployments run `command: /manager`).
    "$it" build -o "$dir/$n.tar" -tag "$CAPI_IMAGE_REPO/$n:$CAPI_VERSION" -layer-dir "$root" \
      -file "$OUT/bin/capi/$n=/manager" -entrypoint /manager -user "$CAPI_USER"
  done
  {
    for c in controller webhook cainjector; do echo "$CM_IMAGE_REPO/cert-manager-$c:$CM_VERSION"; done
    for n in cluster-api-controller kubeadm-bootstrap-controller kubeadm-control-plane-controller; do
      echo "$CAPI_IMAGE_REPO/$n:$CAPI_VERSION"
    done
  } > "$dir/images.txt"
}

# ---- manifests: clusterctl local repositories ({base}/{provider-label}/{version}/{components file}) ----
# cert-manager as its release does it (make/manifests.mk): the chart from deploy/charts with the CRDs of deploy/crds
# as templates/crds.yaml behind installCRDs, `helm template` with installCRDs, creator=static and no startupapicheck,
# after deploy/manifests/namespace.yaml. clusterctl reads it as the "repository" of a provider named cert-manager
# without a type, so the label directory is plain `cert-manager`.
build_cert_manager_manifest() {
  local src chart=$OUT/.chart/cert-manager dir=$OUT/repo/cert-manager/$CM_VERSION f first=1
  src=$(module_dir "$TOOLS/cert-manager" "$CM_MODULE")
  [ -d "$src/deploy/charts/cert-manager/templates" ] || die "no deploy/charts in $src"
  rm -rf "$OUT/.chart" "$dir"; mkdir -p "$chart" "$dir"
  cp -r "$src/deploy/charts/cert-manager/templates" "$src/deploy/charts/cert-manager/values.yaml" "$chart/"
  chmod -R u+w "$chart"
  sed -e "s/^version: .*/version: $CM_VERSION/" -e "s/^appVersion: .*/appVersion: $CM_VERSION/" \
    -e 's/"{{IS_PRERELEASE}}"/"false"/' "$src/deploy/charts/cert-manager/Chart.template.yaml" > "$chart/Chart.yaml"
  {
    echo '{{- if .Values.installCRDs }}'
    for f in "$src"/deploy/crds/crd-*.yaml; do
      [ "$first" = 1 ] || echo '---'
      first=0
      cat "$f"
    done
    echo '{{- end }}'
  } > "$chart/templates/crds.yaml"
  {
    cat "$src/deploy/manifests/namespace.yaml"
    echo '---'
    "$OUT/bin/helm" template cert-manager "$chart" --namespace cert-manager \
      --set installCRDs=true --set creator=static --set startupapicheck.enabled=false | sed -e '1{/^---$/d;}'
  } > "$dir/cert-manager.yaml"
  rm -rf "$OUT/.chart"
}

# CAPI as its release does it (Makefile release-manifests after manifest-modification): each provider's
# config/default with the manager image set to registry.k8s.io/cluster-api/<name>:<version> and pull policy
# IfNotPresent, built with kustomize (kubectl's), plus the module's metadata.yaml.
build_capi_manifests() {
  local src work=$OUT/.capi-config t label file name
  need_mgmt_bins
  src=$(module_dir "$TOOLS_DIR/capi" sigs.k8s.io/cluster-api)
  [ -f "$src/metadata.yaml" ] || die "no metadata.yaml in $src"
  rm -rf "$work" "$OUT/repo/cluster-api" "$OUT/repo/bootstrap-kubeadm" "$OUT/repo/control-plane-kubeadm"
  for t in "core/config cluster-api core-components.yaml cluster-api-controller" \
           "bootstrap/kubeadm/config bootstrap-kubeadm bootstrap-components.yaml kubeadm-bootstrap-controller" \
           "controlplane/kubeadm/config control-plane-kubeadm control-plane-components.yaml kubeadm-control-plane-controller"; do
    read -r tree label file name <<< "$t"
    mkdir -p "$work/$tree" "$OUT/repo/$label/$CAPI_VERSION"
    cp -r "$src/$tree/." "$work/$tree/"
    chmod -R u+w "$work/$tree"
    sed -i -e "s@image: .*@image: $CAPI_IMAGE_REPO/$name:$CAPI_VERSION@" "$work/$tree/default/manager_image_patch.yaml"
    sed -i -e 's@imagePullPolicy: .*@imagePullPolicy: IfNotPresent@' "$work/$tree/default/manager_pull_policy.yaml"
    "$KUBECTL" kustomize "$work/$tree/default" > "$OUT/repo/$label/$CAPI_VERSION/$file"
    cp "$src/metadata.yaml" "$OUT/repo/$label/$CAPI_VERSION/metadata.yaml"
    grep -q "image: $CAPI_IMAGE_REPO/$name:$CAPI_VERSION\$" "$OUT/repo/$label/$CAPI_VERSION/$file" ||
      die "$label: the rendered components do not run $CAPI_IMAGE_REPO/$name:$CAPI_VERSION"
  done
  rm -rf "$work"
}

# ---- registry storage: every image pushed into a real registry (distribution) on 127.0.0.1 ----
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
build_registry_storage() {
  local st=$OUT/registry port pid cfg=$OUT/.push-registry.yml
  rm -rf "$st"; mkdir -p "$st"
  port=$(free_port)
  cat > "$cfg" <<EOF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $st
http:
  addr: 127.0.0.1:$port
EOF
  "$OUT/bin/registry" serve "$cfg" > "$OUT/.push-registry.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    curl -fsS -o /dev/null "http://127.0.0.1:$port/v2/" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$OUT/.push-registry.log" >&2; die "registry exited"; }
    sleep 0.2
  done
  if ! "$OUT/bin/imgtool" push -registry "127.0.0.1:$port" "$OUT"/images/*.tar; then
    kill "$pid"; wait "$pid" 2>/dev/null || true
    die "pushing the images failed (registry log: $OUT/.push-registry.log)"
  fi
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -f "$cfg"
}

PIECES="tools cert-manager capi images cert-manager-manifest capi-manifests registry-storage"
# shellcheck disable=SC2086 # a word list
[ $# -gt 0 ] || set -- $PIECES
for p in "$@"; do
  case " $PIECES " in *" $p "*) ;; *) die "unknown piece $p (pieces: $PIECES)" ;; esac
  piece "$p" "build_${p//-/_}"
done
if [ "$*" != "$PIECES" ]; then
  log "partial run ($*) done; run without arguments to finish and publish current.env"
  exit 0
fi
need_mgmt_bins
cat > "$OUT/VERSIONS" <<EOF
cert-manager $CM_VERSION
cluster-api $CAPI_VERSION
helm $(cd "$TOOLS/helm" && go list -m -f '{{.Version}}' helm.sh/helm/v3)
go $(go_version)
EOF
q() { printf '%q' "$1"; }
{
  echo "# clusterctl init's artifacts (test/clusterctl/build.sh); source this file."
  echo "CLUSTERCTL_ARTIFACTS_DIR=$(q "$OUT")"
  echo "CLUSTERCTL_REPOSITORY=$(q "$OUT/repo")"
  echo "CLUSTERCTL_REGISTRY_STORAGE=$(q "$OUT/registry")"
  echo "CLUSTERCTL_IMAGES_DIR=$(q "$OUT/images")"
  echo "CLUSTERCTL_BIN=$(q "$CLUSTERCTL")"
  echo "CERT_MANAGER_VERSION=$CM_VERSION"
  echo "CAPI_VERSION=$CAPI_VERSION"
} > "$OUT/artifacts.env"
cp "$OUT/artifacts.env" "$ROOT/current.env.tmp.$$" && mv -f "$ROOT/current.env.tmp.$$" "$ROOT/current.env"
touch "$OUT/.complete"
log "all clusterctl artifacts ready in $(( $(date +%s) - T0 ))s: $OUT (env: $ROOT/current.env)"
