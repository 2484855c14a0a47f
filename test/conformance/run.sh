#!/usr/bin/env bash
# Runs the upstream conformance suite (build-suite.sh, build-images.sh) against a capkk-rs cluster on node
# containers (docs/conformance.md):
#
#   test/conformance/run.sh smoke   make conformance-smoke: the cluster, then the [Conformance] specs that
#                                   smoke-focus.txt selects (pods, Services, DNS, ConfigMaps/Secrets, exec/logs)
#   test/conformance/run.sh full    make conformance: the cluster, then every [Conformance] spec: the parallel
#                                   ones on CONFORMANCE_PROCS ginkgo processes (4), then the [Serial] ones
#   test/conformance/run.sh down    tear the cluster down (a CONFORMANCE_KEEP=1 run's)
#
# The cluster is test/vm/real.sh's quickstart: the local management plane, our controllers, 1 control plane +
# CONFORMANCE_WORKERS (2) workers from the default template with the flannel flavor's ClusterResourceSet, the
# node artifacts and the conformance images served by the mirror and registry on the fleet's bridge. The suite
# runs on this machine against the workload cluster's API on the bridge, its images selected with
# KUBE_TEST_REPO_LIST. Kept: ginkgo's output, the JUnit report, report's summary (text and Markdown) in
# target/conformance/<name>/.
#
# CONFORMANCE_NAME   the run's name (REAL_NAME of the cluster; default conformance-smoke / conformance)
# CONFORMANCE_KEEP=1 leave the cluster running at the end (then: run.sh down)
# CONFORMANCE_FROM=tests  use the running cluster of a kept run of that name: only run the suite
# CONFORMANCE_FOCUS  one regular expression instead of the mode's selection (e.g. a failed spec's name)
# CONFORMANCE_TIMEOUT  ginkgo's --timeout (smoke 1h, full 6h)
#
# Starting hosts and a cluster is heavy: on a shared machine run it under the machine's lock, e.g.
# `flock /tmp/capkk-heavy.lock make conformance-smoke`.
set -euo pipefail

MODE=${1:-smoke}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CAPKK_CACHE=${CAPKK_CACHE:-$HOME/.cache/capkk-rs}
export CAPKK_CACHE
case $MODE in
  smoke) NAME=${CONFORMANCE_NAME:-conformance-smoke} ;;
  full) NAME=${CONFORMANCE_NAME:-conformance} ;;
  down) NAME=${CONFORMANCE_NAME:-conformance-smoke} ;;
  *) echo "usage: $0 smoke|full|down" >&2; exit 2 ;;
esac
WORKERS=${CONFORMANCE_WORKERS:-2}
FROM=${CONFORMANCE_FROM:-}
# A run on a kept cluster keeps it (unless told otherwise).
KEEP=${CONFORMANCE_KEEP:-$([ "$FROM" = tests ] && echo 1 || echo 0)}
OUT=$ROOT/target/conformance/$NAME
REAL_WORK=$ROOT/target/real/$NAME
log() { echo "conformance: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
# The fleet takes a second slot for the Services (CAPKK_VM_SERVICE_SLOT: a /24, where a slot's own leaves a /25):
# `Service endpoints latency should not be very high` creates 200 Services at once.
real() {
  REAL_NAME=$NAME HOSTS=containers REAL_CNI=flannel REAL_WORKERS=$WORKERS CAPKK_VM_SERVICE_SLOT=1 \
    "$ROOT/test/vm/real.sh" "$@"
}

if [ "$MODE" = down ]; then
  real quickstart-down
  exit 0
fi

# ---- what the run needs (no silent skip: each missing piece named) ----
for f in suite.env images.env; do
  [ -s "$CAPKK_CACHE/conformance/$f" ] || die "$CAPKK_CACHE/conformance/$f missing: run 'make conformance-images'"
done
# shellcheck disable=SC1091
source "$CAPKK_CACHE/conformance/suite.env"
# shellcheck disable=SC1091
source "$CAPKK_CACHE/conformance/images.env"
# shellcheck disable=SC1091
source "$CAPKK_CACHE/node-artifacts/current.env"
for b in e2e.test ginkgo; do [ -x "$CONFORMANCE_BIN_DIR/$b" ] || die "$CONFORMANCE_BIN_DIR/$b missing: make conformance-bin"; done
[ -d "$CONFORMANCE_REGISTRY_STORAGE/docker" ] || die "no conformance registry storage: make conformance-images"
command -v go >/dev/null || die "go is required (the report tool)"
mkdir -p "$OUT"
REPORT=$OUT/report
(cd "$HERE/tools/report" && nice -n "${CONFORMANCE_NICE:-15}" go build -o "$REPORT" .) || die "building the report tool failed"

# ---- what the suite will run: a dry run counts the specs the selection matches (before any host starts) ----
LABEL=Conformance
FOCUS=()
if [ -n "${CONFORMANCE_FOCUS:-}" ]; then
  FOCUS=(--focus "$CONFORMANCE_FOCUS")
elif [ "$MODE" = smoke ]; then
  while IFS= read -r line; do
    case $line in '#'* | '') continue ;; esac
    FOCUS+=(--focus "$line")
  done < "$HERE/smoke-focus.txt"
