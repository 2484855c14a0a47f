# Variables: PM (dnf or yum), ISO, ISO_MOUNT, LOCK_WAIT, UPDATE, REPO_SHA, REPO_B64 (the temporary repo file
# used with an ISO). Arguments: the missing packages.
locked() { for f in /var/run/dnf.pid /var/run/yum.pid; do [ -f $f ] && kill -0 "$(cat $f)" 2>/dev/null && return 0; done; return 1; }
i=0; while locked; do
  [ $i -ge "$LOCK_WAIT" ] && { echo "$PM lock still held after ${LOCK_WAIT}s" >&2; exit 75; }
  [ $i = 0 ] && echo "waiting for the $PM lock"; sleep 2; i=$((i+2))
done
set -f # --disablerepo=* is a word for dnf, not a glob
opts=-y
if [ -n "$ISO" ]; then
  put_file /etc/yum.repos.d/capkk-iso.repo 644 "$REPO_SHA" "$REPO_B64"
  opts="$opts --disablerepo=* --enablerepo=capkk-iso"
fi
# shellcheck disable=SC2086 # $opts holds several options (capkk constants)
if [ "$UPDATE" = 1 ] || [ -n "$ISO" ]; then $PM $opts makecache; fi
# shellcheck disable=SC2086
$PM $opts install "$@"
CHANGED=1
