#!/usr/bin/env bash
# Checks that the node artifacts are what they claim (`make node-artifacts-test`):
#  - every binary reports the pinned version (kubeadm's version checks need the stamping);
#  - the component.host tree has every file at the path the catalogue builds, its checksum file in upstream's
#    format verifies, and the archives hold the layout the product extracts;
#  - served by serve.sh on 127.0.0.1: the registry (htpasswd auth) serves the manifest and blobs of every image
#    `kubeadm config images list` prints, refuses anonymous pulls and pushes; the mirror serves the files
#    byte-identical; real apt reads the Debian repository and offers every package the repository service
#    installs; the built containerd pulls images through a hosts.toml with Basic auth, and is refused without;
#  - each image's root filesystem runs its binary (chroot), kube-proxy's and flannel's have a working iptables,
#    flannel's install-conf copies the CNI plugin the way the DaemonSet's init container does;
#  - the previous Kubernetes minor's set (build-prev.sh, prev.env), served together with the main set
#    (serve.sh NODE_SERVE_PREV=1): its binaries stamped with its version, its kubernetes-release tree with checksum
#    files, and every image `kubeadm config images list` of that version prints for a ClusterConfiguration with
#    prev.env's etcd/CoreDNS image tags, served by the registry and pulled by containerd.
# `check.sh main` checks the main set only (no previous-minor set needed).
# No silent skip: a missing prerequisite fails and is named. Needs root (chroot), curl, python3, apt-get.
set -uo pipefail

CAPKK_CACHE=${CAPKK_CACHE:-$HOME/.cache/capkk-rs}
ENV_FILE=${NODE_ARTIFACTS_ENV:-$CAPKK_CACHE/node-artifacts/current.env}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FAILS=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
die() { echo "FAIL $*"; exit 1; }
expect_eq() { # <what> <got> <want>
  if [ "$2" = "$3" ]; then ok "$1 = $3"; else bad "$1: got '$2', want '$3'"; fi
}
expect_has() { # <what> <haystack> <needle>
  case $2 in *"$3"*) ok "$1 contains '$3'" ;; *) bad "$1: '$3' not in: $(echo "$2" | head -3)" ;; esac
}

[ -f "$ENV_FILE" ] || die "prerequisite missing: $ENV_FILE (run 'make node-artifacts')"
# shellcheck disable=SC1090
source "$ENV_FILE"
[ -f "$NODE_ARTIFACTS_DIR/.complete" ] || die "prerequisite missing: a complete build in $NODE_ARTIFACTS_DIR"
SCOPE=${1:-all}
case $SCOPE in all|main) ;; *) die "usage: check.sh [all|main]" ;; esac
PREV=0
PREV_FILES=()
if [ "$SCOPE" = all ]; then
  PREV=1
  PREV_ENV_FILE=${NODE_PREV_ENV:-$CAPKK_CACHE/node-artifacts/prev.env}
  [ -f "$PREV_ENV_FILE" ] || die "prerequisite missing: $PREV_ENV_FILE (run 'make node-artifacts-prev', or 'check.sh main')"
  # shellcheck disable=SC1090
  source "$PREV_ENV_FILE"
  [ -f "$PREV_NODE_ARTIFACTS_DIR/.complete" ] || die "prerequisite missing: a complete build in $PREV_NODE_ARTIFACTS_DIR"
  [ "$PREV_MAIN_ARTIFACTS_DIR" = "$NODE_ARTIFACTS_DIR" ] ||
    die "prerequisite missing: $PREV_ENV_FILE is built against $PREV_MAIN_ARTIFACTS_DIR, not $NODE_ARTIFACTS_DIR (run 'make node-artifacts-prev')"
fi
for c in curl python3 sha256sum tar apt-get chroot ldd; do
  command -v "$c" >/dev/null || die "prerequisite missing: $c"
