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
STEP=install-kubeadm
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
F=/var/lib/capkk/staging/0000000000000000000000000000000000000000000000000000000000000000
DEST=/usr/local/bin/kubeadm
MODE=755
# Variables: F (staged file), DEST (install path), MODE (octal).
mkdir -p "$(dirname "$DEST")"
install -m "$MODE" "$F" "$DEST"
rm -f "$F"
echo "installed $DEST"
CHANGED=1
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=install-kubelet
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
F=/var/lib/capkk/staging/0000000000000000000000000000000000000000000000000000000000000001
DEST=/usr/local/bin/kubelet
MODE=755
# Variables: F (staged file), DEST (install path), MODE (octal).
mkdir -p "$(dirname "$DEST")"
install -m "$MODE" "$F" "$DEST"
rm -f "$F"
echo "installed $DEST"
CHANGED=1
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=install-kubectl
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
F=/var/lib/capkk/staging/0000000000000000000000000000000000000000000000000000000000000002
DEST=/usr/local/bin/kubectl
MODE=755
# Variables: F (staged file), DEST (install path), MODE (octal).
mkdir -p "$(dirname "$DEST")"
install -m "$MODE" "$F" "$DEST"
rm -f "$F"
echo "installed $DEST"
CHANGED=1
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=install-cni
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
F=/var/lib/capkk/staging/0000000000000000000000000000000000000000000000000000000000000003
DIR=/opt/cni/bin
PROBE=/opt/cni/bin/loopback
SHA=0000000000000000000000000000000000000000000000000000000000000003
STAMPS=/var/lib/capkk/artifacts
ID=cni
LABEL='cni v1.3.0 (amd64)'
# Variables: F (staged archive), DIR (extract into), PROBE (a file the archive must provide), SHA (its digest),
# STAMPS (stamp directory), ID (artifact id), LABEL.
mkdir -p "$DIR" "$STAMPS"
tar -xzf "$F" -C "$DIR" --no-same-owner
[ -e "$PROBE" ] || { echo "archive $LABEL did not provide $PROBE"; exit 1; }
printf '%s\n' "$SHA" > "$STAMPS/$ID"
rm -f "$F"
echo "extracted $LABEL into $DIR"
CHANGED=1
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
STEP=kubelet-unit
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
put_file /etc/systemd/system/kubelet.service 644 3b4cb92a2a70b5abfdb1caf18da29414fff4313337da1fbed144b469ab9d7c03 W1VuaXRdCkRlc2NyaXB0aW9uPWt1YmVsZXQ6IFRoZSBLdWJlcm5ldGVzIE5vZGUgQWdlbnQKRG9jdW1lbnRhdGlvbj1odHRwczovL2t1YmVybmV0ZXMuaW8vZG9jcy8KV2FudHM9bmV0d29yay1vbmxpbmUudGFyZ2V0CkFmdGVyPW5ldHdvcmstb25saW5lLnRhcmdldAoKW1NlcnZpY2VdCkV4ZWNTdGFydD0vdXNyL2xvY2FsL2Jpbi9rdWJlbGV0ClJlc3RhcnQ9YWx3YXlzClN0YXJ0TGltaXRJbnRlcnZhbD0wClJlc3RhcnRTZWM9MTAKCltJbnN0YWxsXQpXYW50ZWRCeT1tdWx0aS11c2VyLnRhcmdldAo=
put_file /etc/systemd/system/kubelet.service.d/10-kubeadm.conf 644 34b06239a470444ba8d9d6ec2d4e5cc0ad25890c17e98199b4ebeb9f6b0929de IyBJbnN0YWxsZWQgYnkgY2Fwa2suCltTZXJ2aWNlXQpFbnZpcm9ubWVudD0iS1VCRUxFVF9LVUJFQ09ORklHX0FSR1M9LS1ib290c3RyYXAta3ViZWNvbmZpZz0vZXRjL2t1YmVybmV0ZXMvYm9vdHN0cmFwLWt1YmVsZXQuY29uZiAtLWt1YmVjb25maWc9L2V0Yy9rdWJlcm5ldGVzL2t1YmVsZXQuY29uZiIKRW52aXJvbm1lbnQ9IktVQkVMRVRfQ09ORklHX0FSR1M9LS1jb25maWc9L3Zhci9saWIva3ViZWxldC9jb25maWcueWFtbCIKRW52aXJvbm1lbnRGaWxlPS0vdmFyL2xpYi9rdWJlbGV0L2t1YmVhZG0tZmxhZ3MuZW52CkVudmlyb25tZW50RmlsZT0tL2V0Yy9kZWZhdWx0L2t1YmVsZXQKRXhlY1N0YXJ0PQpFeGVjU3RhcnQ9L3Vzci9sb2NhbC9iaW4va3ViZWxldCAkS1VCRUxFVF9LVUJFQ09ORklHX0FSR1MgJEtVQkVMRVRfQ09ORklHX0FSR1MgJEtVQkVMRVRfQ0FQS0tfQVJHUyAkS1VCRUxFVF9LVUJFQURNX0FSR1MgJEtVQkVMRVRfRVhUUkFfQVJHUwpFbnZpcm9ubWVudD0iS1VCRUxFVF9DQVBLS19BUkdTPS0tbm9kZS1pcD0xOTguMTguMC4xMSAtLWhvc3RuYW1lLW92ZXJyaWRlPW5vZGUtMSIK
# Preceded by the put_file calls of the kubelet unit and drop-in.
if [ "$CHANGED" = 1 ]; then systemctl daemon-reload; fi
if ! systemctl is-enabled -q kubelet >/dev/null 2>&1; then systemctl enable kubelet; CHANGED=1; fi
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
