#!/usr/bin/env bash
# Builds the previous Kubernetes minor's node artifacts (README.md, "The previous minor"), so that one real-node
# run can create a cluster at that version and upgrade it to the main set's: the Kubernetes binaries pinned in
# tools-prev/kube/go.mod (version-stamped), their images, the pause image kubeadm of that version pulls, the
# kubernetes-release tree of that version with checksum files, and a registry storage holding these images.
# Everything that does not depend on the Kubernetes version (containerd, runc, crictl, CNI, etcd, CoreDNS,
# the Debian repository) is the main set's: serve.sh with NODE_SERVE_PREV=1 serves both sets as one mirror and
# one registry. Where kubeadm of this version lists an etcd or CoreDNS tag the main set does not build, prev.env
# names the tags that are served (PREV_ETCD_IMAGE_TAG, PREV_DNS_IMAGE_TAG): the cluster sets them as
# ClusterConfiguration `etcd.local.imageTag` and `dns.imageTag`; no image is published under a tag that
# belongs to another version's binary.
#
# Output: $CAPKK_CACHE/node-artifacts/prev-<hash>/ (the hash covers this script, tools-prev/, the Go version and
# the main set it is built against) and $CAPKK_CACHE/node-artifacts/prev.env describing it. Needs a complete
# main set (`make node-artifacts`): its imgtool, registry and image root filesystems are reused.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
# shellcheck source=../../mgmt/scripts/common.sh
source "$REPO/test/mgmt/scripts/common.sh"
log() { echo "node-artifacts-prev: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

PREV_RECIPE=1
ARCH=amd64
PREV_TOOLS=$HERE/tools-prev

MAIN_ENV=${NODE_ARTIFACTS_ENV:-$CAPKK_CACHE/node-artifacts/current.env}
[ -f "$MAIN_ENV" ] || die "no $MAIN_ENV: build the main set first ('make node-artifacts')"
# shellcheck disable=SC1090
source "$MAIN_ENV"
[ -f "$NODE_ARTIFACTS_DIR/.complete" ] || die "the main set in $NODE_ARTIFACTS_DIR is incomplete ('make node-artifacts')"
MAIN_DIR=$NODE_ARTIFACTS_DIR
MAIN_BIN=$NODE_BIN_DIR
MAIN_KUBE_VERSION=$KUBE_VERSION
PREV_KUBE_VERSION=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3; exit }
  $1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' "$PREV_TOOLS/kube/go.mod")
[ -n "$PREV_KUBE_VERSION" ] || die "cannot read the k8s.io/kubernetes pin of $PREV_TOOLS/kube/go.mod"
[ "${PREV_KUBE_VERSION%.*}" != "${MAIN_KUBE_VERSION%.*}" ] ||
  die "tools-prev pins $PREV_KUBE_VERSION, the same minor as the main set ($MAIN_KUBE_VERSION)"

inputs_hash() {
  {
    cd "$HERE"
    { echo build-prev.sh; find tools-prev -type f \( -name go.mod -o -name go.sum \); } | LC_ALL=C sort |
      xargs sha256sum
    echo "main=$(basename "$MAIN_DIR") arch=$ARCH recipe=$PREV_RECIPE"
    go_version
  } | sha256sum | cut -c1-16
}
ROOT=$CAPKK_CACHE/node-artifacts
OUT=$ROOT/prev-$(inputs_hash)
mkdir -p "$OUT/.stamps" "$OUT/bin"
exec 9>"$OUT/.build.lock"
flock 9

T0=$(date +%s)
log "output: $OUT (Kubernetes $PREV_KUBE_VERSION; main set $MAIN_KUBE_VERSION in $MAIN_DIR; $(go_version))"
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

piece() { # <name> <function>: run once (stamped), timed
  local name=$1 fn=$2 t0 secs
  if [ -e "$OUT/.stamps/$name" ]; then
    log "$name: cached"
    return
  fi
  log "$name: building ..."
  t0=$(date +%s)
  "$fn"
  secs=$(( $(date +%s) - t0 ))
  echo "$name ${secs}s load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' '/') $(date -u +%FT%TZ)" >> "$OUT/build-times.txt"
  touch "$OUT/.stamps/$name"
  log "$name: done in ${secs}s"
}