done
[ "$(id -u)" = 0 ] || die "prerequisite missing: root (the image checks chroot into the image file systems)"
B=$NODE_BIN_DIR
M=$NODE_MIRROR_DIR
TMP=$(mktemp -d /tmp/node-artifacts-check.XXXXXX)
STATE=$TMP/serve
cleanup() { "$HERE/serve.sh" stop "$STATE" >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT

echo "== versions"
expect_eq "kubeadm version -o short" "$("$B/kubeadm" version -o short 2>&1)" "$KUBE_VERSION"
for b in kubelet kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
  expect_eq "$b --version" "$("$B/$b" --version 2>&1)" "Kubernetes $KUBE_VERSION"
done
expect_has "kubectl version --client" "$("$B/kubectl" version --client 2>&1)" "Client Version: $KUBE_VERSION"
expect_has "etcd --version" "$("$B/etcd" --version 2>&1)" "etcd Version: ${ETCD_VERSION#v}"
expect_has "containerd --version" "$("$B/containerd" --version 2>&1)" " v$CONTAINERD_VERSION "
expect_has "ctr --version" "$("$B/ctr" --version 2>&1)" "v$CONTAINERD_VERSION"
expect_has "containerd-shim-runc-v2 -v" "$("$B/containerd-shim-runc-v2" -v 2>&1)" "v$CONTAINERD_VERSION"
runc_v=$("$B/runc" --version 2>&1)
expect_has "runc --version" "$runc_v" "runc version ${RUNC_VERSION#v}"
expect_has "runc --version (seccomp support)" "$runc_v" "libseccomp: 2."
expect_has "ldd runc (static like upstream's runc.amd64)" "$(ldd "$B/runc" 2>&1)" "not a dynamic executable"
expect_eq "crictl --version" "$("$B/crictl" --version 2>&1)" "crictl version $CRICTL_VERSION"
for p in bridge host-local loopback portmap; do
  expect_has "CNI $p" "$("$B/cni/$p" 2>&1)" "CNI $p plugin $CNI_VERSION"
done
expect_eq "flanneld --version" "$("$B/flannel/flanneld" --version 2>&1)" "$FLANNEL_VERSION"
expect_has "ldd flanneld (static like upstream's)" "$(ldd "$B/flannel/flanneld" 2>&1)" "not a dynamic executable"
expect_has "CNI flannel" "$("$B/flannel/flannel" 2>&1)" "CNI flannel plugin $CNI_FLANNEL_VERSION"
expect_has "install-conf (no arguments)" "$("$B/flannel/install-conf" 2>&1)" "<src> <dest>"
expect_has "coredns -version" "$("$B/coredns" -version 2>&1)" "CoreDNS-${COREDNS_VERSION#v}"
coredns_plugins=$("$B/coredns" -plugins 2>&1)
for p in errors health ready kubernetes prometheus forward cache loop reload loadbalance; do
  if grep -qx "$p" <<< "$coredns_plugins"; then ok "coredns has plugin $p (kubeadm's Corefile)"
  else bad "coredns lacks plugin $p (kubeadm's Corefile uses it)"; fi
done
expect_eq "pause -v" "$("$B/pause" -v 2>&1)" "pause $PAUSE_VERSION"
if [ "$PREV" = 1 ]; then
  PB=$PREV_NODE_BIN_DIR
  expect_eq "previous minor: kubeadm version -o short" "$("$PB/kubeadm" version -o short 2>&1)" "$PREV_KUBE_VERSION"
  for b in kubelet kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
    expect_eq "previous minor: $b --version" "$("$PB/$b" --version 2>&1)" "Kubernetes $PREV_KUBE_VERSION"
  done
  expect_has "previous minor: kubectl version --client" "$("$PB/kubectl" version --client 2>&1)" \
    "Client Version: $PREV_KUBE_VERSION"
  if [ "$PREV_PAUSE_VERSION" != "$PAUSE_VERSION" ]; then
    expect_eq "previous minor: pause -v" "$("$PB/pause" -v 2>&1)" "pause $PREV_PAUSE_VERSION"
  fi
fi

echo "== the component defaults of the set's Kubernetes version (pkg/service/src/components.rs)"
# A cluster that names no component versions gets the table's row for its Kubernetes minor: the set must serve
# exactly that. (The Go pins are checked by the unit test node_artifacts_build_the_defaults_of_their_kubernetes_minor;
# here the built set itself, pause included, whose tag comes from kubeadm's image list.)
if defaults=$("$HERE/defaults.sh" "$KUBE_VERSION"); then
  eval "$defaults"
  expect_eq "containerd served = default for $KUBE_VERSION" "$CONTAINERD_VERSION" "$DEFAULT_CONTAINERD"
  expect_eq "runc served = default for $KUBE_VERSION" "$RUNC_VERSION" "$DEFAULT_RUNC"
  expect_eq "crictl served = default for $KUBE_VERSION" "$CRICTL_VERSION" "$DEFAULT_CRICTL"
  expect_eq "pause served = default for $KUBE_VERSION (kubeadm's tag)" "$PAUSE_VERSION" "$DEFAULT_PAUSE"
else
  bad "Kubernetes $KUBE_VERSION of the node artifacts has no component defaults"
fi
if [ "$PREV" = 1 ]; then
  if defaults=$("$HERE/defaults.sh" "$PREV_KUBE_VERSION"); then
    eval "$defaults"
    expect_eq "previous minor: containerd served = default for $PREV_KUBE_VERSION" "$CONTAINERD_VERSION" "$DEFAULT_CONTAINERD"
    expect_eq "previous minor: runc served = default for $PREV_KUBE_VERSION" "$RUNC_VERSION" "$DEFAULT_RUNC"
    expect_eq "previous minor: pause served = default for $PREV_KUBE_VERSION" "$PREV_PAUSE_VERSION" "$DEFAULT_PAUSE"
    # The one known gap (components.rs PREV_SET_GAPS): cri-tools v1.35.0 is not served by the Go module proxy.
    echo "note previous minor: crictl served is the main set's $CRICTL_VERSION, the default for $PREV_KUBE_VERSION is $DEFAULT_CRICTL"
  else
    bad "Kubernetes $PREV_KUBE_VERSION of the previous set has no component defaults"
  fi
fi

echo "== component.host tree ($M)"
a=amd64
k=kubernetes-release/release/$KUBE_VERSION/bin/linux/$a
cni=containernetworking/plugins/releases/download/$CNI_VERSION/cni-plugins-linux-$a-$CNI_VERSION.tgz
crictl=cri-tools/releases/download/$CRICTL_VERSION/crictl-$CRICTL_VERSION-linux-$a.tar.gz
ctd=containerd/containerd/releases/download/v$CONTAINERD_VERSION/containerd-$CONTAINERD_VERSION-linux-$a.tar.gz
runc=opencontainers/runc/releases/download/$RUNC_VERSION/runc.$a
# <file> <checksum file> <format: bare|sum>
CHECKS=(
  "$k/kubeadm $k/kubeadm.sha256 bare" "$k/kubelet $k/kubelet.sha256 bare" "$k/kubectl $k/kubectl.sha256 bare"
  "$cni $cni.sha256 sum" "$crictl $crictl.sha256 bare" "$ctd $ctd.sha256sum sum"
  "$runc $(dirname "$runc")/runc.sha256sum sum"
)
if [ "$PREV" = 1 ]; then
  # Its own tree; served merged with the main one (checked below through the mirror).
  M_PREV=$PREV_NODE_MIRROR_DIR
  pk=kubernetes-release/release/$PREV_KUBE_VERSION/bin/linux/$a
  for b in kubeadm kubelet kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
    [ -f "$M_PREV/$pk/$b" ] || { bad "missing $pk/$b in $M_PREV"; continue; }
    expect_eq "$pk/$b is the previous minor's $b" "$(sha256sum < "$M_PREV/$pk/$b" | cut -c1-64)" \
      "$(sha256sum < "$PREV_NODE_BIN_DIR/$b" | cut -c1-64)"
    expect_eq "$pk/$b.sha256 (bare digest, as upstream)" "$(cat "$M_PREV/$pk/$b.sha256" 2>&1)" \
      "$(sha256sum < "$M_PREV/$pk/$b" | cut -c1-64)"
    PREV_FILES+=("$pk/$b" "$pk/$b.sha256")
  done
fi
for c in "${CHECKS[@]}"; do
  read -r f s fmt <<< "$c"
  [ -f "$M/$f" ] || { bad "missing $f"; continue; }
  [ -f "$M/$s" ] || { bad "missing $s"; continue; }
  if [ "$fmt" = bare ]; then
    expect_eq "$s (bare digest, as upstream)" "$(cat "$M/$s")" "$(sha256sum "$M/$f" | cut -c1-64)"
  elif out=$(cd "$(dirname "$M/$s")" && sha256sum --strict -c "$(basename "$s")" 2>&1); then
    ok "sha256sum -c $s: $out"
  else
    bad "sha256sum -c $s: $out"
  fi
done
expect_eq "containerd archive entries" "$(tar -tzf "$M/$ctd" | LC_ALL=C sort | tr '\n' ' ')" \
  "bin/containerd bin/containerd-shim-runc-v2 bin/ctr "
expect_eq "crictl archive entries" "$(tar -tzf "$M/$crictl" | tr '\n' ' ')" "crictl "
expect_eq "CNI archive entries" "$(tar -tzf "$M/$cni" | LC_ALL=C sort | tr '\n' ' ')" \
  "./bridge ./host-local ./loopback ./portmap "

echo "== served (registry with htpasswd auth, file mirror, apt)"
ports=$(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(" ".join(str(x.getsockname()[1]) for x in s))')
read -r mport rport <<< "$ports"
user=capkk pass=$(head -c 12 /dev/urandom | base64 | tr -d '/+=')
if ! NODE_SERVE_PREV=$PREV NODE_REGISTRY_USER=$user NODE_REGISTRY_PASSWORD=$pass \
  "$HERE/serve.sh" start "$STATE" 127.0.0.1 "$mport" "$rport"; then
  die "serve.sh start failed"
fi
R=http://127.0.0.1:$rport
expect_eq "anonymous GET /v2/" "$(curl -s -o /dev/null -w '%{http_code}' "$R/v2/")" 401
expect_eq "authenticated GET /v2/" "$(curl -s -o /dev/null -w '%{http_code}' -u "$user:$pass" "$R/v2/")" 200
if grep -q "$pass" "$STATE"/* 2>/dev/null; then bad "the registry password is stored in $STATE"; else
  ok "only the bcrypt hash is stored ($(stat -c %a "$STATE/htpasswd") $STATE/htpasswd)"; fi
ACCEPT='application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.oci.image.index.v1+json'
images=$("$B/kubeadm" config images list --kubernetes-version "$KUBE_VERSION" 2>/dev/null)
[ "$(echo "$images" | wc -l)" -ge 7 ] || bad "kubeadm config images list printed: $images"
if [ "$PREV" = 1 ]; then
  # The images a previous-minor cluster pulls: kubeadm of that version renders them from a ClusterConfiguration
  # with prev.env's etcd/CoreDNS tags and the private registry (the fields its KubeadmControlPlane sets).
  cat > "$TMP/prev-kubeadm.yaml" <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $PREV_KUBE_VERSION
imageRepository: 127.0.0.1:$rport
etcd:
  local:
    imageTag: $PREV_ETCD_IMAGE_TAG
dns:
  imageTag: $PREV_DNS_IMAGE_TAG
EOF
  prev_images=$("$PREV_NODE_BIN_DIR/kubeadm" config images list --config "$TMP/prev-kubeadm.yaml" 2>&1)
  [ "$(echo "$prev_images" | wc -l)" -ge 7 ] || bad "previous minor: kubeadm config images list printed: $prev_images"
  for want in "kube-apiserver:$PREV_KUBE_VERSION" "kube-proxy:$PREV_KUBE_VERSION" "pause:$PREV_PAUSE_VERSION" \
    "etcd:$PREV_ETCD_IMAGE_TAG" "coredns:$PREV_DNS_IMAGE_TAG"; do
    expect_has "previous minor: kubeadm $PREV_KUBE_VERSION images (etcd.local.imageTag, dns.imageTag set)" \
      "$prev_images" "127.0.0.1:$rport/$want"
  done
  images="$images $prev_images"
fi
for ref in $images "registry.k8s.io/coredns:$COREDNS_VERSION" "docker.io/$WORKLOAD_IMAGE" \
  "ghcr.io/flannel-io/flannel:$FLANNEL_VERSION" "localhost:5000/$FLANNEL_IMAGE_PATH"; do
  repo=${ref#*/}; tag=${repo##*:}; repo=${repo%:*}
  body=$(curl -s -u "$user:$pass" -H "Accept: $ACCEPT" -w '\n%{http_code}' "$R/v2/$repo/manifests/$tag")
  code=${body##*$'\n'}; body=${body%$'\n'*}
  if [ "$code" != 200 ]; then bad "GET /v2/$repo/manifests/$tag: HTTP $code"; continue; fi
  blobs=$(python3 -c 'import json,sys; m=json.load(sys.stdin); print(" ".join([m["config"]["digest"]]+[l["digest"] for l in m["layers"]]))' <<< "$body")
  n=0
  for d in $blobs; do
    c=$(curl -s -o /dev/null -I -w '%{http_code}' -u "$user:$pass" "$R/v2/$repo/blobs/$d")
    [ "$c" = 200 ] || { bad "HEAD /v2/$repo/blobs/$d: HTTP $c"; n=-1; break; }
    n=$((n + 1))
  done
  [ $n -gt 1 ] && ok "registry serves $repo:$tag (manifest + $n blobs) for $ref"
  expect_eq "anonymous GET /v2/$repo/manifests/$tag" \
    "$(curl -s -o /dev/null -w '%{http_code}' -H "Accept: $ACCEPT" "$R/v2/$repo/manifests/$tag")" 401
done
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -u "$user:$pass" "$R/v2/capkk/scratch/blobs/uploads/")
case $code in 202) bad "the registry accepted an upload (it must serve the cache read-only)" ;;
  *) ok "uploads refused (HTTP $code): the cached storage stays read-only" ;; esac
