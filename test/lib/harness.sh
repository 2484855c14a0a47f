# shellcheck shell=bash
# The harness of the scripted end-to-end tests (test/e2e/e2e.sh, test/vm/real.sh): timed stages, counted
# assertions, polling with progress and diagnostics, and a table of every stage at the end. Sourced, not executed;
# one copy, so that both tests count, time and report the same way.
#
# The sourcing script sets NAME (the prefix of every log line) and defines the two hooks wait_for calls, as what
# is worth showing differs per test:
#   progress      every HARNESS_PROGRESS_SECS while wait_for polls: what the test is waiting on (WAIT_DESC
#                 and WAIT_T0 hold wait_for's description and start, in epoch seconds)
#   diagnostics   once, when wait_for gives up: what a person needs to see why
# Where the tests really differ, they set (before calling anything; the default after `=`):
#   HARNESS_KEEP_GOING=0      1: a failed check is counted and the run goes on, so one run reports every failed
#                             assertion (its summary fails it); 0: check returns 1 too, which `set -e` makes fatal
#   HARNESS_POLL_SECS=2       seconds between two polls of wait_for
#   HARNESS_PROGRESS_SECS=30  seconds between two progress calls of wait_for
#   HARNESS_WAIT_SECS=0       1: wait_for's ok line says how long it waited
#   HARNESS_STAGE_DECIMALS=1  decimals of a stage's seconds in the table
#   HARNESS_STAGE_WIDTH=46    width of the table's stage column
#   HARNESS_LOAD=0            1: every stage's first line and the end of the table show the load average (where
#                             timings depend on the machine's load, as under QEMU TCG)

: "${NAME:?set NAME before sourcing harness.sh}"
: "${HARNESS_KEEP_GOING:=0}" "${HARNESS_POLL_SECS:=2}" "${HARNESS_PROGRESS_SECS:=30}" "${HARNESS_WAIT_SECS:=0}"
: "${HARNESS_STAGE_DECIMALS:=1}" "${HARNESS_STAGE_WIDTH:=46}" "${HARNESS_LOAD:=0}"

T_START=$(date +%s)
declare -a STAGES=() STAGE_SECS=() STAGE_RESULT=()
PASSED=0
FAILED=0
CUR_STAGE=""
CUR_T0=0
STAGE_FAILED0=0

log() {
  # Bold only for a person at a terminal: in CI logs and log files the escape codes are noise.
  if [ -t 1 ]; then
    printf '\033[1m[%s %s]\033[0m %s\n' "$NAME" "$(date +%H:%M:%S)" "$*"
  else
    printf '[%s %s] %s\n' "$NAME" "$(date +%H:%M:%S)" "$*"
  fi
}
die() { log "FATAL: $*"; exit 1; }
load_average() { cut -d' ' -f1-3 /proc/loadavg; }

stage() { # stage TITLE: end the current stage, begin a timed one
  end_stage
  CUR_STAGE=$1
  CUR_T0=$(date +%s.%N)
  STAGE_FAILED0=$FAILED
  if [ "$HARNESS_LOAD" = 1 ]; then log "== $1 (load average: $(load_average))"; else log "== $1"; fi
}

# shellcheck disable=SC2120 # the EXIT traps pass "failed"
end_stage() { # end_stage [RESULT]: record the current stage as RESULT (ok), or as FAILED (n) when n checks failed in it
  [ -n "$CUR_STAGE" ] || return 0
  STAGES+=("$CUR_STAGE")
  STAGE_SECS+=("$(awk -v a="$CUR_T0" -v b="$(date +%s.%N)" -v f="%.${HARNESS_STAGE_DECIMALS}f" 'BEGIN{printf f, b-a}')")
  local result=${1:-ok}
  [ "$FAILED" = "$STAGE_FAILED0" ] || result="FAILED ($((FAILED - STAGE_FAILED0)))"
  STAGE_RESULT+=("$result")
  CUR_STAGE=""
}

check() { # check DESCRIPTION COMMAND...: an assertion, counted
  local desc=$1
  shift
  if "$@"; then
    PASSED=$((PASSED + 1))
    log "  ok   $desc"
  else
    FAILED=$((FAILED + 1))
    log "  FAIL $desc"
    [ "$HARNESS_KEEP_GOING" = 1 ] || return 1
  fi
}

wait_for() { # wait_for DESCRIPTION TIMEOUT_SECONDS COMMAND...: poll until COMMAND succeeds (counted)
  local desc=$1 timeout=$2
  shift 2
  local t0 deadline next_progress
  t0=$(date +%s)
  # For progress: what is awaited and since when (epoch seconds).
  # shellcheck disable=SC2034 # read by the sourcing script's progress
  WAIT_DESC=$desc WAIT_T0=$t0
  deadline=$((t0 + timeout))
  next_progress=$((t0 + HARNESS_PROGRESS_SECS))
  while ! "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      FAILED=$((FAILED + 1))
      log "  FAIL $desc (not within ${timeout}s)"
      diagnostics
      return 1
    fi
    if [ "$(date +%s)" -ge "$next_progress" ]; then
      progress
      next_progress=$(($(date +%s) + HARNESS_PROGRESS_SECS))
    fi
    sleep "$HARNESS_POLL_SECS"
  done
  PASSED=$((PASSED + 1))
  if [ "$HARNESS_WAIT_SECS" = 1 ]; then log "  ok   $desc ($(($(date +%s) - t0))s)"; else log "  ok   $desc"; fi
}

timing_table() { # end the current stage; every stage's seconds and result, and the total
  end_stage
  local total=$(($(date +%s) - T_START)) i w=$HARNESS_STAGE_WIDTH rule
  rule=$(printf '%*s' "$w" '' | tr ' ' -)
  printf '\n%-*s %8s  %s\n' "$w" "stage" "seconds" "result"
  printf '%-*s %8s  %s\n' "$w" "$rule" "--------" "------"
  for i in "${!STAGES[@]}"; do
    printf '%-*s %8s  %s\n' "$w" "${STAGES[$i]}" "${STAGE_SECS[$i]}" "${STAGE_RESULT[$i]}"
  done
  printf '%-*s %8s\n' "$w" "total" "$total"
  if [ "$HARNESS_LOAD" = 1 ]; then echo "load average at the end: $(load_average)"; fi
}
