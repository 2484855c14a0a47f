#!/usr/bin/env bash
# `make test`: runs every tier of TEST_TIERS (make targets) in order, each even when an earlier one failed,
# then prints a table of results and times and counts the skipped tests by reason ($CAPKK_SKIP_LOG).
# Exits non-zero when any tier failed. Tiers in HOSTS_TIERS run under $HOSTS_LOCK (e.g. a flock) when set.
set -uo pipefail
: "${TEST_TIERS:?}" "${MAKE:=make}" "${HOSTS_TIERS:=}" "${HOSTS_LOCK:=}" "${CAPKK_SKIP_LOG:=}"
mkdir -p "$(dirname "${CAPKK_SKIP_LOG:-/tmp/x}")"
[ -z "$CAPKK_SKIP_LOG" ] || : >"$CAPKK_SKIP_LOG"

read -ra make_cmd <<<"$MAKE"
declare -a names=() results=() secs=()
failed=0
t_all=$(date +%s)
for tier in $TEST_TIERS; do
  lock=()
  if [ -n "$HOSTS_LOCK" ] && [[ " $HOSTS_TIERS " == *" $tier "* ]]; then
    read -ra lock <<<"$HOSTS_LOCK"
  fi
  echo "==== make test: tier $tier$([ ${#lock[@]} = 0 ] || echo " (under ${lock[*]})")"
  t0=$(date +%s)
  "${lock[@]}" "${make_cmd[@]}" --no-print-directory "$tier"
  rc=$?
  names+=("$tier") secs+=($(( $(date +%s) - t0 )))
  if [ $rc = 0 ]; then results+=(ok); else results+=("FAILED (exit $rc)"); failed=$((failed + 1)); fi
done

echo
echo "==== make test: tiers (load average now: $(cut -d' ' -f1-3 /proc/loadavg))"
printf '%-22s %-16s %8s\n' tier result seconds
for i in "${!names[@]}"; do
  printf '%-22s %-16s %8s\n' "${names[$i]}" "${results[$i]}" "${secs[$i]}"
done
printf '%-22s %-16s %8s\n' total "$([ $failed = 0 ] && echo ok || echo "$failed failed")" $(( $(date +%s) - t_all ))

if [ -n "$CAPKK_SKIP_LOG" ] && [ -s "$CAPKK_SKIP_LOG" ]; then
  echo "skipped tests (CAPKK_ALLOW_SKIP=1): $(wc -l <"$CAPKK_SKIP_LOG") —" \
    "$(cut -f1 "$CAPKK_SKIP_LOG" | sort | uniq -c | sort -rn | awk '{n=$1; $1=""; printf "%s%s: %d", sep, substr($0,2), n; sep="; "}')"
else
  echo "skipped tests: 0"
fi
[ $failed = 0 ]
