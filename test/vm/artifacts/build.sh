#!/usr/bin/env bash
# Builds the node artifacts for real-node tests (see README.md): Kubernetes node and control-plane binaries,
# containerd, runc, crictl, CNI plugins, CoreDNS, flannel, pause and a workload server from the Go modules pinned
# in tools/*/go.mod; container images made with go-containerregistry and pushed into a real registry's storage;
# the release-file tree `spec.component.host` expects, with upstream-style checksum files; and, through
# debian-repo.sh (a cache entry of its own), a flat Debian package repository for the repository service's apt runs.
#
# Output: $CAPKK_CACHE/node-artifacts/<hash of pins, scripts, tool sources, go version>/, plus
# $CAPKK_CACHE/node-artifacts/current.env describing it. Idempotent: each piece leaves a stamp and is skipped
# when present; a finished tree is reused as is. Per-piece times go to stderr and <dir>/build-times.txt.
#
# Needs: go, gcc + libseccomp-dev (runc with seccomp), dpkg-dev (dpkg-scanpackages), apt-get, curl, and
# the management plane's etcd (`make mgmt-bin`). As root, missing Debian build packages are installed.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
TOOLS=$HERE/tools
# The management plane's pins and binary directory: etcd is reused from there (same pin kubeadm deploys).
# shellcheck source=../../mgmt/scripts/common.sh
source "$REPO/test/mgmt/scripts/common.sh"
ETCD_BIN=$(asset_bin etcd) # $BIN_DIR/etcd, or envtest's when KUBEBUILDER_ASSETS holds one
log() { echo "node-artifacts: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Bump when the recipe changes in a way the hashed files do not show.
NODE_RECIPE=1
ARCH=amd64

modv() { # <tools subdir> <module path>: the pinned version
  awk -v m="$2" '($1 == m && $2 ~ /^v/) { print $2; exit } ($1 == "require" && $2 == m) { print $3; exit }' \
    "$TOOLS/$1/go.mod"
}
KUBE_VERSION=$(modv kube k8s.io/kubernetes)
CONTAINERD_VERSION=$(modv containerd github.com/containerd/containerd/v2) # v2.2.1 (tag spelling)
RUNC_VERSION=$(modv runc github.com/opencontainers/runc)
CRICTL_VERSION=$(modv crictl sigs.k8s.io/cri-tools)
CNI_VERSION=$(modv cni github.com/containernetworking/plugins)
COREDNS_VERSION=$(modv coredns github.com/coredns/coredns)
FLANNEL_VERSION=$(modv flannel github.com/flannel-io/flannel)
CNI_FLANNEL_VERSION=$(modv cni-flannel github.com/containernetworking/plugins) # the flannel CNI plugin's release
REGISTRY_VERSION=$(modv registry github.com/distribution/distribution/v3)
[ "$KUBE_VERSION" = "$(TOOLS_DIR=$REPO/test/mgmt/tools mod_version kube k8s.io/kubernetes)" ] ||
  die "tools/kube pins Kubernetes $KUBE_VERSION, test/mgmt/tools/kube another: keep them equal (shared build cache)"

# The Debian repository is a piece of its own (debian-repo.sh, cached apart: a package added to the repository
# service's lists must not rebuild the Go builds below); this set's hash does not cover its package lists.
# Image root filesystems: glibc for the cgo-linked Kubernetes/etcd binaries (the same build as the management
# plane, so Go's build cache is shared), Debian's iptables (nft backend) for kube-proxy and flanneld.
BASE_DEBS="libc6"
IPTABLES_DEBS="iptables libip4tc2 libip6tc2 libxtables12 libnftnl11 libmnl0 libnetfilter-conntrack3 libnfnetlink0"

# ---- prerequisites (fail naming what is missing; as root, install Debian build packages) ----
command -v go >/dev/null || die "go is required"
missing=()
command -v gcc >/dev/null || missing+=(gcc)
# Headers and static libraries (hack/deps.list checks commands and executables only, so they are checked here).
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || missing+=(libc6-dev)
[ -f /usr/include/seccomp.h ] && [ -f /usr/lib/x86_64-linux-gnu/libseccomp.a ] || missing+=(libseccomp-dev)
command -v dpkg-scanpackages >/dev/null || missing+=(dpkg-dev)
command -v curl >/dev/null || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing Debian build packages: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null; }
  else
    die "missing build prerequisites (Debian packages): ${missing[*]}"
  fi
