# shellcheck shell=sh disable=SC2154 # MODE and DIR are prepended by capkk-chaos
# The disk-full fault inside a host (capkk-chaos prepends MODE=fill|free, DIR=the staging directory; MADE, where
# fill notes the directories it created, defaults to a file in /run).
#
# fill: an empty tmpfs without a free byte mounted over DIR, so that every write into it fails with ENOSPC
#       ("No space left on device"), as on a full disk. The node's own root file system is the machine's disk:
#       filling it would starve the management plane and every other host, so the full file system is a small
#       one of its own. What DIR held stays underneath and is back when the fault ends (a stronger fault than a
#       real full disk for the files staged before it: they seem gone for its length).
# free: the tmpfs unmounted; the directories fill created (on a host that had none) removed again if empty, so
#       that a clean host stays clean.
set -eu
made=${MADE:-/run/capkk-chaos-disk-full.made}
case $MODE in
  fill)
    if mountpoint -q "$DIR"; then
      echo "$DIR is a mount point already (an earlier fault not freed?)" >&2
      exit 1
    fi
    : >"$made"
    for d in "$(dirname "$DIR")" "$DIR"; do
      if [ ! -d "$d" ]; then
        mkdir "$d"
        echo "$d" >>"$made"
      fi
    done
    mount -t tmpfs -o size=64k,mode=0755 capkk-chaos-full "$DIR"
    # Every byte taken: dd ends at ENOSPC, which is the point.
    dd if=/dev/zero of="$DIR/.capkk-chaos-fill" bs=4k 2>/dev/null || true
    avail=$(df --output=avail -k "$DIR" | tail -n 1 | tr -d ' ')
    if [ "$avail" != 0 ]; then
      echo "$DIR still has ${avail} KiB free after the fill" >&2
      umount "$DIR"
      exit 1
    fi
    echo "full: $DIR"
    ;;
  free)
    if mountpoint -q "$DIR"; then
      # Lazily: an upload that failed may still hold a file open in it.
      umount -l "$DIR"
    fi
    if [ -f "$made" ]; then
      tac "$made" | while read -r d; do rmdir "$d" 2>/dev/null || true; done
      rm -f "$made"
    fi
    echo "freed: $DIR"
    ;;
  *)
    echo "MODE=$MODE: fill or free" >&2
    exit 2
    ;;
esac
