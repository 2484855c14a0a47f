# fs_setup item. Variables: DEV, WHOLE (1: a whole disk, whose partition table also counts as existing data),
# OVERWRITE (1/0), REPLACE (file system type that may be replaced; may be empty), FORCE (the mkfs force flag
# or empty). Arguments: the mkfs command without the device. An existing file system is kept unless OVERWRITE
# is set or it is of the REPLACE type.
dev=$DEV
[ -b "$dev" ] || { echo "$dev is not a block device" >&2; exit 1; }
cur=$(blkid -p -o value -s TYPE -- "$dev" 2>/dev/null || true)
if [ "$WHOLE" = 1 ]; then pt=$(blkid -p -o value -s PTTYPE -- "$dev" 2>/dev/null || true); else pt=; fi
if [ -n "$cur$pt" ] && [ "$OVERWRITE" = 0 ] && [ "$cur" != "$REPLACE" ]; then echo "$dev already holds ${cur:-$pt}: no file system created (overwrite is false)"; exit 0; fi
force=
if [ -n "$FORCE" ] && [ -n "$cur$pt" ]; then force=$FORCE; fi
"$@" ${force:+"$force"} "$dev"