fi
command -v apt-get >/dev/null || die "apt-get is required (the image root filesystems are made with apt-get download)"
[ -x "$ETCD_BIN" ] || die "etcd not built: run 'make mgmt-bin' first (expected $ETCD_BIN)"

# ---- content hash of everything that decides the output ----
inputs_hash() {
  {
    cd "$HERE"
    { echo build.sh; find tools -type f \( -name go.mod -o -name go.sum -o -name '*.go' \); } | LC_ALL=C sort |
      xargs sha256sum
    sha256sum "$REPO/test/mgmt/tools/etcd/go.mod" | cut -c1-64
    echo "base=$BASE_DEBS iptables=$IPTABLES_DEBS arch=$ARCH recipe=$NODE_RECIPE"
    go_version
  } | sha256sum | cut -c1-16
}
HASH=$(inputs_hash)
ROOT=$CAPKK_CACHE/node-artifacts
OUT=$ROOT/$HASH
mkdir -p "$OUT/.stamps" "$OUT/bin"
exec 9>"$OUT/.build.lock"
flock 9

T0=$(date +%s)
log "output: $OUT"
log "pins: kubernetes $KUBE_VERSION, containerd $CONTAINERD_VERSION, runc $RUNC_VERSION, crictl $CRICTL_VERSION," \
  "cni $CNI_VERSION, flannel $FLANNEL_VERSION (cni plugin $CNI_FLANNEL_VERSION), coredns $COREDNS_VERSION, etcd $ETCD_VERSION, registry $REGISTRY_VERSION, $(go_version)"
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