MU=http://127.0.0.1:$mport
for c in "${CHECKS[@]}"; do
  read -r f s _ <<< "$c"
  expect_eq "mirror GET /$f" "$(curl -fs "$MU/$f" | sha256sum | cut -c1-64)" "$(sha256sum "$M/$f" | cut -c1-64)"
  expect_eq "mirror GET /$s" "$(curl -fs "$MU/$s" | sha256sum | cut -c1-64)" "$(sha256sum "$M/$s" | cut -c1-64)"
done
for f in "${PREV_FILES[@]}"; do
  expect_eq "mirror GET /$f (previous minor)" "$(curl -fs "$MU/$f" | sha256sum | cut -c1-64)" \
    "$(sha256sum < "$M_PREV/$f" | cut -c1-64)"
done
# Real apt against the served repository, in a private state directory (the machine's apt is untouched).
A=$TMP/apt
mkdir -p "$A/lists/partial" "$A/cache/archives/partial" "$A/parts" "$A/prefs"
echo "deb [trusted=yes] $MU/debian ./" > "$A/sources.list"
APT=(-o Dir::State::Lists="$A/lists" -o Dir::Cache="$A/cache" -o Dir::Etc::SourceList="$A/sources.list"
     -o Dir::Etc::SourceParts="$A/parts" -o Dir::Etc::PreferencesParts="$A/prefs" -o APT::Sandbox::User=root)
