# disk_setup item. Variables: DEV, OVERWRITE (1: wipe first), TABLE (mbr or gpt), FULL (1: the last partition
# takes the rest). Arguments: pairs PERCENT TYPE. A disk that already has a partition table or a file system
# signature is left alone unless OVERWRITE is set.
dev=$DEV
[ -b "$dev" ] || { echo "$dev is not a block device" >&2; exit 1; }
if [ "$OVERWRITE" = 1 ]; then
  wipefs -a -- "$dev"
else
  pt=$(blkid -p -o value -s PTTYPE -- "$dev" 2>/dev/null || true)
  fs=$(blkid -p -o value -s TYPE -- "$dev" 2>/dev/null || true)
  if [ -n "$pt$fs" ]; then echo "$dev already holds ${pt:-$fs}: not partitioned (overwrite is false)"; exit 0; fi
fi
total=$(blockdev --getsz "$dev")
if [ "$TABLE" = mbr ]; then
  {
    echo 'label: dos'
    while [ $# -ge 2 ]; do
      if [ $# = 2 ] && [ "$FULL" = 1 ]; then echo ",,$2"; else echo ",$(( total * $1 / 100 )),$2"; fi
      shift 2
    done
  } | sfdisk --no-reread -- "$dev"
else
  n=0; c=$#
  while [ "$c" -ge 2 ]; do
    p=$1; ty=$2; shift 2; c=$((c - 2)); n=$((n + 1))
    if [ "$c" = 0 ] && [ "$FULL" = 1 ]; then
      set -- "$@" -n "$n:0:0" -t "$n:$ty"
    else
      set -- "$@" -n "$n:0:+$(( total * p / 100 / 2 ))K" -t "$n:$ty"
    fi
  done
  sgdisk "$@" -- "$dev"
fi
partprobe "$dev" 2>/dev/null || blockdev --rereadpt "$dev" 2>/dev/null || true
udevadm settle 2>/dev/null || true
