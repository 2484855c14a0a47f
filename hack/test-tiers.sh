#!/usr/bin/env bash
# `make test`: runs every tier of TEST_TIERS (make targets) in order, each even when an earlier one failed,
# then prints a table of results and times and counts the skipped tests by reason ($CAPKK_SKIP_LOG).
# Exits non-zero when any tier failed. Tiers in HOSTS_TIERS run under $HOSTS_LOCK (e.g. a flock) when set.
#
# TEST_LANE_TIERS (empty by default: every tier in one line, one after another): tiers of TEST_TIERS that run in
# a second lane beside the others instead, one after another in TEST_TIERS order, starting when the tier
# TEST_LANE_AFTER has ended (at the start when empty). For tiers that mostly wait (the real-node tiers: kubeadm,
# kubelets, CAPI's timers) beside tiers that compute. The lane has a management plane of its own
# (CAPKK_MGMT_DIR + "-lane", ports shifted by TEST_LANE_PORT_SHIFT, default 90: beside the offsets 0-80 other
# checkouts of this machine use), stopped when the lane ends, so that the tests counting requests
# API-server-wide (test-integration's MUST_RUN_ALONE) see only their own. Each lane tier's output goes to
# $TEST_LANE_LOG_DIR/<tier>.log, a line says when it starts and ends, and the logs are printed whole once every
# tier has ended; the table lists every tier in TEST_TIERS order with its own time, and a failed lane tier fails
# `make test` as any other.
set -uo pipefail
: "${TEST_TIERS:?}" "${MAKE:=make}" "${HOSTS_TIERS:=}" "${HOSTS_LOCK:=}" "${CAPKK_SKIP_LOG:=}"
: "${TEST_LANE_TIERS:=}" "${TEST_LANE_AFTER:=}" "${TEST_LANE_PORT_SHIFT:=90}"
: "${TEST_LANE_LOG_DIR:=${CAPKK_SKIP_LOG:+$(dirname "$CAPKK_SKIP_LOG")/}test-lane}"
mkdir -p "$(dirname "${CAPKK_SKIP_LOG:-/tmp/x}")"
[ -z "$CAPKK_SKIP_LOG" ] || : >"$CAPKK_SKIP_LOG"

read -ra make_cmd <<<"$MAKE"
read -ra tiers <<<"$TEST_TIERS"
read -ra lane <<<"$TEST_LANE_TIERS"
in_list() { # in_list WORD WORDS...
  local w=$1
  shift
  [[ " $* " == *" $w "* ]]
}
for t in "${lane[@]}"; do
  in_list "$t" "${tiers[@]}" || { echo "TEST_LANE_TIERS: $t is not a tier of TEST_TIERS ($TEST_TIERS)" >&2; exit 2; }
done
if [ -n "$TEST_LANE_AFTER" ]; then
  if ! in_list "$TEST_LANE_AFTER" "${tiers[@]}" || in_list "$TEST_LANE_AFTER" "${lane[@]}"; then
    echo "TEST_LANE_AFTER: $TEST_LANE_AFTER is not a tier of TEST_TIERS outside TEST_LANE_TIERS" >&2
    exit 2
  fi
fi

declare -A result=() secs=()
failed=0
t_all=$(date +%s)

run_tier() { # run_tier TIER: the make target, under HOSTS_LOCK when the tier starts sandbox hosts; its exit status
  local lock=()
  # shellcheck disable=SC2086 # HOSTS_TIERS: a list of words
  if [ -n "$HOSTS_LOCK" ] && in_list "$1" $HOSTS_TIERS; then
    read -ra lock <<<"$HOSTS_LOCK"
  fi
  "${lock[@]}" "${make_cmd[@]}" --no-print-directory "$1"
}

# The lane (this script with --lane, a process group of its own): its tiers one after another with the lane's
# plane, each tier's exit status and seconds in <tier>.result, then the lane's plane stopped.
run_lane() {
  local t t0 rc
  export CAPKK_MGMT_DIR="${CAPKK_MGMT_DIR:-${CAPKK_CACHE:-$HOME/.cache/capkk-rs}/mgmt}-lane"
  export CAPKK_MGMT_PORT_OFFSET=$((${CAPKK_MGMT_PORT_OFFSET:-0} + TEST_LANE_PORT_SHIFT))
  for t in "${lane[@]}"; do
    echo "==== make test: lane tier $t started (load average: $(cut -d' ' -f1-3 /proc/loadavg); log $TEST_LANE_LOG_DIR/$t.log)"
    t0=$(date +%s)
    run_tier "$t" >"$TEST_LANE_LOG_DIR/$t.log" 2>&1 </dev/null
    rc=$?
    echo "$rc $(($(date +%s) - t0))" >"$TEST_LANE_LOG_DIR/$t.result"
    echo "==== make test: lane tier $t ended: $([ $rc = 0 ] && echo ok || echo "FAILED (exit $rc)") in $(($(date +%s) - t0)) s (load average: $(cut -d' ' -f1-3 /proc/loadavg))"
  done
  "${make_cmd[@]}" --no-print-directory mgmt-down >"$TEST_LANE_LOG_DIR/mgmt-down.log" 2>&1 </dev/null ||
    echo "==== make test: the lane's management plane did not stop ($TEST_LANE_LOG_DIR/mgmt-down.log)"
}
if [ "${1:-}" = --lane ]; then
  run_lane
  exit 0
