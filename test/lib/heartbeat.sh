#!/usr/bin/env bash
# No silent minute: a long step (a Go or cargo build, the VM image, a VM boot) prints a line while it runs, so
# that a person or a CI log can tell a slow step from a hung one, and see what it is at.
#
#   heartbeat [--log FILE] [--tail FILE] LABEL COMMAND...          (sourced: a function)
#   test/lib/heartbeat.sh [--log FILE] [--tail FILE] LABEL COMMAND...   (executed: for make recipes)
#
# Runs COMMAND and, every CAPKK_HEARTBEAT_SECS (30) seconds while it runs, prints to stderr
#   LABEL: still running, 90s (load 3.10 2.95 2.40)[ | <last line of the shown file>]
# then returns COMMAND's exit status. --log FILE: COMMAND's stdout and stderr are appended to FILE instead of
# passing through (a step whose output only matters when it fails), and each heartbeat shows FILE's last line;
# --tail FILE shows that file's last line instead (e.g. a VM's serial console while it boots).
# COMMAND runs in the background of this shell, so its stdin is /dev/null: only for commands that read none.

heartbeat() {
  local log="" tail="" label t0 pid hb rc=0
  while [ $# -gt 0 ]; do
    case $1 in
      --log) log=$2; tail=${tail:-$2}; shift 2 ;;
      --tail) tail=$2; shift 2 ;;
      *) break ;;
    esac
  done
  label=${1:?heartbeat: LABEL COMMAND... expected}
  shift
  [ $# -gt 0 ] || { echo "heartbeat: no command for $label" >&2; return 2; }
  t0=$(date +%s)
  if [ -n "$log" ]; then "$@" >>"$log" 2>&1 & else "$@" & fi
  pid=$!
  (
    # sleep without our stderr: once this loop is killed, an orphaned sleep must not hold a caller's pipe open.
    while sleep "${CAPKK_HEARTBEAT_SECS:-30}" >/dev/null 2>&1 && kill -0 "$pid" 2>/dev/null; do
      line="$label: still running, $(($(date +%s) - t0))s (load $(cut -d' ' -f1-3 /proc/loadavg))"
      # The shown file's last line, printable characters only (cargo and QEMU consoles carry escapes), without
      # its indentation.
      if [ -n "$tail" ] && [ -s "$tail" ]; then
        line+=" | $(tail -n 1 "$tail" 2>/dev/null | tr -cd '[:print:]' | sed 's/^ *//' | cut -c1-120 || true)"
      fi
      echo "$line" >&2
    done
  ) &
  hb=$!
  wait "$pid" || rc=$?
  kill "$hb" 2>/dev/null || true
  wait "$hb" 2>/dev/null || true
  return "$rc"
}

# Executed rather than sourced: run the arguments under a heartbeat.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  heartbeat "$@"
fi