if out=$(apt-get "${APT[@]}" update 2>&1); then ok "apt-get update against $MU/debian"; else bad "apt-get update: $out"; fi
for p in $NODE_APT_PACKAGES; do
  expect_has "apt-cache policy $p" "$(apt-cache "${APT[@]}" policy "$p" 2>&1)" "$MU/debian ./ Packages"
done
# shellcheck disable=SC2086 # one word per package
if out=$(apt-get "${APT[@]}" install --simulate --no-install-recommends $NODE_APT_PACKAGES 2>&1); then
  ok "apt-get install --simulate $NODE_APT_PACKAGES resolves from the repository"
else
  bad "apt-get install --simulate: $(echo "$out" | tail -5)"
fi
# The built containerd pulls through the registry the way a node does: containerd's config in the product's
# format (version 2, pkg/service/src/containermanager.rs config_toml) and a hosts.toml like the one
# containermanager writes for a private registry over plain HTTP with Basic auth (an Authorization header).
C=$TMP/containerd
REG=127.0.0.1:$rport
mkdir -p "$C/certs.d/$REG"
cat > "$C/config.toml" <<EOF
version = 2
root = "$C/root"
state = "$C/state"

[grpc]
  address = "$C/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$REG/pause:$PAUSE_VERSION"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$C/certs.d"
