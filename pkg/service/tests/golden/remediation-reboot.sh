RETRY_LATER_EXIT=99
# Prelude of every batched service script (facts::script::Script). Steps are framed by step-open.sh and
# step-close.sh; markers follow the one protocol of crate::host::MARK ("@@capkk <verb> <args>").
umask 022
export LC_ALL=C
# put_file PATH MODE SHA256 BASE64: write PATH only when its content or mode differs (atomic rename). The
# temp file is created by mktemp (mode 0600, unpredictable name) and gets MODE only when complete, so a file
# holding credentials is never readable by others, not even for a moment.
put_file() {
  if [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$3" ] && [ "$(stat -c %a "$1")" = "$2" ]; then return 0; fi
  mkdir -p "$(dirname "$1")"
  _pt=$(mktemp "$(dirname "$1")/.capkk-put.XXXXXX")
  printf '%s' "$4" | base64 -d > "$_pt"
  chmod "$2" "$_pt"
  mv -f "$_pt" "$1"
  echo "wrote $1"
  CHANGED=1
}
# retry_later MESSAGE: fail the step as one that may work later without a spec change (a download cut short,
# a full disk): its exit code RETRY_LATER_EXIT (prepended by Script::render) makes it Error::RetryLater,
# retried with backoff, where any other failure is terminal.
retry_later() {
  echo "$1" >&2
  exit "$RETRY_LATER_EXIT"
}
# mismatch ARTIFACT EXPECTED ACTUAL: report a checksum mismatch and fail the step.
mismatch() {
  echo "@@capkk mismatch $2 $3 $1"
  return 65
}
now_ns() { date +%s%N 2>/dev/null; }
# end_step NAME RC: the end marker with the step's wall time and the host's clock at its end (ms since the
# epoch; 0 when date cannot tell nanoseconds).
end_step() {
  _t1=$(now_ns)
  case "$_t0$_t1" in *[!0-9]*|'') _ms=0 _at=0 ;; *) _ms=$(( (_t1 - _t0) / 1000000 )) _at=$(( _t1 / 1000000 )) ;; esac
  printf '\n@@capkk end %s %s %s %s\n' "$1" "$2" "$_ms" "$_at"
}
STEP=schedule-reboot
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
DELAY=3
# Reboot the host (the second remediation tier) without hanging the SSH session that asks for it: the reboot
# is scheduled DELAY seconds ahead, outside this session (a transient systemd timer, or a detached shell where
# there is no systemd), so this step ends and its output reaches the controller before sshd goes down. The
# controller then waits for the host to answer with another boot ID.
# Variables: DELAY (seconds before the reboot).
if command -v systemd-run >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  systemd-run --quiet --collect --on-active="${DELAY}s" --timer-property=AccuracySec=1s systemctl reboot
  echo "reboot scheduled in ${DELAY}s (systemd timer)"
else
  nohup sh -c "sleep $DELAY; reboot" >/dev/null 2>&1 &
  echo "reboot scheduled in ${DELAY}s (detached shell)"
fi
CHANGED=1
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