fi
dry() { # <ginkgo args...>: how many specs the selection runs (ginkgo's own count)
  "$CONFORMANCE_BIN_DIR/e2e.test" --ginkgo.dry-run --ginkgo.no-color --ginkgo.label-filter="$LABEL" \
    "${@/#--/--ginkgo.}" --kubeconfig=/dev/null 2>&1 | sed -n 's/^Ran \([0-9]*\) of \([0-9]*\) Specs.*/\1 \2/p' | tail -1
}
read -r SELECTED TOTAL <<<"$(dry "${FOCUS[@]}")"
[ -n "${SELECTED:-}" ] || die "the dry run printed no 'Ran N of M Specs' line (e2e.test --ginkgo.dry-run)"
[ "$SELECTED" -gt 0 ] || die "the selection matches no spec"
if [ "$MODE" = smoke ] && [ -z "${CONFORMANCE_FOCUS:-}" ]; then
  # Every line of smoke-focus.txt must match a spec (a renamed test must not silently drop out).
  while IFS= read -r line; do
    case $line in '#'* | '') continue ;; esac
    read -r n _ <<<"$(dry --focus "$line")"
    [ "${n:-0}" -gt 0 ] || die "smoke-focus.txt: '$line' matches no [Conformance] spec of $KUBE_VERSION"
  done < "$HERE/smoke-focus.txt"
fi
log "$MODE: $SELECTED of $TOTAL specs selected (label $LABEL, $((${#FOCUS[@]} / 2)) focus expressions)"

# ---- the cluster ----
T0=$(date +%s) LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "$FROM" != tests ]; then
  log "cluster: test/vm/real.sh quickstart (REAL_NAME=$NAME, 1 control plane + $WORKERS workers, flannel)"
  # quickstart leaves a cluster that came up running; REAL_KEEP=1 also one that did not (for a look).
  if ! REAL_KEEP=$KEEP REAL_REGISTRY_EXTRA_STORAGE=$CONFORMANCE_REGISTRY_STORAGE real quickstart 2>&1 |
    tee "$OUT/cluster.log"; then
    die "the cluster did not come up ($OUT/cluster.log)"
  fi
fi
T1=$(date +%s)
KCFG=$REAL_WORK/workload.kubeconfig
[ -s "$KCFG" ] || die "no workload kubeconfig at $KCFG (is the cluster $NAME running?)"
[ -s "$REAL_WORK/serve/serve.env" ] || die "no serve.env in $REAL_WORK/serve (the run's registry)"
# shellcheck disable=SC1091
source "$REAL_WORK/serve/serve.env"
# shellcheck disable=SC1091
source "$REAL_WORK/serve/registry.cred"
# shellcheck disable=SC2317 # run by the EXIT trap
teardown() {
  if [ "$KEEP" = 1 ]; then
    log "the cluster is left running: KUBECONFIG=$KCFG; tear down: CONFORMANCE_NAME=$NAME $0 down"
  else
    real quickstart-down >> "$OUT/cluster.log" 2>&1 || log "teardown failed (see $OUT/cluster.log)"
  fi
}
trap teardown EXIT