EOF
hosts_toml() { # [auth header]
  printf 'server = "http://%s"\n\n[host."http://%s"]\n  capabilities = ["pull", "resolve", "push"]\n' "$REG" "$REG"
  [ -z "${1:-}" ] || printf '  [host."http://%s".header]\n    Authorization = "Basic %s"\n' "$REG" "$1"
}
hosts_toml "$(printf '%s:%s' "$user" "$pass" | base64 -w0)" > "$C/certs.d/$REG/hosts.toml"
"$B/containerd" --config "$C/config.toml" > "$C/containerd.log" 2>&1 &
cpid=$!
CRICTL=("$B/crictl" --runtime-endpoint "unix://$C/containerd.sock" --image-endpoint "unix://$C/containerd.sock" --timeout 60s)
for _ in $(seq 1 100); do "${CRICTL[@]}" version >/dev/null 2>&1 && break; sleep 0.3; done
pulls=("pause:$PAUSE_VERSION" "kube-proxy:$KUBE_VERSION" "$FLANNEL_IMAGE_PATH")
[ "$PREV" = 0 ] || pulls+=("pause:$PREV_PAUSE_VERSION" "kube-proxy:$PREV_KUBE_VERSION" "etcd:$PREV_ETCD_IMAGE_TAG")
for img in "${pulls[@]}"; do
  if out=$("${CRICTL[@]}" pull "$REG/$img" 2>&1); then ok "containerd $CONTAINERD_VERSION pulls $REG/$img (hosts.toml, Basic auth)"
  else bad "containerd could not pull $REG/$img: $out"; fi
