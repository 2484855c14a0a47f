#!/usr/bin/env bash
# The manager image, run as a cluster would run it (config/manager/manager.yaml: non-root, read-only root,
# no capabilities, artifact cache on a scratch volume), with podman and runc under lowered ulimits:
#
#   - `--help` prints the flags and exits 0; the image runs as 65532, has no shell, and its size is reported
#   - against the local management plane (make mgmt-up), with its kubeconfig mounted read-only: /healthz and
#     /readyz answer ok (readyz only after the API server answered), /metrics serves OpenMetrics with the
#     capkk families, and the manager takes the leader Lease in the plane (a write through its credentials)
#
# Usage: test/image/image-test.sh IMAGE        (make image-test; needs root, podman, runc, curl)
set -euo pipefail
IMG=${1:?usage: $0 IMAGE}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
read -ra PODMAN_CMD <<<"${PODMAN:-podman}" # may carry options, e.g. "podman --root DIR"
RUN=("${PODMAN_CMD[@]}" --runtime runc run --ulimit nproc=4096:4096 --ulimit nofile=4096:4096)
NAME=capkk-image-test-$$
NS=capkk-image-test
passed=0 failed=0
log() { echo "image-test: $*"; }
check() { # check DESCRIPTION COMMAND...: one counted assertion
  local desc=$1
  shift
  if "$@"; then passed=$((passed + 1)); log "ok   $desc"; else failed=$((failed + 1)); log "FAIL $desc"; fi
}

"${PODMAN_CMD[@]}" image exists "$IMG" || { log "image $IMG not found: make image"; exit 1; }
kubeconfig=$("$ROOT/test/mgmt/scripts/mgmt.sh" kubeconfig)
bin_dir=$("$ROOT/test/mgmt/scripts/mgmt.sh" bin-dir)
kubectl=("$bin_dir/kubectl" --kubeconfig "$kubeconfig")
"${kubectl[@]}" get --raw /readyz >/dev/null || { log "the management plane does not answer: make mgmt-up"; exit 1; }

work=$(mktemp -d)
cleanup() {
  "${PODMAN_CMD[@]}" rm -f -t 5 "$NAME" >/dev/null 2>&1 || true
  "${kubectl[@]}" delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# --- the image itself
size=$("${PODMAN_CMD[@]}" image inspect --format '{{.Size}}' "$IMG")
log "image $IMG: $((size / 1000000)) MB ($size bytes)"
check "runs as the non-root user 65532" \
  test "$("${PODMAN_CMD[@]}" image inspect --format '{{.Config.User}}' "$IMG")" = "65532:65532"
no_shell() { # running /bin/sh fails because there is none (not for some other reason)
  local out
  ! out=$("${RUN[@]}" --rm --entrypoint /bin/sh "$IMG" -c true 2>&1) && grep -qi 'no such file' <<<"$out"
}
check "has no shell" no_shell
"${RUN[@]}" --rm "$IMG" --help >"$work/help" 2>&1 && help_rc=0 || help_rc=$?
check "--help exits 0" test "$help_rc" = 0
check "--help lists --kubeconfig, --metrics-bind-address, --health-probe-bind-address, --leader-elect" \
  bash -c "grep -q -- --kubeconfig '$work/help' && grep -q -- --metrics-bind-address '$work/help' &&
           grep -q -- --health-probe-bind-address '$work/help' && grep -q -- --leader-elect '$work/help'"

# --- against the management plane
# The kubeconfig holds admin credentials: a private copy owned by the image's user, mounted read-only.
install -d -m 0700 "$work/kube"
install -m 0400 -o 65532 -g 65532 "$kubeconfig" "$work/kube/kubeconfig"
ports=$(python3 -c 'import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')
read -r metrics_port health_port <<<"$ports"
"${kubectl[@]}" create namespace "$NS" >/dev/null 2>&1 || true
"${kubectl[@]}" apply --server-side -f "$ROOT/config/crd/bases" >/dev/null
started=ok
"${RUN[@]}" -d --name "$NAME" --network host --read-only --cap-drop ALL --security-opt no-new-privileges \
  --tmpfs "/var/cache/capkk:rw,size=64m,mode=1777" \
  -v "$work/kube/kubeconfig:/etc/capkk/kubeconfig:ro" \
  -e CAPKK_ARTIFACT_CACHE_DIR=/var/cache/capkk -e POD_NAME="$NAME" -e POD_NAMESPACE="$NS" \
  "$IMG" --kubeconfig /etc/capkk/kubeconfig --leader-elect \
  --metrics-bind-address "127.0.0.1:$metrics_port" --health-probe-bind-address "127.0.0.1:$health_port" >/dev/null ||
  started=failed
check "the manager container starts" test "$started" = ok
[ "$started" = ok ] || { log "$passed passed, $failed failed"; exit 1; }

get() { curl -fsS --max-time 5 "http://127.0.0.1:$1$2"; }
wait_for() { # wait_for SECONDS COMMAND...
  local until=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $until ] || return 1
    [ "$("${PODMAN_CMD[@]}" inspect --format '{{.State.Running}}' "$NAME" 2>/dev/null)" = true ] || return 1
    sleep 1
  done
}
check "/healthz answers ok" wait_for 60 bash -c "[ \"\$(curl -fsS --max-time 5 http://127.0.0.1:$health_port/healthz)\" = ok ]"
check "/readyz answers ok (the API server answered through the mounted kubeconfig)" \
  wait_for 60 bash -c "[ \"\$(curl -fsS --max-time 5 http://127.0.0.1:$health_port/readyz)\" = ok ]"
check "takes the leader Lease $NS/capkk-manager-leader as $NAME" wait_for 90 bash -c \
  "[ \"\$('$bin_dir/kubectl' --kubeconfig '$kubeconfig' -n $NS get lease capkk-manager-leader -o jsonpath='{.spec.holderIdentity}')\" = '$NAME' ]"
# Plain /metrics (an explicit --metrics-bind-address, without the tenant-naming pool series): enough to show the
# image's binary serves it. The shipped manifests' default, HTTPS with TokenReview and SubjectAccessReview on
# :8443, is checked on the real API server by controllers/tests/mgmt_diagnostics.rs and in a Pod by
# test/vm/real.sh (pod_metrics).
get "$metrics_port" /metrics >"$work/metrics" 2>&1 || true
check "/metrics serves OpenMetrics with the capkk families" \
  bash -c "grep -q '^# TYPE capkk_' '$work/metrics' && tail -1 '$work/metrics' | grep -qx '# EOF'"
check "still running" test "$("${PODMAN_CMD[@]}" inspect --format '{{.State.Running}}' "$NAME")" = true
mount_rw=$("${PODMAN_CMD[@]}" inspect --format '{{range .Mounts}}{{if eq .Destination "/etc/capkk/kubeconfig"}}{{.RW}}{{end}}{{end}}' "$NAME")
check "the kubeconfig is mounted read-only" test "$mount_rw" = false
"${PODMAN_CMD[@]}" stop -t 10 "$NAME" >/dev/null
check "stops cleanly on SIGTERM (exit 0)" test "$("${PODMAN_CMD[@]}" inspect --format '{{.State.ExitCode}}' "$NAME")" = 0
if [ "$failed" != 0 ]; then
  log "manager log:"
  "${PODMAN_CMD[@]}" logs "$NAME" 2>&1 | tail -40
fi
log "$passed passed, $failed failed"
[ "$failed" = 0 ]
