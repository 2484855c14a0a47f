#!/usr/bin/env bash
# make glue for the fault campaign (test/chaos, docs/reliability.md): set up a cluster's world with the existing
# tiers' own stages, kept running, run `capkk-chaos` against it, tear it down.
#
#   test/chaos/chaos.sh containers   node containers with real kubeadm (test/vm/real.sh e2e, 1 control plane +
#                                    2 workers, kept at its applied cluster: REAL_KEEP=1 REAL_TO=render_apply)
#   test/chaos/chaos.sh sandbox      sandbox hosts with the kubeadm simulator (test/e2e/e2e.sh chaos)
#
# The campaign freezes the API server of its management plane, so it runs on a plane of its own:
# CAPKK_MGMT_DIR (default ~/.cache/capkk-rs/mgmt-chaos) and CAPKK_MGMT_PORT_OFFSET (default 40). CHAOS_NAME
# names the hosts, namespace and work dir (default chaos-<source>). CHAOS_SEED, CHAOS_FAULTS,
# CHAOS_MAX_FAULT_SECS, CHAOS_STEP_TIMEOUT, CHAOS_MAX_SECS, CHAOS_RSS_MAX_MIB, CHAOS_REPLICAS: see
# `capkk-chaos --help`.
# CHAOS_KEEP=1 leaves everything running at the end. The exit status is the campaign's.
# CHAOS_BIN: another capkk-chaos binary (default: the build's, $CARGO_TARGET_DIR/debug/capkk-chaos).
set -euo pipefail
SOURCE=${1:?usage: $0 containers|sandbox}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CAPKK_CACHE=${CAPKK_CACHE:-$HOME/.cache/capkk-rs}
export CAPKK_CACHE
export CAPKK_MGMT_DIR=${CAPKK_MGMT_DIR:-$CAPKK_CACHE/mgmt-chaos}
export CAPKK_MGMT_PORT_OFFSET=${CAPKK_MGMT_PORT_OFFSET:-40}
NAME=${CHAOS_NAME:-chaos-$SOURCE}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
[[ $TARGET_DIR == /* ]] || TARGET_DIR=$ROOT/$TARGET_DIR
say() { printf '[chaos %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

case $SOURCE in
  containers)
    WORK=$ROOT/target/real/$NAME
    setup() { REAL_NAME=$NAME REAL_KEEP=1 REAL_TO=render_apply REAL_WORKERS=2 REAL_CNI=flannel "$ROOT/test/vm/real.sh" e2e; }
    down() { REAL_NAME=$NAME "$ROOT/test/vm/real.sh" e2e-down; }
    ;;
  sandbox)
    WORK=$ROOT/target/e2e/$NAME
    setup() { E2E_NAME=$NAME "$ROOT/test/e2e/e2e.sh" chaos; }
    down() { E2E_NAME=$NAME "$ROOT/test/e2e/e2e.sh" down; }
    ;;
  *) echo "usage: $0 containers|sandbox" >&2; exit 2 ;;
esac

t0=$(date +%s)
# The manager replicas the campaign starts beside the setup's (WORK/manager-b.pid, ...): it stops them itself,
# unless it was killed; the setup's manager is the teardown's.
stop_replicas() {
  local pf pid
  for pf in "$WORK"/manager-?.pid; do
    [ -f "$pf" ] || continue
    pid=$(cat "$pf")
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = manager ]; then kill "$pid" 2>/dev/null || true; fi
    rm -f "$pf"
  done
}
# The host-claim Leases still held for the run's namespace once its teardown is done: a run interrupted
# mid-cycle is torn down with its finalizers dropped, so nothing released them, and the next campaign on this
# plane found them (no-claim-left-after-delete now ignores claims held before it began, and this removes them).
release_claims() {
  local ns name holder
  (
    eval "$("$ROOT/test/mgmt/scripts/mgmt.sh" env)"
    kubectl get leases -A -l infrastructure.cluster.x-k8s.io/host-claim --request-timeout=10s \
      -o jsonpath='{range .items[*]}{.metadata.namespace} {.metadata.name} {.spec.holderIdentity}{"\n"}{end}' |
      while read -r ns name holder; do
        case $holder in
          "capkk-$NAME/"*) kubectl delete lease -n "$ns" "$name" --request-timeout=10s ;;
        esac
      done
  ) || true
}
finish() {
  local rc=$?
  stop_replicas
  if [ "${CHAOS_KEEP:-0}" = 1 ]; then
    say "left running (CHAOS_KEEP=1); tear down: CHAOS_NAME=$NAME $0 $SOURCE with CHAOS_DOWN=1"
  else
    say "tearing down"
    down >"$WORK/chaos-down.log" 2>&1 || say "teardown failed: $WORK/chaos-down.log"
    release_claims >>"$WORK/chaos-down.log" 2>&1
  fi
  say "$SOURCE campaign: exit $rc after $(($(date +%s) - t0)) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
  exit "$rc"
}
if [ "${CHAOS_DOWN:-0}" = 1 ]; then stop_replicas; down; release_claims; exit 0; fi
# `make build` (cargo test --no-run) does not link a package's binary unless an integration test needs it:
# build the driver here, before anything starts, so a fresh clone runs it (unless CHAOS_BIN names another).
if [ -z "${CHAOS_BIN:-}" ]; then
  (cd "$ROOT" && ${CARGO:-cargo} build -q -p capkk-chaos --bin capkk-chaos)
fi
trap finish EXIT
say "setup ($SOURCE, name $NAME, plane $CAPKK_MGMT_DIR, port offset $CAPKK_MGMT_PORT_OFFSET)"
setup
say "setup done after $(($(date +%s) - t0)) s; the campaign starts"
eval "$("$ROOT/test/mgmt/scripts/mgmt.sh" env)"
"${CHAOS_BIN:-$TARGET_DIR/debug/capkk-chaos}" --work "$WORK" --namespace "capkk-$NAME" --cluster "$NAME" --hosts "$NAME" \
  --source "$SOURCE" --mgmt-dir "$CAPKK_MGMT_DIR" --report-dir "$WORK/chaos"