done
hosts_toml > "$C/certs.d/$REG/hosts.toml"
if out=$("${CRICTL[@]}" pull "$REG/coredns:$COREDNS_VERSION" 2>&1); then bad "containerd pulled without credentials"
else expect_has "containerd without the Authorization header" "$out" "pull access denied"; fi
kill "$cpid"; wait "$cpid" 2>/dev/null
grep -o '/[^ ]*/containerd/root/[^ ]*' /proc/mounts 2>/dev/null | sort -r | xargs -r umount 2>/dev/null
"$HERE/serve.sh" stop "$STATE"
for n in mirror registry; do
  if [ -e "$STATE/$n.pid" ]; then bad "$n still has a pid file after stop"; else ok "$n stopped"; fi
done

echo "== images run (chroot into each image's layers)"
unpack() { # <image tar> <dir>
  local l
  mkdir -p "$2"
  for l in $(tar -xOf "$1" manifest.json | python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)[0]["Layers"]))'); do
    tar -xOf "$1" "$l" | tar -xz -C "$2"
  done
}
I=$NODE_IMAGES_DIR
run_in() { # <image name> <expected substring> <command...>
  local img=$1 want=$2 r=$TMP/rootfs-$1; shift 2
  unpack "$I/$img.tar" "$r"
  expect_has "image $img: $*" "$(chroot "$r" "$@" 2>&1)" "$want"
  rm -rf "$r"
}
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  run_in "$b" "Kubernetes $KUBE_VERSION" "/usr/local/bin/$b" --version
done
run_in kube-proxy "Kubernetes $KUBE_VERSION" /usr/local/bin/kube-proxy --version
run_in kube-proxy "(nf_tables)" /usr/sbin/iptables --version
run_in kube-proxy "(nf_tables)" /usr/sbin/ip6tables-restore --version
# flannel: flanneld and iptables as kube-proxy's; install-conf copies the CNI plugin into a directory the way
# the DaemonSet's init container does (same bytes, still executable).
F=$TMP/rootfs-flannel
unpack "$I/flannel.tar" "$F"
expect_eq "image flannel: /opt/bin/flanneld --version" "$(chroot "$F" /opt/bin/flanneld --version 2>&1)" "$FLANNEL_VERSION"
expect_has "image flannel: /usr/sbin/iptables --version" "$(chroot "$F" /usr/sbin/iptables --version 2>&1)" "(nf_tables)"
expect_has "image flannel: /usr/sbin/iptables-restore --version" \
  "$(chroot "$F" /usr/sbin/iptables-restore --version 2>&1)" "(nf_tables)"
