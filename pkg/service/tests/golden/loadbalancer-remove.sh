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
STEP=remove-loadbalancer
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
STATE_DIR=/var/lib/capkk/loadbalancer
HEADER='# Managed by capkk-rs (controlPlaneLoadBalancer.type: Keepalived); rewritten when the control plane changes.'
CHECK=/etc/keepalived/capkk-check-apiserver.sh
# Variables: STATE_DIR, HEADER, CHECK (the health-check script's path). Undoes what configure.sh did: a
# keepalived or haproxy whose configuration capkk did not write (a first line other than HEADER) is left
# alone. The packages stay installed (stopped and disabled), as other services may have come to need them.
for _f in keepalived:/etc/keepalived/keepalived.conf haproxy:/etc/haproxy/haproxy.cfg; do
  _n=${_f%%:*}
  _p=${_f#*:}
  if [ -f "$_p" ] && [ "$(head -n 1 "$_p")" = "$HEADER" ]; then
    systemctl disable --now "$_n" >/dev/null 2>&1 || systemctl stop "$_n" >/dev/null 2>&1 || true
    rm -f "$_p"
    echo "stopped $_n and removed its configuration"
    CHANGED=1
  elif [ -e "$_p" ]; then
    echo "left $_n alone: capkk did not write $_p"
  fi
done
if [ -f "$CHECK" ] && grep -qx "$HEADER" "$CHECK"; then rm -f "$CHECK"; fi
if [ -f "$STATE_DIR/vip" ]; then
  read -r _vip _dev < "$STATE_DIR/vip" || true
  if [ -n "$_vip" ] && [ -n "$_dev" ] && ip addr del "$_vip" dev "$_dev" >/dev/null 2>&1; then
    echo "dropped the VIP $_vip from $_dev"
    CHANGED=1
  fi
fi
if [ -d "$STATE_DIR" ]; then rm -rf "$STATE_DIR"; CHANGED=1; fi
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
