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
