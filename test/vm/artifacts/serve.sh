#!/usr/bin/env bash
# Serves the node artifacts the way users' mirrors do: the release-file tree (spec.component.host layout, with
# checksum files, plus the flat Debian repository of debian-repo.sh under /debian) over HTTP by the tests' file mirror
# (capkk-mirror of test/sandbox, from `make build`), and the images by a real OCI registry (distribution) over
# plain HTTP, optionally with htpasswd Basic auth.
#
#   serve.sh start <state-dir> <ip> [mirror-port=8080] [registry-port=5000]
#   serve.sh stop <state-dir>
#   serve.sh status <state-dir>
#
# Both servers bind <ip> only (a bridge address in 198.18.0.0/15, or 127.0.0.1 for host-side tests). With
# NODE_REGISTRY_USER and NODE_REGISTRY_PASSWORD set, the registry requires Basic auth (only the bcrypt hash is
# written, into <state-dir>/htpasswd, mode 0600). The registry runs in read-only mode on the prebuilt storage;
# with NODE_REGISTRY_PUSH=1 (auth required) it is writable instead, on the run's own copy of that storage in
# <state-dir>/registry-storage, so that a test can push an image it built (the manager's) without changing the cache.
# Reads $NODE_ARTIFACTS_ENV (default $CAPKK_CACHE/node-artifacts/current.env, written by build.sh). The mirror
# binary is $NODE_MIRROR_BIN (default: where `make build` puts it, ${CARGO_TARGET_DIR:-target}/debug/capkk-mirror),
# run from a copy in <state-dir>: a rebuild during a kept run cannot turn its executable into "(deleted)", which
# the stop and status checks would no longer recognise.
# Writes <state-dir>/serve.env: NODE_MIRROR_URL, NODE_REGISTRY, NODE_APT_SOURCE.
# NODE_REGISTRY_EXTRA_STORAGE (space-separated registry storages, e.g. $CLUSTERCTL_REGISTRY_STORAGE of
# test/clusterctl) adds their images to the same registry: merged by hard links in <state-dir>/registry-merged.
# NODE_SERVE_PREV=1 also serves the previous Kubernetes minor's set (build-prev.sh; $NODE_PREV_ENV, default
# $CAPKK_CACHE/node-artifacts/prev.env): its images in the same registry, its kubernetes-release tree in the same
# mirror (merged by hard links in <state-dir>/mirror-merged), so that one cluster can be upgraded between them.
set -euo pipefail

