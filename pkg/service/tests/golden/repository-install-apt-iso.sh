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
STEP=install-packages
printf '\n@@capkk begin %s\n' "$STEP"
_t0=$(now_ns)
( set -e
CHANGED=0
ISO=/var/lib/capkk/repository/debian12-debs-amd64.iso
ISO_MOUNT=/mnt/capkk-repository
LOCK_WAIT=600
UPDATE=0
ISO_DIR=/var/lib/capkk/repository
set -- socat conntrack
# Variables: ISO (path on the host; empty: host sources), ISO_MOUNT.
if [ -n "$ISO" ]; then
  mkdir -p "$ISO_MOUNT"
  if ! mountpoint -q "$ISO_MOUNT"; then mount -o loop,ro "$ISO" "$ISO_MOUNT"; fi
  trap 'umount "$ISO_MOUNT" 2>/dev/null; rm -f /etc/yum.repos.d/capkk-iso.repo' EXIT
fi
# Variables: ISO, ISO_MOUNT, ISO_DIR, LOCK_WAIT (seconds), UPDATE (1: refresh the index). Arguments: the
# missing packages. With an ISO, apt sees only the ISO (a capkk source list, source parts disabled).
export DEBIAN_FRONTEND=noninteractive
i=0; while command -v fuser >/dev/null 2>&1 && fuser /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock >/dev/null 2>&1; do
  [ $i -ge "$LOCK_WAIT" ] && { echo "apt/dpkg lock still held after ${LOCK_WAIT}s" >&2; exit 75; }
  [ $i = 0 ] && echo 'waiting for the apt/dpkg lock'; sleep 2; i=$((i+2))
done
opts="-o DPkg::Lock::Timeout=$LOCK_WAIT"
if [ -n "$ISO" ]; then
  printf 'deb [trusted=yes] file://%s ./\n' "$ISO_MOUNT" > "$ISO_DIR/iso.list"
  opts="$opts -o Dir::Etc::sourcelist=$ISO_DIR/iso.list -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0"
fi
# shellcheck disable=SC2086 # $opts holds several options (capkk constants, no spaces inside one)
if [ "$UPDATE" = 1 ] || [ -n "$ISO" ]; then apt-get $opts -q -y update; fi
# shellcheck disable=SC2086
apt-get $opts -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold -q -y install --no-install-recommends "$@"
CHANGED=1
[ "$CHANGED" = 1 ] && echo '@@capkk changed'
true
) 2>&1 </dev/null
_rc=$?
end_step "$STEP" "$_rc"
[ "$_rc" = 0 ] || exit "$_rc"
