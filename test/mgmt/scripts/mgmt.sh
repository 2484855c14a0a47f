#!/usr/bin/env bash
# mgmt.sh up|down|status|kubeconfig - the local CAPI management plane (see ../README.md).
#   up          start (or reuse) etcd, kube-apiserver and the CAPI managers; idempotent
#   down        stop only the processes up started (pidfiles in $CAPKK_MGMT_DIR/run) and wipe the state
#   status      show the processes and whether everything answers (exit 1 if not)
#   kubeconfig  print the kubeconfig path
#   bin-dir     print the directory of the pinned binaries (kubectl, clusterctl, ...)
#   flux-dir    print the directory of the pinned Flux controllers and their CRDs (make flux-bin)
#   operator-dir  print the directory of the pinned Cluster API Operator and its CRDs (make operator-bin)
#   env         print `export KUBECONFIG=... PATH=<bin-dir>:$PATH` for eval
#   runtime-extension --out DIR --url https://HOST:PORT [--namespace NS] [--name NAME]
#               write a CA, a serving cert for HOST (DIR/tls.{crt,key}: the manager's
#               --runtime-extension-cert-dir) and DIR/extensionconfig.yaml registering the manager's
#               in-place update hooks with CAPI (docs/upgrades.md)
# Set CAPKK_MGMT_AUTOBUILD=1 to let `up` build missing binaries (slow when the Go cache is cold).
# A second, independent plane: CAPKK_MGMT_DIR=<other dir> CAPKK_MGMT_PORT_OFFSET=<n> (ports shift by n);
# `up --bare` starts one without CAPI (etcd, kube-apiserver, kube-controller-manager with the deployment
# controllers), for a test that installs CAPI itself.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

cmd=${1:-}
shift || true

# mgmtctl is small; build it per source hash so concurrent callers never overwrite a running binary.
mgmtctl() {
  local src_hash out
  src_hash=$(cat "$MGMT_DIR"/mgmtctl/*.go "$MGMT_DIR"/mgmtctl/go.mod "$MGMT_DIR"/mgmtctl/go.sum | sha256sum | cut -c1-16)
  out=$CAPKK_CACHE/mgmtctl/$src_hash/mgmtctl
  if [ ! -x "$out" ]; then
    command -v go >/dev/null || { log "go is required to build mgmtctl"; exit 1; }
    mkdir -p "$(dirname "$out")"
    (cd "$MGMT_DIR/mgmtctl" && heartbeat "mgmt: go build mgmtctl" go build -trimpath -o "$out.tmp.$$" .)
    mv -f "$out.tmp.$$" "$out"
  fi
  echo "$out"
}

case "$cmd" in
  up)
    missing=()
    for b in $CAPI_BINS kube-controller-manager; do [ -x "$BIN_DIR/$b" ] || missing+=("$BIN_DIR/$b"); done
    for b in etcd kube-apiserver; do [ -x "$(asset_bin $b)" ] || missing+=("$(asset_bin $b)"); done
    [ -f "$BIN_DIR/capi-src/.complete" ] || missing+=("$BIN_DIR/capi-src")
    if [ ${#missing[@]} -gt 0 ]; then
      if [ "${CAPKK_MGMT_AUTOBUILD:-0}" = 1 ]; then
        "$MGMT_DIR/scripts/build-bins.sh"
      else
        log "management plane binaries missing: ${missing[*]}"
        log "build them with \`make mgmt-bin\` (or set CAPKK_MGMT_AUTOBUILD=1)"
        exit 1
      fi
    fi
    # The daemons outlive this command: they must not inherit the caller's descriptors, above all a lock held
    # by the caller (`flock /tmp/capkk-hosts.lock make test-integration` passes the lock's fd down; a plane
    # holding it keeps every later flock waiting for as long as the plane runs). 255 is bash's script fd.
    for fd in "/proc/$$/fd"/*; do
      fd=${fd##*/}
      case $fd in 0 | 1 | 2 | 255) ;; *) eval "exec $fd>&-" 2>/dev/null || true ;; esac
    done
    exec "$(mgmtctl)" up --state-dir "$CAPKK_MGMT_DIR" --bin-dir "$BIN_DIR" --capi-src "$BIN_DIR/capi-src" \
      --etcd "$(asset_bin etcd)" --kube-apiserver "$(asset_bin kube-apiserver)" \
      --port-offset "${CAPKK_MGMT_PORT_OFFSET:-0}" "$@"
    ;;
  down|status)
    exec "$(mgmtctl)" "$cmd" --state-dir "$CAPKK_MGMT_DIR" "$@"
    ;;
  runtime-extension)
    exec "$(mgmtctl)" runtime-extension "$@"
    ;;
  kubeconfig)
    echo "$CAPKK_MGMT_DIR/kubeconfig"
    ;;
  bin-dir)
    echo "$BIN_DIR"
    ;;
  flux-dir)
    echo "$FLUX_BIN_DIR"
    ;;
  operator-dir)
    echo "$OPERATOR_BIN_DIR"
    ;;
  env)
    # eval "$(test/mgmt/scripts/mgmt.sh env)": kubectl/clusterctl of the pinned versions + the plane's kubeconfig
    echo "export KUBECONFIG='$CAPKK_MGMT_DIR/kubeconfig' PATH='$BIN_DIR':\"\$PATH\""
    ;;
  *)
    echo "usage: $0 up|down|status|kubeconfig|bin-dir|flux-dir|operator-dir|env|runtime-extension" >&2
    exit 2
    ;;
esac