GOBUILD=(go build -trimpath)
k8s_ldflags() { # version stamping as Kubernetes' hack/lib/version.sh (and test/mgmt/scripts/build-bins.sh) do
  local v=$KUBE_VERSION major minor flags="-s -w" p
  major=${v#v}; major=${major%%.*}
  minor=${v#v*.}; minor=${minor%%.*}
  for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    flags+=" -X $p.gitVersion=$v -X $p.gitMajor=$major -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
    flags+=" -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$flags"
}

# One `go build` per module. The Kubernetes module selects exactly the dependency versions of
# test/mgmt/tools/kube and builds with the same flags and cgo setting, so the compile cache is shared with
# `make mgmt-bin` (kube-apiserver, kube-controller-manager and kubectl relink only).
build_kube() {
  (cd "$TOOLS/kube" && "${GOBUILD[@]}" -ldflags "$(k8s_ldflags)" -o "$OUT/bin/" tool)
}
build_etcd() {
  "$ETCD_BIN" --version | grep -q "etcd Version: ${ETCD_VERSION#v}$" ||
    die "$ETCD_BIN is not etcd $ETCD_VERSION (the version kubeadm deploys)"
  cp -f "$ETCD_BIN" "$OUT/bin/etcd.tmp" && mv -f "$OUT/bin/etcd.tmp" "$OUT/bin/etcd"
}
# containerd as upstream's release: containerd, ctr, containerd-shim-runc-v2, version-stamped. cgo off: only
# the btrfs snapshotter needs it, and the binaries then run on any glibc.
build_containerd() {
  local p=github.com/containerd/containerd/v2/version
  (cd "$TOOLS/containerd" && CGO_ENABLED=0 "${GOBUILD[@]}" \
    -ldflags "-s -w -X $p.Version=$CONTAINERD_VERSION -X $p.Revision=$CONTAINERD_VERSION -X $p.Package=github.com/containerd/containerd/v2" \
    -o "$OUT/bin/" tool)
}
# runc as upstream's `make static`: cgo (nsexec), seccomp via Debian's libseccomp.a, statically linked.
build_runc() {
  (cd "$TOOLS/runc" && CGO_ENABLED=1 "${GOBUILD[@]}" -tags "seccomp urfave_cli_no_docs netgo osusergo" \
    -ldflags "-s -w -X main.version=${RUNC_VERSION#v} -X main.gitCommit=$RUNC_VERSION -extldflags -static" \
    -o "$OUT/bin/" tool)
}
build_crictl() {
  (cd "$TOOLS/crictl" && CGO_ENABLED=0 "${GOBUILD[@]}" \
    -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" -o "$OUT/bin/" tool)
}
build_cni() {
  mkdir -p "$OUT/bin/cni"
  (cd "$TOOLS/cni" && CGO_ENABLED=0 "${GOBUILD[@]}" \
    -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_VERSION" \
    -o "$OUT/bin/cni/" tool)
}
# flanneld as upstream's `make dist/flanneld`: cgo (the udp backend's C proxy is compiled in on amd64) and
# statically linked, stamped like upstream (pkg/version.Version); netgo/osusergo as runc, so the static glibc
# never loads NSS modules. install_conf (the module's atomic copier) comes out of the same build. The flannel
# CNI plugin is pure Go, from its own module (tools/cni-flannel), stamped like tools/cni's plugins.
build_flannel() {
  local d=$OUT/bin/flannel st=$OUT/.flannel-build
  rm -rf "$st"; mkdir -p "$d" "$st"
  (cd "$TOOLS/flannel" && CGO_ENABLED=1 "${GOBUILD[@]}" -tags "netgo osusergo" \
    -ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$FLANNEL_VERSION -extldflags -static" \
    -o "$st/" tool)
  # `go build` names them after their packages: flannel (upstream's binary is flanneld) and install_conf
  # (upstream's image calls it install-conf).
  mv -f "$st/flannel" "$d/flanneld"
  mv -f "$st/install_conf" "$d/install-conf"
  rmdir "$st"
  (cd "$TOOLS/cni-flannel" && CGO_ENABLED=0 "${GOBUILD[@]}" \
    -ldflags "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$CNI_FLANNEL_VERSION" \
    -o "$d/" tool)
}
build_coredns() {
  (cd "$TOOLS/coredns" && CGO_ENABLED=0 "${GOBUILD[@]}" \
    -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=capkk-rs" -o "$OUT/bin/coredns" .)
}
build_registry() {
  local p=github.com/distribution/distribution/v3/version
  (cd "$TOOLS/registry" && CGO_ENABLED=0 "${GOBUILD[@]}" \
    -ldflags "-s -w -X $p.version=$REGISTRY_VERSION -X $p.revision=$REGISTRY_VERSION" -o "$OUT/bin/registry" .)
}
build_tools() { # imgtool (host side), pause and hello (image payloads, static)
  (cd "$TOOLS/images" && CGO_ENABLED=0 "${GOBUILD[@]}" -ldflags "-s -w -X main.version=$PAUSE_TAG" \
    -o "$OUT/bin/" ./imgtool ./pause ./hello)
}

# ---- Debian packages ----
apt_ready() {
  apt-cache show libc6 >/dev/null 2>&1 || { log "apt lists empty: apt-get update"; apt-get update -qq; }
}
download_debs() { # <dir> <packages...>
  local dir=$1; shift
  mkdir -p "$dir"
  # apt-get download fetches the candidate version into the current directory.
  (cd "$dir" && apt-get download -q "$@" >/dev/null 2>"$dir.apt.log") || { cat "$dir.apt.log" >&2; return 1; }
}
rootfs_from_debs() { # <dir> <packages...>: unpack .debs (no maintainer scripts) into a root filesystem
  local dir=$1 debs; shift
  rm -rf "$dir" "$dir.debs"
  download_debs "$dir.debs" "$@"
  mkdir -p "$dir"
  for debs in "$dir.debs"/*.deb; do dpkg-deb -x "$debs" "$dir"; done
  rm -rf "$dir.debs" "$dir/usr/share/doc" "$dir/usr/share/man" "$dir/usr/share/info" "$dir/usr/share/lintian" \
    "$dir/usr/share/locale"
}
build_rootfs() {
  apt_ready
  local base=$OUT/rootfs/base ipt=$OUT/rootfs/iptables t
  # shellcheck disable=SC2086
  rootfs_from_debs "$base" $BASE_DEBS
  mkdir -p "$base/etc" "$base/tmp" "$base/root" "$base/var/run"
  chmod 1777 "$base/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' \
    > "$base/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$base/etc/group"
  printf 'hosts: files dns\n' > "$base/etc/nsswitch.conf"
  # shellcheck disable=SC2086
  rootfs_from_debs "$ipt" $IPTABLES_DEBS
  # update-alternatives does not run when unpacking: point the plain names at the nft backend, as a
  # bookworm host does (the node's own iptables, used by reset, then sees the same rules).
  for t in iptables ip6tables; do
    for s in "" -save -restore; do ln -sf "$t-nft$s" "$ipt/usr/sbin/$t$s"; done
  done
  mkdir -p "$ipt/run"
}

# ---- images ----
# kubeadm decides the tags: the list it prints for the pinned version is what the cluster will pull.
images_list() {
  "$OUT/bin/kubeadm" config images list --kubernetes-version "$KUBE_VERSION" 2>/dev/null
}
build_images() {
  local dir=$OUT/images ref name tag it=$OUT/bin/imgtool base=$OUT/rootfs/base ipt=$OUT/rootfs/iptables
  rm -rf "$dir"; mkdir -p "$dir"
  for ref in $(images_list); do
    name=${ref#registry.k8s.io/}; name=${name%%:*}; tag=${ref##*:}
    case $name in
      kube-apiserver|kube-controller-manager|kube-scheduler)
        "$it" build -o "$dir/$name.tar" -tag "$ref" -layer-dir "$base" \
          -file "$OUT/bin/$name=/usr/local/bin/$name" -entrypoint "/usr/local/bin/$name" ;;
      kube-proxy)
        "$it" build -o "$dir/$name.tar" -tag "$ref" -layer-dir "$base" -layer-dir "$ipt" \
          -file "$OUT/bin/$name=/usr/local/bin/$name" -entrypoint "/usr/local/bin/$name" ;;
      etcd)
        [ "$tag" = "${ETCD_VERSION#v}-0" ] || die "kubeadm wants etcd $tag, the management plane pins $ETCD_VERSION"
        "$it" build -o "$dir/$name.tar" -tag "$ref" -layer-dir "$base" \
          -file "$OUT/bin/etcd=/usr/local/bin/etcd" -entrypoint /usr/local/bin/etcd ;;
      coredns/coredns)
        [ "$tag" = "$COREDNS_VERSION" ] || die "kubeadm wants CoreDNS $tag, tools/coredns pins $COREDNS_VERSION"
        # Also as <repo>/coredns: the path kubeadm uses when imageRepository is not registry.k8s.io.
        "$it" build -o "$dir/coredns.tar" -tag "$ref" -tag "registry.k8s.io/coredns:$tag" \
          -file "$OUT/bin/coredns=/coredns" -entrypoint /coredns ;;
      pause)
        [ "$tag" = "$PAUSE_TAG" ] || die "pause tag $tag differs from the one read before ($PAUSE_TAG)"
        "$it" build -o "$dir/pause.tar" -tag "$ref" -file "$OUT/bin/pause=/pause" -entrypoint /pause ;;
      *) die "kubeadm lists an image this build does not know: $ref" ;;
    esac
  done
  "$it" build -o "$dir/hello.tar" -tag "docker.io/$WORKLOAD_IMAGE" -file "$OUT/bin/hello=/hello" -entrypoint /hello
  # flannel: flanneld as upstream's image has it (/opt/bin/flanneld, the entrypoint), the CNI plugin and
  # install-conf for the DaemonSet's init containers, and Debian's iptables (flannel's default iptables mode
  # programs the masquerade and FORWARD rules with iptables/iptables-restore; the nftables cleanup it runs at
  # start tolerates a missing nft). The base layer only serves iptables' glibc: flanneld is static. Tagged with
  # upstream's name and as localhost:5000/flannel (a local registry's name; a bare "localhost/" would count as
  # a Docker Hub path): pushed as <registry>/flannel.
  "$it" build -o "$dir/flannel.tar" -tag "$FLANNEL_UPSTREAM_IMAGE" -tag "localhost:5000/$FLANNEL_IMAGE_PATH" \
    -layer-dir "$base" -layer-dir "$ipt" -file "$OUT/bin/flannel/flanneld=/opt/bin/flanneld" \
    -file "$OUT/bin/flannel/install-conf=/opt/bin/install-conf" -file "$OUT/bin/flannel/flannel=/flannel" \
    -entrypoint /opt/bin/flanneld
  images_list > "$dir/kubeadm-images.txt"
  echo "docker.io/$WORKLOAD_IMAGE" >> "$dir/kubeadm-images.txt"
  echo "$FLANNEL_UPSTREAM_IMAGE" >> "$dir/kubeadm-images.txt"
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Push into a real registry's filesystem storage (the same storage serve.sh serves read-only later).
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

# ---- the component.host tree ----
sha_bare() { sha256sum "$1" | cut -c1-64 > "$1.sha256"; }              # dl.k8s.io, crictl
sha_sum() { (cd "$(dirname "$1")" && sha256sum "$(basename "$1")" > "$2"); } # <file> <checksum file>
tarball() { # <out.tar.gz> <dir> <entries...>: deterministic archive
  local out=$1 dir=$2; shift 2
  tar -C "$dir" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - "$@" | gzip -n > "$out"
}
build_mirror() {
  local m=$OUT/mirror d b stage=$OUT/.stage
  rm -rf "$m/kubernetes-release" "$m/containernetworking" "$m/cri-tools" "$m/containerd" "$m/opencontainers" "$stage"
  d=$m/kubernetes-release/release/$KUBE_VERSION/bin/linux/$ARCH
  mkdir -p "$d"
  for b in kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
    ln -f "$OUT/bin/$b" "$d/$b" && sha_bare "$d/$b" # hard link: same bytes, no copy
  done
  d=$m/containernetworking/plugins/releases/download/$CNI_VERSION
  mkdir -p "$d"
  tarball "$d/cni-plugins-linux-$ARCH-$CNI_VERSION.tgz" "$OUT/bin/cni" ./bridge ./host-local ./loopback ./portmap
  sha_sum "$d/cni-plugins-linux-$ARCH-$CNI_VERSION.tgz" "cni-plugins-linux-$ARCH-$CNI_VERSION.tgz.sha256"
  d=$m/cri-tools/releases/download/$CRICTL_VERSION
  mkdir -p "$d"
  tarball "$d/crictl-$CRICTL_VERSION-linux-$ARCH.tar.gz" "$OUT/bin" crictl
  sha_bare "$d/crictl-$CRICTL_VERSION-linux-$ARCH.tar.gz"
  d=$m/containerd/containerd/releases/download/$CONTAINERD_VERSION
  mkdir -p "$d" "$stage/bin"
  cp "$OUT/bin/containerd" "$OUT/bin/ctr" "$OUT/bin/containerd-shim-runc-v2" "$stage/bin/"
  b=containerd-${CONTAINERD_VERSION#v}-linux-$ARCH.tar.gz
  tarball "$d/$b" "$stage" bin/containerd bin/containerd-shim-runc-v2 bin/ctr
  sha_sum "$d/$b" "$b.sha256sum"
  d=$m/opencontainers/runc/releases/download/$RUNC_VERSION
  mkdir -p "$d"
  ln -f "$OUT/bin/runc" "$d/runc.$ARCH"
  sha_sum "$d/runc.$ARCH" runc.sha256sum
  rm -rf "$stage"
}

WORKLOAD_IMAGE=capkk/hello:v1
# The flannel image: upstream's name (the template's FLANNEL_IMAGE default) and its path in the node registry.
FLANNEL_UPSTREAM_IMAGE=ghcr.io/flannel-io/flannel:$FLANNEL_VERSION
FLANNEL_IMAGE_PATH=flannel:$FLANNEL_VERSION
PIECES="kube etcd containerd runc crictl cni flannel coredns registry rootfs tools images registry-storage mirror"
# `build.sh PIECE...` runs only those pieces (development); no argument runs all and publishes current.env.
# shellcheck disable=SC2048 # the pieces are words, and so are the arguments
for p in ${*:-$PIECES}; do
  case " $PIECES " in *" $p "*) ;; *) die "unknown piece $p (pieces: $PIECES)" ;; esac
  if [ "$p" = tools ] || [ "$p" = images ]; then
    [ -x "$OUT/bin/kubeadm" ] || die "piece $p needs kubeadm: build the kube piece first"
    [ "$("$OUT/bin/kubeadm" version -o short)" = "$KUBE_VERSION" ] || die "kubeadm is not stamped $KUBE_VERSION"
    PAUSE_TAG=$(images_list | sed -n 's|^registry.k8s.io/pause:||p')
    [ -n "$PAUSE_TAG" ] || die "kubeadm config images list printed no pause image"
  fi
  piece "$p" "build_${p//-/_}"
done
if [ $# -gt 0 ]; then
  log "partial run ($*) done; run without arguments to finish and publish current.env"
  exit 0
fi
PAUSE_TAG=$(images_list | sed -n 's|^registry.k8s.io/pause:||p')
# The Debian repository (its own cache entry; debian-repo.sh prints its directory).
DEBIAN_DIR=$("$HERE/debian-repo.sh") || die "the Debian repository failed (debian-repo.sh)"
APT_PACKAGES=$(cat "$DEBIAN_DIR/packages.list")
cat > "$OUT/VERSIONS" <<EOF
kubernetes $KUBE_VERSION
etcd $ETCD_VERSION
containerd $CONTAINERD_VERSION
runc $RUNC_VERSION
crictl $CRICTL_VERSION
cni-plugins $CNI_VERSION
flannel $FLANNEL_VERSION
cni-plugin-flannel $CNI_FLANNEL_VERSION
coredns $COREDNS_VERSION
pause $PAUSE_TAG
distribution $REGISTRY_VERSION
go $(go_version)
debian $(cd "$DEBIAN_DIR" && printf '%s ' ./*.deb | sed 's|\./||g')
EOF
q() { printf '%q' "$1"; }
{
  echo "# Node artifacts (test/vm/artifacts/build.sh); source this file."
  echo "NODE_ARTIFACTS_DIR=$(q "$OUT")"
  echo "NODE_BIN_DIR=$(q "$OUT/bin")"
  echo "NODE_MIRROR_DIR=$(q "$OUT/mirror")"
  # Served as the mirror's /debian (serve.sh); not inside NODE_MIRROR_DIR.
  echo "NODE_DEBIAN_DIR=$(q "$DEBIAN_DIR")"
  echo "NODE_REGISTRY_STORAGE=$(q "$OUT/registry")"
  echo "NODE_IMAGES_DIR=$(q "$OUT/images")"
  echo "KUBE_VERSION=$KUBE_VERSION"
  echo "ETCD_VERSION=$ETCD_VERSION"
  echo "ETCD_IMAGE_TAG=${ETCD_VERSION#v}-0"
  echo "CONTAINERD_VERSION=${CONTAINERD_VERSION#v}"
  echo "RUNC_VERSION=$RUNC_VERSION"
  echo "CRICTL_VERSION=$CRICTL_VERSION"
  echo "CNI_VERSION=$CNI_VERSION"
  echo "COREDNS_VERSION=$COREDNS_VERSION"
  echo "FLANNEL_VERSION=$FLANNEL_VERSION"
  echo "CNI_FLANNEL_VERSION=$CNI_FLANNEL_VERSION"
  # Not FLANNEL_IMAGE: that is the template's clusterctl variable (<registry>/$FLANNEL_IMAGE_PATH).
  echo "FLANNEL_IMAGE_PATH=$FLANNEL_IMAGE_PATH"
  echo "PAUSE_VERSION=$PAUSE_TAG"
  echo "WORKLOAD_IMAGE=$WORKLOAD_IMAGE"
  echo "NODE_APT_PACKAGES=$(q "$APT_PACKAGES")"
} > "$OUT/artifacts.env"
cp "$OUT/artifacts.env" "$ROOT/current.env.tmp.$$" && mv -f "$ROOT/current.env.tmp.$$" "$ROOT/current.env"
touch "$OUT/.complete"
log "all node artifacts ready in $(( $(date +%s) - T0 ))s: $OUT (env: $ROOT/current.env)"
