# Variables: ISO (path on the host; empty: host sources), ISO_MOUNT.
if [ -n "$ISO" ]; then
  mkdir -p "$ISO_MOUNT"
  if ! mountpoint -q "$ISO_MOUNT"; then mount -o loop,ro "$ISO" "$ISO_MOUNT"; fi
  trap 'umount "$ISO_MOUNT" 2>/dev/null; rm -f /etc/yum.repos.d/capkk-iso.repo' EXIT
fi