k8s_ldflags() { # version stamping as Kubernetes' hack/lib/version.sh (and build.sh) do
  local v=$PREV_KUBE_VERSION major minor flags="-s -w" p
  major=${v#v}; major=${major%%.*}
  minor=${v#v*.}; minor=${minor%%.*}
  for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    flags+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    flags+=" -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$flags"
}
# One `go build` of the seven commands (tools-prev/kube's tool block), cgo as the main set's.
build_kube() {
  (cd "$PREV_TOOLS/kube" && heartbeat "node-artifacts-prev: go build Kubernetes $PREV_KUBE_VERSION" \
    go build -trimpath -ldflags "$(k8s_ldflags)" -o "$OUT/bin/" tool)
}

images_list() { "$OUT/bin/kubeadm" config images list --kubernetes-version "$PREV_KUBE_VERSION" 2>/dev/null; }
listed_tag() { images_list | sed -n "s|^registry.k8s.io/$1:||p"; } # <image name>

# pause has no ClusterConfiguration field: kubeadm's preflight pulls exactly the tag it lists. Our pause (the
# main set's source, tools/images/pause) is built again, stamped with that tag, when it differs.
build_pause() {
  [ "$PAUSE_TAG" != "$PAUSE_VERSION" ] || return 0
  (cd "$HERE/tools/images" && heartbeat "node-artifacts-prev: go build pause $PAUSE_TAG" \
    env CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$PAUSE_TAG" -o "$OUT/bin/pause" ./pause)
}

# The images whose content depends on the Kubernetes version; etcd and CoreDNS are the main set's (see prev.env).
build_images() {
  local dir=$OUT/images ref name tag it=$MAIN_BIN/imgtool base=$MAIN_DIR/rootfs/base ipt=$MAIN_DIR/rootfs/iptables
  rm -rf "$dir"; mkdir -p "$dir"
  { [ -d "$base" ] && [ -d "$ipt" ]; } || die "the main set has no image root filesystems in $MAIN_DIR/rootfs"
  for ref in $(images_list); do
    name=${ref#registry.k8s.io/}; name=${name%%:*}; tag=${ref##*:}
    case $name in
      kube-apiserver|kube-controller-manager|kube-scheduler)
        "$it" build -o "$dir/$name.tar" -tag "$ref" -layer-dir "$base" \
          -file "$OUT/bin/$name=/usr/local/bin/$name" -entrypoint "/usr/local/bin/$name" ;;
      kube-proxy)
        "$it" build -o "$dir/$name.tar" -tag "$ref" -layer-dir "$base" -layer-dir "$ipt" \
          -file "$OUT/bin/$name=/usr/local/bin/$name" -entrypoint "/usr/local/bin/$name" ;;
      etcd|coredns/coredns) ;; # served from the main set under its own tag: prev.env's PREV_*_IMAGE_TAG
      pause)
        [ "$tag" = "$PAUSE_VERSION" ] ||
          "$it" build -o "$dir/pause.tar" -tag "$ref" -file "$OUT/bin/pause=/pause" -entrypoint /pause ;;
      *) die "kubeadm $PREV_KUBE_VERSION lists an image this build does not know: $ref" ;;
    esac
  done
  images_list > "$dir/kubeadm-images.txt"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Pushed into a real registry's filesystem storage, as build.sh does; serve.sh merges it with the main set's.
