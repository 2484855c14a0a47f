# Arguments: the owned paths (bootstrap::OWNED_PATHS). What is mounted strictly under them (pod volumes: NFS,
# CSI, bind mounts) is unmounted first, deepest first; rm never crosses into another file system
# (--one-file-system), and an owned path that is itself a mount point keeps its mount and loses its content
# only. A mount that stays is reported and fails the step: the host is then quarantined, not freed.
# mounts_under P: mount points strictly under P, deepest first (field 5 of mountinfo, octal escapes decoded).
mounts_under() {
  awk -v p="$1" '{ m = $5; gsub(/\\040/, " ", m); gsub(/\\011/, "\t", m); gsub(/\\012/, "\n", m); gsub(/\\134/, "\\", m); if (index(m, p "/") == 1) print m }' /proc/self/mountinfo 2>/dev/null | sort -r
}
is_mount_point() {
  awk -v p="$1" '{ m = $5; gsub(/\\040/, " ", m); gsub(/\\134/, "\\", m); if (m == p) f = 1 } END { exit !f }' /proc/self/mountinfo 2>/dev/null
}
left=
for p in "$@"; do
  if [ -n "$(mounts_under "$p")" ]; then
    CHANGED=1
    mounts_under "$p" | while IFS= read -r m; do
      if umount -- "$m" 2>/dev/null; then echo "unmounted $m"; else echo "could not unmount $m"; fi
    done
    if [ -n "$(mounts_under "$p")" ]; then left="$left $p"; continue; fi
  fi
  if is_mount_point "$p"; then
    find "$p" -xdev -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system -- {} +
    echo "emptied $p (a mount point: kept)"; CHANGED=1
  elif [ -e "$p" ] || [ -L "$p" ]; then
    rm -rf --one-file-system -- "$p"; echo "removed $p"; CHANGED=1
  fi
done
if [ "$CHANGED" = 1 ] && command -v systemctl >/dev/null 2>&1; then systemctl daemon-reload; fi
if [ -n "$left" ]; then
  echo "file systems are still mounted under:$left; those paths were left in place (the host is quarantined, not freed)"
  exit 75
fi