expect_has "image flannel: /flannel" "$(chroot "$F" /flannel 2>&1)" "CNI flannel plugin $CNI_FLANNEL_VERSION"
mkdir -p "$F/host/opt/cni/bin"
if out=$(chroot "$F" /opt/bin/install-conf /flannel /host/opt/cni/bin/flannel 2>&1) &&
  [ -x "$F/host/opt/cni/bin/flannel" ] && cmp -s "$F/flannel" "$F/host/opt/cni/bin/flannel"; then
  ok "image flannel: install-conf /flannel /host/opt/cni/bin/flannel (same bytes, executable)"
else
  bad "image flannel: install-conf /flannel /host/opt/cni/bin/flannel: $out $(ls -l "$F/host/opt/cni/bin" 2>&1)"
fi
rm -rf "$F"
run_in etcd "etcd Version: ${ETCD_VERSION#v}" /usr/local/bin/etcd --version
run_in coredns "CoreDNS-${COREDNS_VERSION#v}" /coredns -version
run_in pause "pause $PAUSE_VERSION" /pause -v
if [ "$PREV" = 1 ]; then
  I=$PREV_NODE_IMAGES_DIR
  for b in kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
    run_in "$b" "Kubernetes $PREV_KUBE_VERSION" "/usr/local/bin/$b" --version
  done
  run_in kube-proxy "(nf_tables)" /usr/sbin/iptables --version
  [ "$PREV_PAUSE_VERSION" = "$PAUSE_VERSION" ] || run_in pause "pause $PREV_PAUSE_VERSION" /pause -v
  I=$NODE_IMAGES_DIR
fi
unpack "$I/hello.tar" "$TMP/hello"
if [ -x "$TMP/hello/hello" ]; then ok "image hello has /hello"; else bad "image hello lacks /hello"; fi

echo
if [ "$FAILS" -gt 0 ]; then echo "node artifacts: $FAILS check(s) failed"; exit 1; fi
echo "node artifacts: all checks passed ($NODE_ARTIFACTS_DIR${PREV_NODE_ARTIFACTS_DIR:+ and $PREV_NODE_ARTIFACTS_DIR})"