build_registry_storage() {
  local st=$OUT/registry port pid cfg=$OUT/.push-registry.yml
  rm -rf "$st"; mkdir -p "$st"
  port=$(free_port)
  printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' \
    "$st" "$port" > "$cfg"
  "$MAIN_BIN/registry" serve "$cfg" > "$OUT/.push-registry.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    curl -fsS -o /dev/null "http://127.0.0.1:$port/v2/" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { cat "$OUT/.push-registry.log" >&2; die "registry exited"; }
    sleep 0.2
  done
  if ! "$MAIN_BIN/imgtool" push -registry "127.0.0.1:$port" "$OUT"/images/*.tar; then
    kill "$pid"; wait "$pid" 2>/dev/null || true
    die "pushing the images failed (registry log: $OUT/.push-registry.log)"
  fi
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -f "$cfg"
}

# Only the kubernetes-release tree of this version: the other release files are the main set's.
build_mirror() {
  local d=$OUT/mirror/kubernetes-release/release/$PREV_KUBE_VERSION/bin/linux/$ARCH b
  rm -rf "$OUT/mirror"; mkdir -p "$d"
  for b in kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
    ln -f "$OUT/bin/$b" "$d/$b"
    sha256sum "$d/$b" | cut -c1-64 > "$d/$b.sha256" # bare digest, as dl.k8s.io
  done
}

PIECES="kube pause images registry-storage mirror"
# shellcheck disable=SC2048 # the pieces are words, and so are the arguments
for p in ${*:-$PIECES}; do
  case " $PIECES " in *" $p "*) ;; *) die "unknown piece $p (pieces: $PIECES)" ;; esac
  if [ "$p" != kube ]; then
    [ -x "$OUT/bin/kubeadm" ] || die "piece $p needs kubeadm: build the kube piece first"
    [ "$("$OUT/bin/kubeadm" version -o short)" = "$PREV_KUBE_VERSION" ] || die "kubeadm is not stamped $PREV_KUBE_VERSION"
    PAUSE_TAG=$(listed_tag pause)
    [ -n "$PAUSE_TAG" ] || die "kubeadm config images list printed no pause image"
  fi
  piece "$p" "build_${p//-/_}"
done
if [ $# -gt 0 ]; then
  log "partial run ($*) done; run without arguments to finish and publish prev.env"
  exit 0
fi

KUBEADM_ETCD_TAG=$(listed_tag etcd)
KUBEADM_DNS_TAG=$(listed_tag coredns/coredns)
{ [ -n "$KUBEADM_ETCD_TAG" ] && [ -n "$KUBEADM_DNS_TAG" ]; } || die "kubeadm $PREV_KUBE_VERSION lists no etcd or CoreDNS image"
[ "$KUBEADM_ETCD_TAG" = "$ETCD_IMAGE_TAG" ] ||
  log "kubeadm $PREV_KUBE_VERSION deploys etcd $KUBEADM_ETCD_TAG; served: $ETCD_IMAGE_TAG (set etcd.local.imageTag)"
[ "$KUBEADM_DNS_TAG" = "$COREDNS_VERSION" ] ||
  log "kubeadm $PREV_KUBE_VERSION deploys CoreDNS $KUBEADM_DNS_TAG; served: $COREDNS_VERSION (set dns.imageTag)"
cat > "$OUT/VERSIONS" <<EOF
kubernetes $PREV_KUBE_VERSION
pause $PAUSE_TAG
go $(go_version)
main-set $MAIN_DIR ($MAIN_KUBE_VERSION)
EOF
q() { printf '%q' "$1"; }
{
  echo "# Previous-minor node artifacts (test/vm/artifacts/build-prev.sh); source this file after current.env."
  echo "PREV_NODE_ARTIFACTS_DIR=$(q "$OUT")"
  echo "PREV_NODE_BIN_DIR=$(q "$OUT/bin")"
  echo "PREV_NODE_MIRROR_DIR=$(q "$OUT/mirror")"
  echo "PREV_NODE_REGISTRY_STORAGE=$(q "$OUT/registry")"
  echo "PREV_NODE_IMAGES_DIR=$(q "$OUT/images")"
  echo "PREV_MAIN_ARTIFACTS_DIR=$(q "$MAIN_DIR")"
  echo "PREV_KUBE_VERSION=$PREV_KUBE_VERSION"
  echo "# ClusterConfiguration etcd.local.imageTag and dns.imageTag of a $PREV_KUBE_VERSION cluster: the served tags."
  echo "PREV_ETCD_IMAGE_TAG=$ETCD_IMAGE_TAG"
  echo "PREV_DNS_IMAGE_TAG=$COREDNS_VERSION"
  echo "# What kubeadm $PREV_KUBE_VERSION would deploy without them (not served when they differ)."
  echo "PREV_KUBEADM_ETCD_IMAGE_TAG=$KUBEADM_ETCD_TAG"
  echo "PREV_KUBEADM_DNS_IMAGE_TAG=$KUBEADM_DNS_TAG"
  echo "PREV_PAUSE_VERSION=$PAUSE_TAG"
} > "$OUT/prev.env"
cp "$OUT/prev.env" "$ROOT/prev.env.tmp.$$" && mv -f "$ROOT/prev.env.tmp.$$" "$ROOT/prev.env"
touch "$OUT/.complete"
log "previous-minor node artifacts ready in $(( $(date +%s) - T0 ))s: $OUT (env: $ROOT/prev.env)"
