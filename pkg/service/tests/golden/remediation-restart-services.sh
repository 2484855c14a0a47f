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
STEP=restart-services
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
WAIT=60
STAMP=/var/lib/capkk/artifacts/containerd
# Restart the kubelet (the first remediation tier), and before it the container runtime when capkk installed
# it: its stamp STAMP exists (what the reset asks too). containerd goes first, so that the kubelet comes back
# to a runtime that answers. A containerd that was there before capkk (the distribution's, Docker's) serves
# more than this node: it is not restarted, and the step says so. A unit that is not installed fails the step
# (a host without it is not one this provider provisioned). Then waits up to WAIT seconds for the restarted
# units to be active and fails naming the ones that are not: a kubelet that cannot start is for the next tier,
# not a success.
# Variables: WAIT (seconds), STAMP (capkk's containerd stamp).
if ! command -v systemctl >/dev/null 2>&1; then echo "no systemctl on the host"; exit 1; fi
_units=kubelet
if [ -e "$STAMP" ]; then
  _units="containerd kubelet"
else
  echo "left containerd alone: capkk did not install it"
fi
for _u in $_units; do
  systemctl restart "$_u"
  echo "restarted $_u"; CHANGED=1
done
_i=0
while :; do
  _down=""
  for _u in $_units; do
    systemctl is-active -q "$_u" >/dev/null 2>&1 || _down="$_down $_u"
  done
  if [ -z "$_down" ]; then break; fi
  if [ "$_i" -ge "$WAIT" ]; then echo "not active ${WAIT}s after the restart:$_down"; exit 1; fi
  sleep 1
  _i=$((_i + 1))
done
case $_units in
  containerd*) echo "containerd and kubelet are active" ;;
  *) echo "kubelet is active" ;;
esac
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
