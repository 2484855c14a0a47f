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
STEP=configure-loadbalancer
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
STATE_DIR=/var/lib/capkk/loadbalancer
VIP_CIDR=198.18.5.200/32
INTERFACE=eth0
PORT=8443
INSTALLED='keepalived haproxy'
HAPROXY_FILES() {
put_file /etc/haproxy/haproxy.cfg 644 fc6c856df021110ed64b77f6899e8f5332586bd45980b1d6898e12e306263c09 IyBNYW5hZ2VkIGJ5IGNhcGtrLXJzIChjb250cm9sUGxhbmVMb2FkQmFsYW5jZXIudHlwZTogS2VlcGFsaXZlZCk7IHJld3JpdHRlbiB3aGVuIHRoZSBjb250cm9sIHBsYW5lIGNoYW5nZXMuCiMgVGhlIGNvbnRyb2wtcGxhbmUgZW5kcG9pbnQgb2YgS0tDbHVzdGVyIGRlZmF1bHQvaGE6IFRDUCBvbiBwb3J0IDg0NDMgb2YgZXZlcnkgY29udHJvbC1wbGFuZSBob3N0IChhbmQKIyBvZiB0aGUgVklQIGtlZXBhbGl2ZWQgbW92ZXMgYmV0d2VlbiB0aGVtKSwgYmFsYW5jZWQgb3ZlciBldmVyeSBjb250cm9sIHBsYW5lJ3MgQVBJIHNlcnZlciB3aG9zZSAvcmVhZHl6CiMgYW5zd2Vycy4KZ2xvYmFsCiAgICBsb2cgL2Rldi9sb2cgbG9jYWwwIHdhcm5pbmcKICAgICMgRWFjaCBjb25uZWN0aW9uIHRha2VzIHR3byBmaWxlIGRlc2NyaXB0b3JzOiA0MDAwIG5lZWRzIGFib3V0IDgwMDAsIHdpdGhpbiB0aGUgb3Blbi1maWxlcyBsaW1pdCBvZiBob3N0cwogICAgIyB0aGF0IGNhcCBpdCBsb3cgKDIwMDAwIGluIGNvbnRhaW5lcnMgYW5kIExYQzogMjAwMDAgY29ubmVjdGlvbnMgYXNrZWQgZm9yIDQwMDQwIGFuZCBoYXByb3h5IGxvYWRlZAogICAgIyBub3RoaW5nKS4gVGhlIGNsaWVudHMgb2Ygb25lIGNsdXN0ZXIncyBBUEkgc2VydmVycyAoa3ViZWxldHMsIGNvbnRyb2xsZXJzLCB1c2Vycykgc3RheSBmYXIgYmVsb3cgaXQuCiAgICBtYXhjb25uIDQwMDAKCmRlZmF1bHRzCiAgICBtb2RlIHRjcAogICAgbG9nIGdsb2JhbAogICAgb3B0aW9uIHRjcGxvZwogICAgb3B0aW9uIGRvbnRsb2dudWxsCiAgICAjIEEgY29udHJvbCBwbGFuZSB0aGF0IGp1c3QgZGllZCBzdGlsbCBsb29rcyB1cCBmb3IgdXAgdG8gMiBzIG9mIGNoZWNrczogYSBjb25uZWN0aW9uIHNlbnQgdG8gaXQgZmFpbHMKICAgICMgd2l0aGluIGEgc2Vjb25kIGFuZCBnb2VzIHRvIGFub3RoZXIgc2VydmVyIChyZWRpc3BhdGNoKSBpbnN0ZWFkIG9mIHdhaXRpbmcgb3V0IGEgbG9uZyBjb25uZWN0IHRpbWVvdXQuCiAgICBvcHRpb24gcmVkaXNwYXRjaAogICAgcmV0cmllcyAyCiAgICB0aW1lb3V0IGNvbm5lY3QgMXMKICAgIHRpbWVvdXQgY2xpZW50IDFoCiAgICB0aW1lb3V0IHNlcnZlciAxaAogICAgdGltZW91dCBjaGVjayAycwoKZnJvbnRlbmQgY2Fwa2stYXBpc2VydmVyCiAgICBiaW5kIDo4NDQzCiAgICBkZWZhdWx0X2JhY2tlbmQgY2Fwa2stYXBpc2VydmVyCgpiYWNrZW5kIGNhcGtrLWFwaXNlcnZlcgogICAgb3B0aW9uIGh0dHBjaGsgR0VUIC9yZWFkeXoKICAgIGh0dHAtY2hlY2sgZXhwZWN0IHN0YXR1cyAyMDAKICAgIGJhbGFuY2Ugcm91bmRyb2JpbgogICAgZGVmYXVsdC1zZXJ2ZXIgY2hlY2sgY2hlY2stc3NsIHZlcmlmeSBub25lIGludGVyIDFzIGZhbGwgMiByaXNlIDIgb24tbWFya2VkLWRvd24gc2h1dGRvd24tc2Vzc2lvbnMKICAgIHNlcnZlciBjcC0xIDE5OC4xOC41LjExOjY0NDMKICAgIHNlcnZlciBjcC0yIDE5OC4xOC41LjEyOjY0NDMKICAgIHNlcnZlciBjcC0zIDE5OC4xOC41LjEzOjY0NDMK
}
KEEPALIVED_FILES() {
put_file /etc/keepalived/capkk-check-apiserver.sh 755 6b99e0d99c131f15d21f6fdbd3218f05d0d7a891e23b3d1bf27ef8dcff462284 IyEvYmluL3NoCiMgTWFuYWdlZCBieSBjYXBray1ycyAoY29udHJvbFBsYW5lTG9hZEJhbGFuY2VyLnR5cGU6IEtlZXBhbGl2ZWQpOyByZXdyaXR0ZW4gd2hlbiB0aGUgY29udHJvbCBwbGFuZSBjaGFuZ2VzLgojIGtlZXBhbGl2ZWQncyBjaGVjayBvZiB0aGUgbG9jYWwgQVBJIHNlcnZlcjogZXhpdCAwIHdoaWxlIGl0cyAvcmVhZHl6IGFuc3dlcnMgKGN1cmwpLCBvciwgb24gYSBob3N0IHdpdGhvdXQKIyBjdXJsLCB3aGlsZSBpdCBhY2NlcHRzIGEgVENQIGNvbm5lY3Rpb24gKGJhc2gpLgppZiBjb21tYW5kIC12IGN1cmwgPi9kZXYvbnVsbCAyPiYxOyB0aGVuCiAgZXhlYyBjdXJsIC1mc2sgLS1tYXgtdGltZSAyIC1vIC9kZXYvbnVsbCBodHRwczovLzEyNy4wLjAuMTo2NDQzL3JlYWR5egpmaQpleGVjIHRpbWVvdXQgMiBiYXNoIC1jICc6IDwvZGV2L3RjcC8xMjcuMC4wLjEvNjQ0MycK
put_file /etc/keepalived/keepalived.conf 644 b9e095eac51be7b283358e28bb2b0df4833b04976d300748da9900144d41fedb IyBNYW5hZ2VkIGJ5IGNhcGtrLXJzIChjb250cm9sUGxhbmVMb2FkQmFsYW5jZXIudHlwZTogS2VlcGFsaXZlZCk7IHJld3JpdHRlbiB3aGVuIHRoZSBjb250cm9sIHBsYW5lIGNoYW5nZXMuCiMgVGhlIGNvbnRyb2wtcGxhbmUgVklQIG9mIEtLQ2x1c3RlciBkZWZhdWx0L2hhOiBWUlJQIHdpdGggdW5pY2FzdCBwZWVycyAodGhlIG90aGVyIGNvbnRyb2wtcGxhbmUgaG9zdHMpLgojIEVhY2ggaG9zdCBoYXMgaXRzIG93biBwcmlvcml0eSAoYnkgbmFtZTogdGhlIGZpcnN0IDIwMCwgZWFjaCBuZXh0IDIwIGxlc3MpLCBzbyBubyB0d28gYmFja3VwcyB0YWtlIHRoZSBWSVAgYXQKIyBvbmNlIHdoZW4gaXRzIGhvbGRlciBkaWVzOyBhIGhvc3Qgd2hvc2UgQVBJIHNlcnZlciBkb2VzIG5vdCBhbnN3ZXIgbG9zZXMgMTUwLCBtb3JlIHRoYW4gdGhlIHNwcmVhZCwKIyBhbmQgaGFuZHMgdGhlIFZJUCB0byBvbmUgd2hvc2UgZG9lcy4gQSBjaGVjayB0aGF0IGZhaWxzIGxvd2VycyB0aGUgcHJpb3JpdHkgaW5zdGVhZCBvZiBmb3JjaW5nIGEgZmF1bHQgc3RhdGU6IGEgbG9uZQojIGZpcnN0IGNvbnRyb2wgcGxhbmUgaG9sZHMgdGhlIFZJUCBiZWZvcmUgaXRzIEFQSSBzZXJ2ZXIgcnVucyAoa3ViZWFkbSBpbml0IHJlYWNoZXMgaXQgdGhyb3VnaCB0aGUgVklQKS4gQSBsb25lCiMgY29udHJvbCBwbGFuZSBoYXMgbm8gcGVlciB0byBhZHZlcnRpc2UgdG86IGtlZXBhbGl2ZWQgcmVmdXNlcyB1bmljYXN0IHdpdGhvdXQgcGVlcnMsIHNvIGl0IGFkdmVydGlzZXMgYnkKIyBtdWx0aWNhc3QgdW50aWwgYSBzZWNvbmQgb25lIGpvaW5zLgpnbG9iYWxfZGVmcyB7CiAgICByb3V0ZXJfaWQgY3AtMQogICAgZW5hYmxlX3NjcmlwdF9zZWN1cml0eQogICAgc2NyaXB0X3VzZXIgcm9vdAogICAgdnJycF9nYXJwX21hc3Rlcl9yZWZyZXNoIDYwCn0KCnZycnBfc2NyaXB0IGNhcGtrX2FwaXNlcnZlciB7CiAgICBzY3JpcHQgIi9ldGMva2VlcGFsaXZlZC9jYXBray1jaGVjay1hcGlzZXJ2ZXIuc2giCiAgICBpbnRlcnZhbCAxCiAgICB0aW1lb3V0IDIKICAgIGZhbGwgMgogICAgcmlzZSAyCiAgICB3ZWlnaHQgLTE1MAp9Cgp2cnJwX2luc3RhbmNlIGNhcGtrX3ZpcCB7CiAgICBzdGF0ZSBCQUNLVVAKICAgIGludGVyZmFjZSBldGgwCiAgICB2aXJ0dWFsX3JvdXRlcl9pZCA1MQogICAgcHJpb3JpdHkgMjAwCiAgICBhZHZlcnRfaW50IDEKICAgIHVuaWNhc3Rfc3JjX2lwIDE5OC4xOC41LjExCiAgICB1bmljYXN0X3BlZXIgewogICAgICAgIDE5OC4xOC41LjEyCiAgICAgICAgMTk4LjE4LjUuMTMKICAgIH0KICAgIHZpcnR1YWxfaXBhZGRyZXNzIHsKICAgICAgICAxOTguMTguNS4yMDAvMzIgZGV2IGV0aDAKICAgIH0KICAgIHRyYWNrX3NjcmlwdCB7CiAgICAgICAgY2Fwa2tfYXBpc2VydmVyCiAgICB9Cn0K
}
# Variables: STATE_DIR, VIP_CIDR, INTERFACE, PORT (haproxy's frontend), INSTALLED (the packages capkk installed in this run, space
# separated); KEEPALIVED_FILES and HAPROXY_FILES (functions writing each service's files with put_file).
# Each service is validated, enabled and (re)loaded only when one of its files changed or it does not run:
# an unchanged membership leaves the VIP and the connections through haproxy alone.
mkdir -p "$STATE_DIR"
for _p in $INSTALLED; do echo "$_p" >> "$STATE_DIR/packages"; done
if [ -f "$STATE_DIR/packages" ]; then sort -u -o "$STATE_DIR/packages" "$STATE_DIR/packages"; fi
# The VIP's address and interface, for the reset to drop it if keepalived left it behind.
printf '%s %s\n' "$VIP_CIDR" "$INTERFACE" > "$STATE_DIR/vip"
CHANGED=0
HAPROXY_FILES
_ha=$CHANGED
CHANGED=0
KEEPALIVED_FILES
_ka=$CHANGED
haproxy -c -q -f /etc/haproxy/haproxy.cfg
if keepalived --help 2>&1 | grep -q -- '--config-test'; then keepalived --config-test -f /etc/keepalived/keepalived.conf; fi
# haproxy first: the VIP is only worth holding once the frontend listens.
for _s in haproxy:$_ha keepalived:$_ka; do
  _n=${_s%%:*}
  systemctl enable -q "$_n" 2>/dev/null || systemctl enable "$_n"
  if ! systemctl is-active -q "$_n"; then
    systemctl restart "$_n"
    echo "started $_n"
    CHANGED=1
  elif [ "${_s#*:}" = 1 ]; then
    systemctl reload "$_n" || systemctl restart "$_n"
    echo "reloaded $_n"
    CHANGED=1
  fi
done
for _n in haproxy keepalived; do
  _i=0
  until systemctl is-active -q "$_n"; do
    _i=$((_i + 1))
    if [ "$_i" -ge 20 ]; then
      echo "$_n is not active:"
      systemctl status --no-pager -n 20 "$_n" || true
      exit 1
    fi
    sleep 0.5
  done
done
# An active haproxy is not yet a frontend: a configuration haproxy cannot load (e.g. a maxconn past the host's
# open-files limit) leaves a master process that systemd reports active with nothing listening. Listening on
# PORT (/proc/net/tcp{,6}, state 0A) is what the endpoint needs.
listening() {
  _hex=$(printf '%04X' "$1")
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null |
    awk -v p=":$_hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }'
}
_i=0
until listening "$PORT"; do
  _i=$((_i + 1))
  if [ "$_i" -ge 20 ]; then
    echo "haproxy is active but nothing listens on port $PORT:"
    journalctl -u haproxy --no-pager -n 20 2>/dev/null || systemctl status --no-pager -n 20 haproxy || true
    exit 1
  fi
  sleep 0.5
done
echo "keepalived and haproxy are active; haproxy listens on port $PORT"
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
