# shellcheck shell=sh disable=SC2154 # MODE and DIR are prepended by capkk-chaos
# The disk-full fault inside a host (capkk-chaos prepends MODE=fill|free, DIR=the staging directory; STATE, the
# fault's own place, defaults to /run/capkk-chaos-disk-full).
#
# fill: DIR made full, as on a full disk, without filling the node's root file system (the machine's own disk:
#       it would starve the management plane and every other host): a small tmpfs at STATE, filled to its last
#       byte, is the upper layer of an overlay mounted over DIR. What DIR holds stays visible and readable, a file
#       a process had open before keeps growing, and every new file, overwrite or growth through DIR's path
#       fails with ENOSPC ("No space left on device"). (A bare full tmpfs over DIR hid the files staged before
#       the fault, and a download finished through an open descriptor was then missing for its checksum: a
#       fault no real disk makes.)
# free: the overlay and the tmpfs unmounted; the directories fill created (on a host that had none) removed
#       again if empty, so that a clean host stays clean. A file removed through DIR during the fault is back.
set -eu
state=${STATE:-/run/capkk-chaos-disk-full}
made=$state.made
case $MODE in
  fill)
    if mountpoint -q "$DIR" || [ -e "$state" ]; then
      echo "$DIR is full already (an earlier fault not freed? $state exists or $DIR is a mount point)" >&2
      exit 1
    fi
    : >"$made"
    for d in "$(dirname "$DIR")" "$DIR"; do
      # The provider may create it at this very moment (seen: `mkdir: File exists` after a test for it):
      # noted as made only when this mkdir made it.
      if mkdir "$d" 2>/dev/null; then
        echo "$d" >>"$made"
      elif [ ! -d "$d" ]; then
        echo "cannot create $d" >&2
        exit 1
      fi
    done
    mkdir "$state"
    mount -t tmpfs -o size=64k,mode=0700 capkk-chaos-full "$state"
    mkdir "$state/upper" "$state/work"
    mount -t overlay capkk-chaos-full -o "lowerdir=$DIR,upperdir=$state/upper,workdir=$state/work" "$DIR"
    # Every byte taken: dd ends at ENOSPC, which is the point.
    dd if=/dev/zero of="$state/fill" bs=4k 2>/dev/null || true
    avail=$(df --output=avail -k "$DIR" | tail -n 1 | tr -d ' ')
    if [ "$avail" != 0 ]; then
      echo "$DIR still has ${avail} KiB free after the fill" >&2
      umount "$DIR"
      umount "$state"
      rmdir "$state"
      exit 1
    fi
    echo "full: $DIR"
    ;;
  free)
    # Lazily: an upload that failed may still hold a file open in it.
    if mountpoint -q "$DIR"; then umount -l "$DIR"; fi
    if [ -d "$state" ]; then
      if mountpoint -q "$state"; then umount -l "$state"; fi
      rmdir "$state"
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