fi
lane_pid=
start_lane() {
  [ ${#lane[@]} -gt 0 ] && [ -z "$lane_pid" ] || return 0
  rm -rf "$TEST_LANE_LOG_DIR"
  mkdir -p "$TEST_LANE_LOG_DIR"
  echo "==== make test: lane of ${lane[*]} starts beside the other tiers (management plane ${CAPKK_MGMT_DIR:-${CAPKK_CACHE:-$HOME/.cache/capkk-rs}/mgmt}-lane, ports +$TEST_LANE_PORT_SHIFT)"
  TEST_LANE_LOG_DIR=$TEST_LANE_LOG_DIR setsid "$BASH" "${BASH_SOURCE[0]}" --lane &
  lane_pid=$!
}
# Interrupted: the lane's process group gets the signal too (its scripts tear down what they started).
trap '[ -z "$lane_pid" ] || { kill -TERM -- "-$lane_pid" 2>/dev/null; wait "$lane_pid"; }; exit 130' INT TERM

[ -n "$TEST_LANE_AFTER" ] || start_lane
for tier in "${tiers[@]}"; do
  in_list "$tier" "${lane[@]}" && continue
  # shellcheck disable=SC2086 # HOSTS_TIERS: a list of words
  echo "==== make test: tier $tier$([ -z "$HOSTS_LOCK" ] || ! in_list "$tier" $HOSTS_TIERS || echo " (under $HOSTS_LOCK)")"
  t0=$(date +%s)
  run_tier "$tier"
  rc=$?
  secs[$tier]=$(($(date +%s) - t0))
  if [ $rc = 0 ]; then result[$tier]=ok; else result[$tier]="FAILED (exit $rc)"; failed=$((failed + 1)); fi
  [ "$tier" != "$TEST_LANE_AFTER" ] || start_lane
done
# A lane whose start tier never came (it cannot: checked above) would be a silent skip.
start_lane

if [ -n "$lane_pid" ]; then
  echo "==== make test: waiting for the lane (${lane[*]})"
  wait "$lane_pid"
  lane_pid=
  for t in "${lane[@]}"; do
    echo "==== make test: tier $t (ran in the lane beside the tiers above)"
    cat "$TEST_LANE_LOG_DIR/$t.log" 2>/dev/null
    if read -r rc s <"$TEST_LANE_LOG_DIR/$t.result" 2>/dev/null; then
      secs[$t]=$s
    else
      rc="none" secs[$t]=0
    fi
    if [ "$rc" = 0 ]; then result[$t]=ok; else result[$t]="FAILED (exit $rc)"; failed=$((failed + 1)); fi
  done
fi

echo
echo "==== make test: tiers (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
printf '%-22s %-16s %8s\n' tier result seconds
for tier in "${tiers[@]}"; do
  printf '%-22s %-16s %8s\n' "$tier" "${result[$tier]}" "${secs[$tier]}"
done
printf '%-22s %-16s %8s\n' total "$([ $failed = 0 ] && echo ok || echo "$failed failed")" $(($(date +%s) - t_all))
[ ${#lane[@]} = 0 ] || echo "(${lane[*]}: in the lane beside the others, from the end of ${TEST_LANE_AFTER:-nothing}; total is the wall time)"

if [ -n "$CAPKK_SKIP_LOG" ] && [ -s "$CAPKK_SKIP_LOG" ]; then
  echo "skipped tests (CAPKK_ALLOW_SKIP=1): $(wc -l <"$CAPKK_SKIP_LOG") —" \
    "$(cut -f1 "$CAPKK_SKIP_LOG" | sort | uniq -c | sort -rn | awk '{n=$1; $1=""; printf "%s%s: %d", sep, substr($0,2), n; sep="; "}')"
else
  echo "skipped tests: 0"
fi
[ $failed = 0 ]
