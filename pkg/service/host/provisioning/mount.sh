# mounts item. Variables: SPEC, MP (mount point), SWAP (1/0); step_data prints the fstab line. Adds the fstab
# entry unless the mount point already has one, then mounts it (or swapon).
touch /etc/fstab
if awk -v s="$SPEC" -v m="$MP" '$1 == s && $2 == m { f = 1 } END { exit !f }' /etc/fstab; then echo 'fstab entry exists'; else
  step_data >> /etc/fstab
fi
if [ "$SWAP" = 1 ]; then
  if ! awk 'NR > 1 { print $1 }' /proc/swaps | grep -qxF -- "$(readlink -f "$SPEC" 2>/dev/null || echo "$SPEC")"; then swapon "$SPEC"; fi
else
  umask 022
  mkdir -p -- "$MP"
  if ! mountpoint -q "$MP"; then mount "$MP"; fi
fi