CAPKK_CACHE=${CAPKK_CACHE:-$HOME/.cache/capkk-rs}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
# Cargo's rule: a relative CARGO_TARGET_DIR is taken from make's directory, the repository root.
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$REPO/$TARGET_DIR
MIRROR_BIN=${NODE_MIRROR_BIN:-$TARGET_DIR/debug/capkk-mirror}
ENV_FILE=${NODE_ARTIFACTS_ENV:-$CAPKK_CACHE/node-artifacts/current.env}
PREV_ENV_FILE=${NODE_PREV_ENV:-$CAPKK_CACHE/node-artifacts/prev.env}
log() { echo "node-serve: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
usage() { die "usage: serve.sh start <state-dir> <ip> [mirror-port] [registry-port] | stop <state-dir> | status <state-dir>"; }

alive() { # <pid file> <binary>: the PID in the file runs that binary
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1")
  [ -d "/proc/$pid" ] && [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$2" ]
}

stop_one() { # <state-dir> <name>
  local pf=$1/$2.pid pid i
  [ -s "$pf" ] || return 0
  pid=$(cat "$pf")
  if [ -d "/proc/$pid" ] && [ -n "$(readlink "/proc/$pid/exe" 2>/dev/null)" ] \
     && [ "$(readlink "/proc/$pid/exe")" = "$(cat "$1/$2.exe" 2>/dev/null)" ]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    if [ -d "/proc/$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi
    log "$2: stopped (pid $pid)"
  fi
  rm -f "$pf" "$1/$2.exe"
}

cmd=${1:-}; state=${2:-}
{ [ -n "$cmd" ] && [ -n "$state" ]; } || usage
case $cmd in
  start)
    ip=${3:-}; mport=${4:-8080}; rport=${5:-5000}
    [ -n "$ip" ] || usage
    [ -f "$ENV_FILE" ] || die "no $ENV_FILE: run 'make node-artifacts' first"
    # shellcheck disable=SC1090
    source "$ENV_FILE"
    { [ -d "$NODE_REGISTRY_STORAGE" ] && [ -d "$NODE_MIRROR_DIR" ]; } || die "artifacts in $ENV_FILE are incomplete"
    [ -x "$MIRROR_BIN" ] || die "no mirror binary $MIRROR_BIN: run 'make build' first (or set NODE_MIRROR_BIN)"
    mkdir -p "$state"
    state=$(cd "$state" && pwd)
    stop_one "$state" mirror
    stop_one "$state" registry
    # The physical path: /proc/PID/exe, which the checks compare with, resolves symbolic links.
    mexe=$(cd "$state" && pwd -P)/capkk-mirror
    # Renamed into place: a mirror of an earlier run still executing the old copy keeps its own file.
    cp -f "$MIRROR_BIN" "$mexe.tmp" && mv -f "$mexe.tmp" "$mexe"
    extra=${NODE_REGISTRY_EXTRA_STORAGE:-}
    rm -rf "$state/mirror-merged" "$state/mirror-root"
    if [ "${NODE_SERVE_PREV:-0}" = 1 ]; then
      [ -f "$PREV_ENV_FILE" ] || die "NODE_SERVE_PREV=1 but no $PREV_ENV_FILE: run 'make node-artifacts-prev' first"
      # shellcheck disable=SC1090
      source "$PREV_ENV_FILE"
      [ "$PREV_MAIN_ARTIFACTS_DIR" = "$NODE_ARTIFACTS_DIR" ] ||
        die "$PREV_ENV_FILE was built against $PREV_MAIN_ARTIFACTS_DIR, not $NODE_ARTIFACTS_DIR: run 'make node-artifacts-prev'"
      [ -f "$PREV_NODE_ARTIFACTS_DIR/.complete" ] || die "the previous-minor set in $PREV_NODE_ARTIFACTS_DIR is incomplete"
      extra="$PREV_NODE_REGISTRY_STORAGE $extra"
      # Disjoint trees (each kubernetes-release/release/<version> belongs to one set): hard links, no copy.
      mkdir -p "$state/mirror-merged"
      for m in "$NODE_MIRROR_DIR" "$PREV_NODE_MIRROR_DIR"; do
        cp -aln "$m/." "$state/mirror-merged/" 2>/dev/null || cp -an "$m/." "$state/mirror-merged/"
      done
      NODE_MIRROR_DIR=$state/mirror-merged
    fi
    # The Debian repository is a cache entry of its own (debian-repo.sh): the mirror serves a root of symbolic
    # links, every entry of the release tree plus /debian, fixed for this run. A set built before the split
    # carries its repository in its mirror tree (no NODE_DEBIAN_DIR): served as it is.
    # Hosts of another Debian release (CAPKK_HOST_OS=debian13) get that release's packages: its own repository.
    if [ "${CAPKK_HOST_OS:-debian12}" != debian12 ]; then
      NODE_DEBIAN_DIR=$("$REPO/test/vm/artifacts/debian-repo.sh") || die "the Debian repository for CAPKK_HOST_OS=$CAPKK_HOST_OS failed (debian-repo.sh)"
    fi
    if [ -n "${NODE_DEBIAN_DIR:-}" ]; then
      [ -f "$NODE_DEBIAN_DIR/.complete" ] || die "the Debian repository $NODE_DEBIAN_DIR is incomplete ('make node-artifacts')"
      rm -rf "$state/mirror-root"
      mkdir -p "$state/mirror-root"
      for m in "$NODE_MIRROR_DIR"/*; do [ "${m##*/}" = debian ] || ln -s "$m" "$state/mirror-root/"; done
      ln -s "$NODE_DEBIAN_DIR" "$state/mirror-root/debian"
      NODE_MIRROR_DIR=$state/mirror-root
    fi
    # More image storages served by the same registry (e.g. what clusterctl init installs, test/clusterctl):
    # merged with the node images' into <state-dir>/registry-merged by hard links (no copy: served read-only).
    if [ -n "$extra" ]; then
      merged=$state/registry-merged
      rm -rf "$merged"; mkdir -p "$merged"
      for s in "$NODE_REGISTRY_STORAGE" $extra; do
        [ -d "$s/docker/registry/v2/repositories" ] || die "$s is not a registry storage"
        # -n: a blob both hold is the same content (named by its digest); the first copy stays.
        cp -aln "$s/." "$merged/" 2>/dev/null || cp -an "$s/." "$merged/"
      done
      NODE_REGISTRY_STORAGE=$merged
    fi
    auth=""
    if [ -n "${NODE_REGISTRY_USER:-}" ] || [ -n "${NODE_REGISTRY_PASSWORD:-}" ]; then
      { [ -n "${NODE_REGISTRY_USER:-}" ] && [ -n "${NODE_REGISTRY_PASSWORD:-}" ]; } ||
        die "set both NODE_REGISTRY_USER and NODE_REGISTRY_PASSWORD (or neither)"
      (umask 077 && "$NODE_BIN_DIR/imgtool" htpasswd -user "$NODE_REGISTRY_USER" > "$state/htpasswd")
      auth="auth:
  htpasswd:
    realm: capkk-node-registry
    path: $state/htpasswd"
    fi
    storage=$NODE_REGISTRY_STORAGE readonly=true
    if [ "${NODE_REGISTRY_PUSH:-0}" = 1 ]; then
      [ -n "$auth" ] || die "NODE_REGISTRY_PUSH=1 needs NODE_REGISTRY_USER and NODE_REGISTRY_PASSWORD (no anonymous pushes)"
      # A copy, not hard links: the registry rewrites link files in place, which would write through into the cache.
      rm -rf "$state/registry-storage"
      cp -a "$NODE_REGISTRY_STORAGE" "$state/registry-storage"
      storage=$state/registry-storage readonly=false
    fi
    cat > "$state/registry.yml" <<EOF
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $storage
  maintenance:
    uploadpurging:
      enabled: false
    readonly:
      enabled: $readonly
http:
  addr: $ip:$rport
$auth
EOF
    setsid "$NODE_BIN_DIR/registry" serve "$state/registry.yml" > "$state/registry.log" 2>&1 < /dev/null &
    echo $! > "$state/registry.pid"
    echo "$NODE_BIN_DIR/registry" > "$state/registry.exe"
    setsid "$mexe" --listen "$ip:$mport" --dir "$NODE_MIRROR_DIR" > "$state/mirror.log" 2>&1 < /dev/null &
    echo $! > "$state/mirror.pid"
    echo "$mexe" > "$state/mirror.exe"
    for i in $(seq 1 150); do
      r=$(curl -s -o /dev/null -w '%{http_code}' "http://$ip:$rport/v2/" || true)
      m=$(curl -s -o /dev/null -w '%{http_code}' "http://$ip:$mport/debian/Packages" || true)
      { [ "$r" = 200 ] || [ "$r" = 401 ]; } && [ "$m" = 200 ] && break
      if ! alive "$state/registry.pid" "$NODE_BIN_DIR/registry" || ! alive "$state/mirror.pid" "$mexe" \
         || [ "$i" = 150 ]; then
        tail -5 "$state/registry.log" "$state/mirror.log" >&2 || true
        "$0" stop "$state"
        die "the registry ($ip:$rport: $r) or the mirror ($ip:$mport: $m) did not come up"
      fi
      sleep 0.2
    done
    cat > "$state/serve.env" <<EOF
NODE_MIRROR_URL=http://$ip:$mport
NODE_REGISTRY=$ip:$rport
NODE_APT_SOURCE='deb [trusted=yes] http://$ip:$mport/debian ./'
EOF
    log "mirror http://$ip:$mport (pid $(cat "$state/mirror.pid")), registry $ip:$rport (pid $(cat "$state/registry.pid"))${auth:+, htpasswd auth}"
    ;;
  stop)
    [ -d "$state" ] || exit 0
    # Hard links only, served read-only: removed before the registry stops, no harm.
    rm -rf "$state/registry-merged" "$state/mirror-merged" "$state/mirror-root"
    stop_one "$state" mirror
    stop_one "$state" registry
    rm -rf "$state/serve.env" "$state/htpasswd" "$state/registry-storage" "$state/capkk-mirror"
    ;;
  status)
    for n in mirror registry; do
      if [ -s "$state/$n.pid" ] && alive "$state/$n.pid" "$(cat "$state/$n.exe" 2>/dev/null)"; then
        echo "$n: running (pid $(cat "$state/$n.pid"))"
      else
        echo "$n: stopped"
      fi
    done
    ;;
  *) usage ;;
esac
