#!/usr/bin/env bash
# Builds the images the [Conformance] tests run (docs/conformance.md has the table) from this machine's builds
# and Debian packages, into a registry storage that test/vm/artifacts/serve.sh serves beside the node images
# (NODE_REGISTRY_EXTRA_STORAGE). The tags are the ones the suite itself asks for (`e2e.test --list-images`):
# the build fails if an image the conformance tests need has no recipe here, and lists the ones it leaves out.
#
#   e2e-test-images/agnhost (both tags the suite names), kitten, nautilus   agnhost from tools/e2e on the
#        conformance base, laid out as upstream's image: /agnhost (entrypoint, CMD pause), /agnhost-2, /uploads,
#        porter's test certificate, /coredns (the node artifacts' CoreDNS), user 1000 in group 50000
#   e2e-test-images/busybox          Debian's busybox-static, every applet linked in /bin, sh its bash-static (CMD sh)
#   e2e-test-images/nginx (both)     the conformance base's nginx-light on port 80, logs to stdout/stderr
#   e2e-test-images/nonroot          the conformance base as user 1234
#   e2e-test-images/nonewprivs       nnp (tools/e2e) setuid root, CMD nnp
#   e2e-test-images/glibc-dns-testing  the conformance base (glibc, dig/nslookup) and /coredns
#   e2e-test-images/sample-apiserver k8s.io/sample-apiserver (tools/e2e), ENTRYPOINT /sample-apiserver
#   etcd, pause                      not built here: the node artifacts' registry serves the very tags asked for
#
# The conformance base is Debian (mmdebstrap minbase, the suite CAPKK_IMAGE_SUITE, default bookworm) with the
# tools upstream's agnhost image carries (dig, curl, nc, ip/ss, ipcs, iperf, bash) and nginx-light; each image
# is that base, `podman import`ed once (as hack/image-bases.sh makes the manager's runtime base), plus a layer of
# its own files and its entrypoint, command and user (buildah), saved and pushed with the node artifacts' imgtool
# into a real registry's storage: the base layer is stored and pulled once.
#
# Output: $CAPKK_CACHE/conformance/images-<hash>/{registry,images.txt,config.txt,not-built.txt} and
# $CAPKK_CACHE/conformance/images.env (CONFORMANCE_REGISTRY_STORAGE, CONFORMANCE_IMAGES_DIR).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=../mgmt/scripts/common.sh
source "$REPO/test/mgmt/scripts/common.sh" # CAPKK_CACHE
# shellcheck source=../lib/heartbeat.sh
source "$REPO/test/lib/heartbeat.sh"
log() { echo "conformance-images: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
NICE=${CONFORMANCE_NICE:-15}
SUITE=${CAPKK_IMAGE_SUITE:-bookworm}
MIRROR=${CAPKK_IMAGE_MIRROR:-http://deb.debian.org/debian}
read -ra PODMAN_CMD <<<"${PODMAN:-podman}"
IMAGES_RECIPE=1
# The conformance base: what upstream's agnhost image installs (bind-tools, curl, netcat-openbsd, iproute2,
# iperf, bash, util-linux-misc: their Debian names; wget and netstat, which alpine's busybox gave it),
# glibc-dns-testing's dnsutils, nginx for the nginx images.
BASE_PACKAGES="bind9-dnsutils curl wget netcat-openbsd iproute2 net-tools iperf procps ca-certificates nginx-light"

ROOT=$CAPKK_CACHE/conformance
missing=()
for tool in mmdebstrap "${PODMAN_CMD[0]}" apt-get dpkg-deb; do command -v "$tool" >/dev/null || missing+=("$tool"); done
[ ${#missing[@]} = 0 ] || die "missing: ${missing[*]} (make deps installs them)"
[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap, podman import of root-owned trees)"

# ---- the conformance base: a cache entry of its own (the hash of this function, the packages, suite, mirror) ----
build_base() {
  local t0
  [ ! -e "$BASE/.complete" ] || return 0
  rm -rf "$BASE"
  t0=$(date +%s)
  log "conformance base: mmdebstrap $SUITE minbase + $BASE_PACKAGES (nice $NICE) ..."
  heartbeat --log "$BASE.log" "conformance-images: base" nice -n "$NICE" \
    mmdebstrap --quiet --variant=minbase --include="${BASE_PACKAGES// /,}" \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --format=directory "$SUITE" "$BASE" "$MIRROR" ||
    { tail -n 20 "$BASE.log" >&2; die "mmdebstrap failed"; }
  rm -rf "$BASE"/var/cache/apt/* "$BASE"/var/lib/apt/lists/*
  # Device nodes are the runtime's business.
  find "$BASE/dev" -mindepth 1 -delete
  # nginx as the e2e images run it: port 80 only (a pod may have no IPv6), a page at /, logs to the container's.
  rm -f "$BASE/etc/nginx/sites-enabled/default"
  printf 'server {\n    listen 80 default_server;\n    root /usr/share/nginx/html;\n    index index.html;\n}\n' \
    > "$BASE/etc/nginx/conf.d/default.conf"
  mkdir -p "$BASE/usr/share/nginx/html"
  echo '<html><body><h1>Welcome to nginx!</h1></body></html>' > "$BASE/usr/share/nginx/html/index.html"
  ln -sf /dev/stdout "$BASE/var/log/nginx/access.log"
  ln -sf /dev/stderr "$BASE/var/log/nginx/error.log"
  touch "$BASE/.complete"
  log "conformance base: $(du -sh "$BASE" | cut -f1) in $(( $(date +%s) - t0 ))s (load $(cut -d' ' -f1-3 /proc/loadavg))"
}
BASE=$ROOT/base-$({ declare -f build_base; echo "$BASE_PACKAGES $SUITE $MIRROR"; } | sha256sum | cut -c1-16)
mkdir -p "$ROOT"
(
  flock 8
  build_base
) 8>"$BASE.lock"
# `build-images.sh base` builds only the base (it needs no suite: it can run while the suite builds).
[ "${1:-}" != base ] || { echo "$BASE"; exit 0; }
[ -s "$ROOT/suite.env" ] || die "the suite is not built: run 'make conformance-bin' first"
# shellcheck disable=SC1091
source "$ROOT/suite.env"
[ -e "$CONFORMANCE_SUITE_DIR/.complete" ] || die "$CONFORMANCE_SUITE_DIR is incomplete: run 'make conformance-bin'"
[ -s "$CAPKK_CACHE/node-artifacts/current.env" ] || die "no node artifacts: run 'make node-artifacts' first"
# shellcheck disable=SC1091
source "$CAPKK_CACHE/node-artifacts/current.env"

inputs_hash() {
  {
    cd "$HERE"
    sha256sum build-images.sh
    echo "suite=$CONFORMANCE_SUITE_DIR base=$BASE recipe=$IMAGES_RECIPE"
  } | sha256sum | cut -c1-16
}
HASH=$(inputs_hash)
OUT=$ROOT/images-$HASH
mkdir -p "$OUT"
exec 9>"$OUT/.build.lock"
flock 9
BIN=$CONFORMANCE_BIN_DIR
MODDIR=$(cd "$HERE/tools/e2e" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)

if [ ! -e "$OUT/.complete" ]; then
  T0=$(date +%s)
  log "output: $OUT; load $(cut -d' ' -f1-3 /proc/loadavg); free on /: $(df -h --output=avail / | tail -1 | tr -d ' ')"
  # What the suite asks for: the e2e framework's image manifest, as the binary prints it.
  "$BIN/e2e.test" --list-images 2>/dev/null | LC_ALL=C sort > "$OUT/list-images.txt"
  [ -s "$OUT/list-images.txt" ] || die "e2e.test --list-images printed nothing"
  want() { # <path in the manifest, e.g. e2e-test-images/agnhost>: every ref the suite names for it
    grep -E "^registry\.k8s\.io/$1:[^:/]+$" "$OUT/list-images.txt" || true
  }

  base=$BASE
  # ---- busybox: the static busybox from Debian, every applet as a link; sh is Debian's static bash ----
  # The specs run `sh -c env` and expect every variable of the container's environment, also those whose
  # names are no shell identifiers (envFrom prefixes such as `1-` or `$_-`, conformance since v1.34). Debian's
  # busybox ash (1.35, and trixie's 1.37 alike) drops such variables from the environment of what it runs, as
  # dash does; bash passes them on. The check below fails the build if `sh` loses them.
  bb=$OUT/rootfs/busybox
  rm -rf "$bb" "$bb.debs"; mkdir -p "$bb.debs" "$bb/bin" "$bb/etc" "$bb/tmp" "$bb/root"
  (cd "$bb.debs" && apt-get download -q busybox-static bash-static >/dev/null 2>&1) ||
    { apt-get update -qq && (cd "$bb.debs" && apt-get download -q busybox-static bash-static >/dev/null); }
  dpkg-deb -x "$bb.debs"/busybox-static_*.deb "$bb.debs/x"
  dpkg-deb -x "$bb.debs"/bash-static_*.deb "$bb.debs/x"
  cp "$bb.debs/x/bin/busybox" "$bb/bin/busybox"
  cp "$bb.debs/x/bin/bash-static" "$bb/bin/bash-static"
  rm -rf "$bb.debs"
  for a in $("$bb/bin/busybox" --list); do [ "$a" = busybox ] || ln -sf busybox "$bb/bin/$a"; done
  ln -sf bash-static "$bb/bin/sh"
  chmod 1777 "$bb/tmp"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' > "$bb/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$bb/etc/group"

  # ---- the images: the conformance base is one layer every image but busybox shares; each image adds its own
  # files as a second layer (buildah), so the registry and every node hold the base once ----
  rm -rf "$OUT/images" "$OUT/files"; mkdir -p "$OUT/images" "$OUT/files"
  : > "$OUT/images.txt"; : > "$OUT/config.txt"
  BASE_IMAGE=localhost/capkk-conformance/base:$HASH
  BB_IMAGE=localhost/capkk-conformance/busybox-base:$HASH
  tar -C "$base" --numeric-owner --exclude=./.complete -cf - . | "${PODMAN_CMD[@]}" import -q - "$BASE_IMAGE" >/dev/null
  tar -C "$bb" --numeric-owner -cf - . | "${PODMAN_CMD[@]}" import -q - "$BB_IMAGE" >/dev/null
  files() { # <name>: an empty tree for the image's own files
    rm -rf "$OUT/files/$1"; mkdir -p "$OUT/files/$1"; echo "$OUT/files/$1"
  }
  put() { # <tree> <src> <dst> [mode]: a file of this image
    mkdir -p "$(dirname "$1$3")"; cp "$2" "$1$3"; chmod "${4:-0755}" "$1$3"
  }
  runs() { # <root> <what> <command...>: the image's tree runs it (chroot), or the build fails naming it
    local dir=$1 what=$2
    shift 2
    chroot "$dir" "$@" > "$OUT/check.log" 2>&1 || { cat "$OUT/check.log" >&2; die "$what: '$*' fails in the image"; }
  }
  # image <from> <files tree> <path> <check...> -- <buildah config args...>: the files added onto <from>, the
  # check run in the result (chroot into buildah's mount), configured, committed and saved under every tag the
  # suite names.
  image() {
    local from=$1 tree=$2 path=$3 refs ref tag ctr mnt check=()
    shift 3
    while [ "$1" != -- ]; do check+=("$1"); shift; done
    shift
    refs=$(want "$path")
    [ -n "$refs" ] || die "the suite names no $path image (e2e.test --list-images): recipe out of date"
    ctr=$(buildah from --pull-never --quiet "$from")
    [ -z "$(ls -A "$tree")" ] || buildah add --quiet "$ctr" "$tree/" / >/dev/null
    mnt=$(buildah mount "$ctr")
    [ ${#check[@]} = 0 ] || runs "$mnt" "$path" "${check[@]}"
    buildah umount "$ctr" >/dev/null
    buildah config "$@" "$ctr"
    for ref in $refs; do
      buildah commit --quiet --rm=false "$ctr" "$ref" >/dev/null
      echo "$ref $("${PODMAN_CMD[@]}" image inspect --format \
        'entrypoint={{json .Config.Entrypoint}} cmd={{json .Config.Cmd}} user={{.Config.User}}' "$ref")" >> "$OUT/config.txt"
      tag=${ref##*:}
      "${PODMAN_CMD[@]}" save -q --format docker-archive -o "$OUT/images/${path//\//-}-$tag.tar" "$ref"
      "${PODMAN_CMD[@]}" rmi "$ref" >/dev/null
      echo "$ref" >> "$OUT/images.txt"
      log "built $ref"
    done
    buildah rm "$ctr" >/dev/null
    rm -rf "$tree"
  }
  agnhost_files() { # <name>: the agnhost layout (upstream's image) on the conformance base
    local t
    t=$(files "$1")
    put "$t" "$BIN/agnhost" /agnhost
    ln -s agnhost "$t/agnhost-2"
    mkdir -p "$t/uploads"
    put "$t" "$MODDIR/test/images/agnhost/porter/localhost.crt" /localhost.crt 0644
    put "$t" "$MODDIR/test/images/agnhost/porter/localhost.key" /localhost.key 0600
    put "$t" "$NODE_BIN_DIR/coredns" /coredns
    # The SupplementalGroups test's user and group defined in the image (uid 1000 in gid 50000).
    mkdir -p "$t/etc"
    { cat "$base/etc/passwd"; echo 'user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh'; } > "$t/etc/passwd"
    { cat "$base/etc/group"; printf 'user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n'; } > "$t/etc/group"
    echo "$t"
  }
  # shellcheck disable=SC2016 # expanded by the image's shell
  image "$BASE_IMAGE" "$(agnhost_files agnhost)" e2e-test-images/agnhost \
    /bin/sh -c '/agnhost --help >/dev/null && id user-defined-in-image && set -e && for c in dig nslookup curl wget nc ip ss ipcs iperf bash netstat; do command -v $c; done' \
    -- --entrypoint '["/agnhost"]' --cmd '["pause"]'
  for pic in kitten nautilus; do
    t=$(agnhost_files "$pic")
    put "$t" "$MODDIR/test/images/$pic/html/$pic.jpg" "/$pic.jpg" 0644
    put "$t" "$MODDIR/test/images/$pic/html/data.json" /data.json 0644
    image "$BASE_IMAGE" "$t" "e2e-test-images/$pic" /bin/sh -c "test -s /$pic.jpg && /agnhost --help >/dev/null" \
      -- --entrypoint '["/agnhost"]' --cmd '["test-webserver"]'
  done
  # shellcheck disable=SC2016 # expanded by the image's shell
  image "$BB_IMAGE" "$(files busybox)" e2e-test-images/busybox \
    /bin/env 'data-1=value-1' '1-data-1=value-1' /bin/sh -c 'set -e; for c in sh cat sleep wget nslookup hostname top ls id; do command -v $c; done; env | grep -qx data-1=value-1; env | grep -qx 1-data-1=value-1' -- --cmd '["sh"]'
  image "$BASE_IMAGE" "$(files nginx)" e2e-test-images/nginx nginx -t \
    -- --cmd '["nginx", "-g", "daemon off;"]' --stop-signal SIGQUIT
  # shellcheck disable=SC2016 # expanded by the image's shell
  image "$BASE_IMAGE" "$(files nonroot)" e2e-test-images/nonroot \
    chroot --userspec=1234:1234 / /bin/sh -c 'test "$(id -u)" = 1234' -- --user 1234 --cmd '["/bin/sh"]'
  t=$(files nonewprivs)
  put "$t" "$BIN/nonewprivs" /usr/local/bin/nnp 4755
  image "$BASE_IMAGE" "$t" e2e-test-images/nonewprivs test -u /usr/local/bin/nnp -a -x /usr/local/bin/nnp -- --cmd '["nnp"]'
  t=$(files glibc-dns-testing)
  put "$t" "$NODE_BIN_DIR/coredns" /coredns
  image "$BASE_IMAGE" "$t" e2e-test-images/glibc-dns-testing \
    /bin/sh -c 'getent passwd root && /coredns -version && command -v dig' -- --cmd '["/bin/sh"]'
  t=$(files sample-apiserver)
  put "$t" "$BIN/sample-apiserver" /sample-apiserver
  image "$BASE_IMAGE" "$t" e2e-test-images/sample-apiserver /sample-apiserver --help \
    -- --entrypoint '["/sample-apiserver"]'
  "${PODMAN_CMD[@]}" rmi "$BASE_IMAGE" "$BB_IMAGE" >/dev/null
  rm -rf "$OUT/files"
  # etcd and pause: the node artifacts serve exactly the tags the suite asks for (checked, not rebuilt).
  grep -E "^registry\.k8s\.io/(etcd|pause):" "$OUT/list-images.txt" | while read -r ref; do
    grep -qx "$ref" "$NODE_IMAGES_DIR/kubeadm-images.txt" ||
      die "the suite wants $ref, the node artifacts serve $(grep -E '/(etcd|pause):' "$NODE_IMAGES_DIR/kubeadm-images.txt" | tr '\n' ' ')"
    echo "$ref (node artifacts)" >> "$OUT/images.txt"
  done
  # Everything else the manifest names is left out (docs/conformance.md: which tests need which, and why).
  grep -vxFf <(sed 's/ (node artifacts)$//' "$OUT/images.txt") "$OUT/list-images.txt" > "$OUT/not-built.txt" || true

  # ---- into a registry's storage (as the node artifacts' build_registry_storage) ----
  st=$OUT/registry cfg=$OUT/.push-registry.yml
  rm -rf "$st"; mkdir -p "$st"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  printf 'version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: 127.0.0.1:%s\n' \
    "$st" "$port" > "$cfg"
  "$NODE_BIN_DIR/registry" serve "$cfg" > "$OUT/.push-registry.log" 2>&1 &
  rpid=$!
  for _ in $(seq 1 100); do
    curl -fsS -o /dev/null "http://127.0.0.1:$port/v2/" 2>/dev/null && break
    kill -0 "$rpid" 2>/dev/null || { cat "$OUT/.push-registry.log" >&2; die "registry exited"; }
    sleep 0.2
  done
  if ! "$NODE_BIN_DIR/imgtool" push -registry "127.0.0.1:$port" "$OUT"/images/*.tar 2>> "$OUT/push.log"; then
    kill "$rpid"; wait "$rpid" 2>/dev/null || true
    tail -n 5 "$OUT/push.log" >&2
    die "pushing the images failed (registry log: $OUT/.push-registry.log)"
  fi
  kill "$rpid"; wait "$rpid" 2>/dev/null || true
  rm -f "$cfg"
  # The registry storage is what is served; the tarballs and the busybox tree are not needed any more.
  rm -rf "$OUT/images" "$OUT/rootfs"
  echo "images $(( $(date +%s) - T0 ))s load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' '/')" >> "$OUT/build-times.txt"
  touch "$OUT/.complete"
  log "$(grep -c . "$OUT/images.txt") images ready in $(( $(date +%s) - T0 ))s ($(du -sh "$st" | cut -f1) registry storage);" \
    "$(grep -c . "$OUT/not-built.txt") of the manifest's images not built: $OUT/not-built.txt"
fi
q() { printf '%q' "$1"; }
{
  echo "# The conformance images (test/conformance/build-images.sh); source this file."
  echo "CONFORMANCE_IMAGES_DIR=$(q "$OUT")"
  echo "CONFORMANCE_REGISTRY_STORAGE=$(q "$OUT/registry")"
} > "$ROOT/images.env.tmp.$$"
mv -f "$ROOT/images.env.tmp.$$" "$ROOT/images.env"
echo "$OUT"
