# shellcheck shell=bash disable=SC2154 # inner and sessions are the lines capkk-bench puts above this file
# capkk-bench: root's login shell on a bench host (`capkk-bench controller --provision`). sshd runs every
# command of capkk-rs (execs and uploads) as `<login shell> -c <command>`; this runs it with the host's own
# shell ($inner, set above) and appends when it started and ended, in epoch seconds, to $sessions (bash's
# EPOCHREALTIME: no extra process per command).
start=$EPOCHREALTIME
"$inner" "$@"
rc=$?
printf '%s %s\n' "$start" "$EPOCHREALTIME" >> "$sessions"
exit "$rc"