# Every image the suite will pull is served (a missing one would only show as a pod stuck pulling).
while read -r ref _; do
  path=${ref#registry.k8s.io/}
  curl -fsS -o /dev/null -u "$REGISTRY_USER:$REGISTRY_PASSWORD" \
    -H 'Accept: application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json' \
    "http://$NODE_REGISTRY/v2/${path%:*}/manifests/${path##*:}" || die "the registry $NODE_REGISTRY does not serve $path"
done < "$CONFORMANCE_IMAGES_DIR/images.txt"

# The e2e framework's registries, all pointing at the run's registry; the private registry's tests (an
# authenticated registry on the Internet) and the invalid registry's keep their upstream names: see
# docs/conformance.md.
cat > "$OUT/repo-list.yaml" <<EOF
promoterE2eRegistry: $NODE_REGISTRY/e2e-test-images
buildImageRegistry: $NODE_REGISTRY/build-image
gcEtcdRegistry: $NODE_REGISTRY
gcRegistry: $NODE_REGISTRY
sigStorageRegistry: $NODE_REGISTRY/sig-storage
privateRegistry: gcr.io/k8s-authenticated-test
invalidRegistry: invalid.registry.k8s.io/invalid
dockerLibraryRegistry: $NODE_REGISTRY/library
cloudProviderGcpRegistry: $NODE_REGISTRY/cloud-provider-gcp
EOF
export KUBE_TEST_REPO_LIST=$OUT/repo-list.yaml

# ---- the suite ----
# shellcheck source=../lib/heartbeat.sh
source "$ROOT/test/lib/heartbeat.sh"
E2E_ARGS=(--kubeconfig="$KCFG" --provider=skeleton --kubectl-path="$NODE_BIN_DIR/kubectl"
  --report-dir="$OUT" --e2e-output-dir="$OUT" --non-blocking-taints=node-role.kubernetes.io/control-plane)
ginkgo_run() { # <part> <ginkgo args...>: one ginkgo run, its output in <part>.log, JUnit in <part>.junit.xml
  local part=$1
  shift
  rm -f "$OUT/$part.junit.xml"
  : > "$OUT/$part.log"
  log "$part: ginkgo $* (output: $OUT/$part.log)"
  heartbeat --log "$OUT/$part.log" "conformance: $part" "$CONFORMANCE_BIN_DIR/ginkgo" run --no-color -v \
    --label-filter="$LABEL" "${FOCUS[@]}" --junit-report="$part.junit.xml" --output-dir="$OUT" \
    --poll-progress-after=5m --poll-progress-interval=5m "$@" "$CONFORMANCE_BIN_DIR/e2e.test" -- "${E2E_ARGS[@]}" ||
    true # the verdict is report's (a failed spec, or no report at all)
  grep -E '^Ran [0-9]+ of [0-9]+ Specs' "$OUT/$part.log" | tail -1 >> "$OUT/ran.txt" || true
}
: > "$OUT/ran.txt"
parts=()
case $MODE in
  smoke)
    ginkgo_run smoke --timeout="${CONFORMANCE_TIMEOUT:-1h}"
    parts=(smoke)
    ;;
  full)
    ginkgo_run parallel --procs="${CONFORMANCE_PROCS:-4}" --skip='\[Serial\]' --timeout="${CONFORMANCE_TIMEOUT:-6h}"
    ginkgo_run serial --focus='\[Serial\]' --timeout="${CONFORMANCE_TIMEOUT:-6h}"
    parts=(parallel serial)
    ;;
esac
T2=$(date +%s)
junits=()
for p in "${parts[@]}"; do junits+=("$OUT/$p.junit.xml"); done
{
  echo "conformance $MODE of $NAME ($KUBE_VERSION, ginkgo $GINKGO_VERSION) $(date -u +%FT%TZ)"
  echo "cluster $((T1 - T0))s, suite $((T2 - T1))s; load at start $LOAD0, at end $(cut -d' ' -f1-3 /proc/loadavg)"
  sed 's/^/ginkgo: /' "$OUT/ran.txt"
  "$REPORT" -md "$OUT/summary.md" -expect "$SELECTED" "${junits[@]}" || true
} | tee "$OUT/result.txt"
# report's verdict (its last line) is the run's.
rc=0
grep -qx 'conformance: PASSED' "$OUT/result.txt" || rc=1
log "kept: $OUT (result.txt, summary.md, *.junit.xml, *.log)"
exit "$rc"
