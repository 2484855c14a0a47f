D=/var/lib/capkk/provisioning
PLAN=4fb864f5a900a85a
S=/run/cluster-api/bootstrap-success.complete
LOCK_WAIT=300
TAIL_BYTES=2048
# Shared definitions of every provisioning script. Variables: D (state dir), PLAN (plan hash), S (sentinel),
# LOCK_WAIT (seconds), TAIL_BYTES. RW: the paths this run wrote again (step.sh).
trap '' HUP
umask 077
J="$D/$PLAN.journal"
O="$D/$PLAN.out"
NL='
'
RW=
now_ms() { t=$(date +%s%N 2>/dev/null); case "$t" in *N|'') echo $(( $(date +%s) * 1000 ));; *) echo $(( t / 1000000 ));; esac; }
done_rc() { sed -n "s/^$1 \([0-9][0-9]*\)\$/\1/p" "$J" 2>/dev/null | tail -n 1; }
report() { t1=$(now_ms); if [ -s "$O" ]; then tl=$(tail -c "$TAIL_BYTES" "$O" | base64 | tr -d '\n'); rm -f "$O"; else tl=; fi; echo "@@capkk step $1 $2 $(( t1 - $3 )) $tl"; T=$t1; }
provisioned() { [ -e "$S" ] || case "$JD" in *"${NL}provisioned$NL"*) true;; *) false;; esac; }
mark_sentinel() { if [ -e "$O" ]; then rm -f "$O"; fi; if [ -e "$S" ]; then case "$JD" in *"${NL}provisioned$NL"*) ;; *) echo provisioned >> "$J"; JD="$JD${NL}provisioned$NL";; esac; fi; if provisioned; then echo '@@capkk sentinel 1'; else echo '@@capkk sentinel 0'; fi; }
if command -v flock >/dev/null 2>&1; then exec 9>>"$D/lock"; flock -w "$LOCK_WAIT" 9 || { echo '@@capkk busy'; exit 0; }; fi
JD="$NL$(cat "$J" 2>/dev/null)$NL"
T=$(now_ms)
# capkk probe
RERUN_FAILED=0
KUBEADM_IDS=f21a58b34dfa22ea
set -- ac214bd03ab2688c 863a1655667d68c5 a69e78759a98992e ee033a4deef804aa 4d8a268a51bbff27 99d3868a6cc185dc 371215cd7eca2395 99533c44f86467f9 831baafac329e610 73dc1cd82a5e8ddc c0b1ea3001c2d13e 5d1d2321f17f8b4e f21a58b34dfa22ea
# First exec of a run. Variables: RERUN_FAILED (1: a retry), KUBEADM_IDS (below). Arguments: every step id of
# the plan. Prints the journal and the kept output tails; when the sentinel exists (or the journal says provisioned) and this plan's
# journal is empty or complete, stops.
# A retry after a terminal failure forgets the command items whose last run failed (and their kept tails), so
# they run again once the host or its data was fixed; what succeeded stays done. Under the lock, before anything
# reads the journal.
if [ "$RERUN_FAILED" = 1 ] && [ -s "$J" ]; then
awk '$2 ~ /^[0-9]+$/ { rc[$1] = $2 } { id[NR] = $1; l[NR] = $0 } END { for (i = 1; i <= NR; i++) if (!(id[i] in rc) || rc[id[i]] == 0) print l[i] }' "$J" > "$J.new" && mv -f "$J.new" "$J"
JD="$NL$(cat "$J" 2>/dev/null)$NL"
for f in "$D/$PLAN".*.tail; do [ -e "$f" ] || continue; i=${f##*/}; i=${i#"$PLAN".}; case "$JD" in *"$NL${i%.tail} "[0-9]*) ;; *) rm -f "$f";; esac; done
fi
# Right after a boot (a host restarted under a run), what earlier phases installed may still be starting:
# kubeadm's preflight then finds no containerd socket (seen: `[ERROR ImagePull] ... containerd.sock: no such
# file`). The run first waits, bounded, until systemd says the boot is over (a no-op on a host up for long;
# without systemd, or on a host that stays `starting`, it goes on after the bound).
if command -v systemctl >/dev/null 2>&1 && command -v timeout >/dev/null 2>&1; then
timeout 90 systemctl is-system-running --wait >/dev/null 2>&1 9>&- || true
fi
# A kubeadm init or join that the host's death cut short (its `start` without an exit code: under the lock no
# run of ours is alive) left kubeadm's half-done state, over which a second kubeadm refuses to run (its static
# pod manifests, the etcd directory, the ports of the static pods the kubelet started again at boot). It is
# undone first: `kubeadm reset -f` removes it (and this node's etcd member, when it had joined); the write_files
# items whose files the reset removed (/etc/kubernetes/pki) are then written again (write-file-kept.sh) and the
# item runs again. Variables: KUBEADM_IDS (the ids of the command items that run kubeadm init or join).
for k in $KUBEADM_IDS; do
if [ "$(awk -v id="$k" '$1 == id { l = $2 } END { print l }' "$J" 2>/dev/null)" = start ] && command -v kubeadm >/dev/null 2>&1; then
kubeadm reset -f < /dev/null > "$D/$PLAN.undo" 2>&1 9>&-
echo "@@capkk undo $k $?"
fi
done
echo '@@capkk journal'; cat "$J" 2>/dev/null; echo '@@capkk journal-end'
for f in "$D/$PLAN".*.tail; do [ -e "$f" ] || continue; i=${f##*/}; i=${i#"$PLAN".}; echo "@@capkk tail ${i%.tail} $(cat "$f")"; done
if provisioned; then
if [ ! -s "$J" ] || printf '%s\n' "$@" | awk 'NR == FNR { want[$1] = 1; next } $2 ~ /^[0-9]+$/ { delete want[$1] } END { for (k in want) exit 1 }' - "$J"; then
echo '@@capkk sentinel 1'; echo '@@capkk skipall'; exit 0
fi
fi
# capkk step ac214bd03ab2688c
step_body() {
DEV=/dev/vdc
OVERWRITE=1
TABLE=mbr
FULL=1
set -- 50 83 50 82
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
}
step_kept() {
KEPT_PATH=
}
ID=ac214bd03ab2688c
# A non-command step. Variables: ID (step id); step_body does the work, step_kept says whether a step the
# journal shows done still holds (write-file-kept.sh; else true). Runs under set -e with cloud-init's umask,
# journaled "<id> 0" only after it succeeded; a failure stops the script. A done step that no longer holds runs
# again and is not journaled a second time (one exit code per step: the journal's readers count them).
case "$JD" in *"$NL$ID "[0-9]*) r=$(done_rc "$ID");; *) r=;; esac
if [ -n "$r" ] && step_kept; then echo "@@capkk already $ID $r"; else
t0=$T
(
set -e
umask 022
if [ -n "$r" ]; then echo "journaled done, but $KEPT_PATH is gone: written again"; fi
step_body
)> "$O" 2>&1 9>&-
rc=$?
if [ $rc -eq 0 ] && [ -z "$r" ]; then echo "$ID 0" >> "$J"; fi
if [ $rc -eq 0 ] && [ -n "$r" ] && [ -n "$KEPT_PATH" ]; then RW="$RW$NL$KEPT_PATH$NL"; fi
report "$ID" $rc "$t0"
if [ $rc -ne 0 ]; then mark_sentinel; exit 0; fi
fi
# capkk step 863a1655667d68c5
step_body() {
DEV=/dev/vdd
OVERWRITE=0
TABLE=gpt
FULL=1
set -- 30 8300 70 8300
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
}
step_kept() {
KEPT_PATH=
}
ID=863a1655667d68c5
# A non-command step. Variables: ID (step id); step_body does the work, step_kept says whether a step the
# journal shows done still holds (write-file-kept.sh; else true). Runs under set -e with cloud-init's umask,
# journaled "<id> 0" only after it succeeded; a failure stops the script. A done step that no longer holds runs
# again and is not journaled a second time (one exit code per step: the journal's readers count them).
case "$JD" in *"$NL$ID "[0-9]*) r=$(done_rc "$ID");; *) r=;; esac
if [ -n "$r" ] && step_kept; then echo "@@capkk already $ID $r"; else
t0=$T
(
set -e
umask 022
if [ -n "$r" ]; then echo "journaled done, but $KEPT_PATH is gone: written again"; fi
step_body
)> "$O" 2>&1 9>&-
rc=$?
if [ $rc -eq 0 ] && [ -z "$r" ]; then echo "$ID 0" >> "$J"; fi
if [ $rc -eq 0 ] && [ -n "$r" ] && [ -n "$KEPT_PATH" ]; then RW="$RW$NL$KEPT_PATH$NL"; fi
report "$ID" $rc "$t0"
if [ $rc -ne 0 ]; then mark_sentinel; exit 0; fi
fi
# capkk step a69e78759a98992e
step_body() {
DEV=/dev/vdc2
WHOLE=0
OVERWRITE=0
REPLACE=''
FORCE=''
set -- mkswap
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
}
step_kept() {
KEPT_PATH=
}
ID=a69e78759a98992e
# A non-command step. Variables: ID (step id); step_body does the work, step_kept says whether a step the
# journal shows done still holds (write-file-kept.sh; else true). Runs under set -e with cloud-init's umask,
# journaled "<id> 0" only after it succeeded; a failure stops the script. A done step that no longer holds runs
# again and is not journaled a second time (one exit code per step: the journal's readers count them).
case "$JD" in *"$NL$ID "[0-9]*) r=$(done_rc "$ID");; *) r=;; esac
if [ -n "$r" ] && step_kept; then echo "@@capkk already $ID $r"; else
t0=$T
(
set -e
umask 022
if [ -n "$r" ]; then echo "journaled done, but $KEPT_PATH is gone: written again"; fi
step_body
)> "$O" 2>&1 9>&-
rc=$?
if [ $rc -eq 0 ] && [ -z "$r" ]; then echo "$ID 0" >> "$J"; fi
if [ $rc -eq 0 ] && [ -n "$r" ] && [ -n "$KEPT_PATH" ]; then RW="$RW$NL$KEPT_PATH$NL"; fi
report "$ID" $rc "$t0"
if [ $rc -ne 0 ]; then mark_sentinel; exit 0; fi
fi
# capkk step ee033a4deef804aa
step_body() {
DEV=/dev/vdd
WHOLE=1
OVERWRITE=0
REPLACE=ntfs
FORCE=-f
set -- mkfs.xfs -L big -m crc=1
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
}
step_kept() {
KEPT_PATH=
}
ID=ee033a4deef804aa
# A non-command step. Variables: ID (step id); step_body does the work, step_kept says whether a step the
# journal shows done still holds (write-file-kept.sh; else true). Runs under set -e with cloud-init's umask,
# journaled "<id> 0" only after it succeeded; a failure stops the script. A done step that no longer holds runs
# again and is not journaled a second time (one exit code per step: the journal's readers count them).
case "$JD" in *"$NL$ID "[0-9]*) r=$(done_rc "$ID");; *) r=;; esac
if [ -n "$r" ] && step_kept; then echo "@@capkk already $ID $r"; else
t0=$T
(
set -e
umask 022
if [ -n "$r" ]; then echo "journaled done, but $KEPT_PATH is gone: written again"; fi
step_body
)> "$O" 2>&1 9>&-
rc=$?
if [ $rc -eq 0 ] && [ -z "$r" ]; then echo "$ID 0" >> "$J"; fi
if [ $rc -eq 0 ] && [ -n "$r" ] && [ -n "$KEPT_PATH" ]; then RW="$RW$NL$KEPT_PATH$NL"; fi
report "$ID" $rc "$t0"
if [ $rc -ne 0 ]; then mark_sentinel; exit 0; fi
fi
# capkk step 4d8a268a51bbff27
step_body() {
step_data() {
base64 -d <<'CAPKK_DATA'
L2Rldi92ZGMyCW5vbmUJc3dhcAlzdyxjb21tZW50PWNhcGtrCTAJMAo=
CAPKK_DATA
}
SPEC=/dev/vdc2
MP=none
SWAP=1
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
}
step_kept() {
KEPT_PATH=
}
ID=4d8a268a51bbff27
# A non-command step. Variables: ID (step id); step_body does the work, step_kept says whether a step the
# journal shows done still holds (write-file-kept.sh; else true). Runs under set -e with cloud-init's umask,
# journaled "<id> 0" only after it succeeded; a failure stops the script. A done step that no longer holds runs
# again and is not journaled a second time (one exit code per step: the journal's readers count them).
case "$JD" in *"$NL$ID "[0-9]*) r=$(done_rc "$ID");; *) r=;; esac
if [ -n "$r" ] && step_kept; then echo "@@capkk already $ID $r"; else
t0=$T
(
set -e
umask 022
if [ -n "$r" ]; then echo "journaled done, but $KEPT_PATH is gone: written again"; fi
step_body
)> "$O" 2>&1 9>&-
rc=$?
if [ $rc -eq 0 ] && [ -z "$r" ]; then echo "$ID 0" >> "$J"; fi
if [ $rc -eq 0 ] && [ -n "$r" ] && [ -n "$KEPT_PATH" ]; then RW="$RW$NL$KEPT_PATH$NL"; fi
report "$ID" $rc "$t0"
if [ $rc -ne 0 ]; then mark_sentinel; exit 0; fi
fi
# capkk step 99d3868a6cc185dc
step_body() {
step_data() {
base64 -d <<'CAPKK_DATA'
TEFCRUw9YmlnCS9zcnYvYmlnCXhmcwlkZWZhdWx0cyxub2ZhaWwsY29tbWVudD1jYXBrawkwCTIK
CAPKK_DATA
}
SPEC=LABEL=big
MP=/srv/big
SWAP=0
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
}
step_kept() {
KEPT_PATH=
}
ID=99d3868a6cc185dc
# A non-command step. Variables: ID (step id); step_body does the work, step_kept says whether a step the
# journal shows done still holds (write-file-kept.sh; else true). Runs under set -e with cloud-init's umask,
# journaled "<id> 0" only after it succeeded; a failure stops the script. A done step that no longer holds runs
# again and is not journaled a second time (one exit code per step: the journal's readers count them).
case "$JD" in *"$NL$ID "[0-9]*) r=$(done_rc "$ID");; *) r=;; esac
if [ -n "$r" ] && step_kept; then echo "@@capkk already $ID $r"; else
t0=$T
(
set -e
umask 022
if [ -n "$r" ]; then echo "journaled done, but $KEPT_PATH is gone: written again"; fi
step_body
)> "$O" 2>&1 9>&-
rc=$?
if [ $rc -eq 0 ] && [ -z "$r" ]; then echo "$ID 0" >> "$J"; fi
if [ $rc -eq 0 ] && [ -n "$r" ] && [ -n "$KEPT_PATH" ]; then RW="$RW$NL$KEPT_PATH$NL"; fi
report "$ID" $rc "$t0"
if [ $rc -ne 0 ]; then mark_sentinel; exit 0; fi
fi
# capkk step 371215cd7eca2395
step_body() {
step_data() {
base64 -d <<'CAPKK_DATA'
YTogJyQoaWQpJwo=
CAPKK_DATA
}
P='/etc/we ird/it'\''s $HOME.conf'
DIR='/etc/we ird'
MODE=0600
APPEND=0
OWNER=nobody:nogroup
CONTENT=1
# write_files item. Variables: P (path), DIR (its directory), MODE (octal), APPEND, OWNER, CONTENT (1:
# step_data prints the bytes). Atomic: a mktemp file beside the target (unpredictable name, 0600 while it is
# written), exact bytes, owner, then mode, then rename. Parent directories are created 0755 like cloud-init's
# ensure_dir.
d=$DIR
[ -d "$d" ] || { umask 022; mkdir -p -- "$d"; }
t=$(mktemp "$d/.capkk.XXXXXX")
trap 'if [ -e "$t" ]; then rm -f "$t"; fi' EXIT
if [ "$APPEND" = 1 ] && [ -e "$P" ]; then cat -- "$P" >> "$t"; fi
if [ "$CONTENT" = 1 ]; then step_data >> "$t"; fi
case "$OWNER" in
  root) ;;
  root:root) if [ -g "$d" ]; then chown -- root:root "$t"; fi ;;
  *) chown -- "$OWNER" "$t" ;;
esac
chmod "$MODE" "$t"
mv -f -- "$t" "$P"
}
step_kept() {
P='/etc/we ird/it'\''s $HOME.conf'
# Whether a write_files item the journal shows done still holds on the host (step.sh's `step_kept`). It does
# not when its file is gone: a reboot empties /run and /tmp, where CABPK puts kubeadm's configuration, and the
# resumed run's kubeadm would find nothing. Nor when this run has already written the same path again (an
# append after its file was rewritten). Variables: P (path). Sets KEPT_PATH for step.sh.
KEPT_PATH=$P
[ -e "$P" ] || [ -L "$P" ] || return 1
case "$RW" in *"$NL$P$NL"*) return 1;; esac
}
ID=371215cd7eca2395
# A non-command step. Variables: ID (step id); step_body does the work, step_kept says whether a step the
# journal shows done still holds (write-file-kept.sh; else true). Runs under set -e with cloud-init's umask,
# journaled "<id> 0" only after it succeeded; a failure stops the script. A done step that no longer holds runs
# again and is not journaled a second time (one exit code per step: the journal's readers count them).
case "$JD" in *"$NL$ID "[0-9]*) r=$(done_rc "$ID");; *) r=;; esac
if [ -n "$r" ] && step_kept; then echo "@@capkk already $ID $r"; else
t0=$T
(
set -e
umask 022
if [ -n "$r" ]; then echo "journaled done, but $KEPT_PATH is gone: written again"; fi
step_body
)> "$O" 2>&1 9>&-
rc=$?
if [ $rc -eq 0 ] && [ -z "$r" ]; then echo "$ID 0" >> "$J"; fi
if [ $rc -eq 0 ] && [ -n "$r" ] && [ -n "$KEPT_PATH" ]; then RW="$RW$NL$KEPT_PATH$NL"; fi
report "$ID" $rc "$t0"
if [ $rc -ne 0 ]; then mark_sentinel; exit 0; fi
fi
# capkk step 99533c44f86467f9
step_body() {
step_data() {
base64 -d <<'CAPKK_DATA'
IyEvYmluL3NoCmVjaG8gaGkK
CAPKK_DATA
}
P=/usr/local/bin/tool
DIR=/usr/local/bin
MODE=0755
APPEND=1
OWNER=root:root
CONTENT=1
# write_files item. Variables: P (path), DIR (its directory), MODE (octal), APPEND, OWNER, CONTENT (1:
# step_data prints the bytes). Atomic: a mktemp file beside the target (unpredictable name, 0600 while it is
# written), exact bytes, owner, then mode, then rename. Parent directories are created 0755 like cloud-init's
# ensure_dir.
d=$DIR
[ -d "$d" ] || { umask 022; mkdir -p -- "$d"; }
t=$(mktemp "$d/.capkk.XXXXXX")
trap 'if [ -e "$t" ]; then rm -f "$t"; fi' EXIT
if [ "$APPEND" = 1 ] && [ -e "$P" ]; then cat -- "$P" >> "$t"; fi
if [ "$CONTENT" = 1 ]; then step_data >> "$t"; fi
case "$OWNER" in
  root) ;;
  root:root) if [ -g "$d" ]; then chown -- root:root "$t"; fi ;;
  *) chown -- "$OWNER" "$t" ;;
esac
chmod "$MODE" "$t"
mv -f -- "$t" "$P"
}
step_kept() {
P=/usr/local/bin/tool
# Whether a write_files item the journal shows done still holds on the host (step.sh's `step_kept`). It does
# not when its file is gone: a reboot empties /run and /tmp, where CABPK puts kubeadm's configuration, and the
# resumed run's kubeadm would find nothing. Nor when this run has already written the same path again (an
# append after its file was rewritten). Variables: P (path). Sets KEPT_PATH for step.sh.
KEPT_PATH=$P
[ -e "$P" ] || [ -L "$P" ] || return 1
case "$RW" in *"$NL$P$NL"*) return 1;; esac
}
ID=99533c44f86467f9
# A non-command step. Variables: ID (step id); step_body does the work, step_kept says whether a step the
# journal shows done still holds (write-file-kept.sh; else true). Runs under set -e with cloud-init's umask,
# journaled "<id> 0" only after it succeeded; a failure stops the script. A done step that no longer holds runs
# again and is not journaled a second time (one exit code per step: the journal's readers count them).
case "$JD" in *"$NL$ID "[0-9]*) r=$(done_rc "$ID");; *) r=;; esac
if [ -n "$r" ] && step_kept; then echo "@@capkk already $ID $r"; else
t0=$T
(
set -e
umask 022
if [ -n "$r" ]; then echo "journaled done, but $KEPT_PATH is gone: written again"; fi
step_body
)> "$O" 2>&1 9>&-
rc=$?
if [ $rc -eq 0 ] && [ -z "$r" ]; then echo "$ID 0" >> "$J"; fi
if [ $rc -eq 0 ] && [ -n "$r" ] && [ -n "$KEPT_PATH" ]; then RW="$RW$NL$KEPT_PATH$NL"; fi
report "$ID" $rc "$t0"
if [ $rc -ne 0 ]; then mark_sentinel; exit 0; fi
fi
# capkk step 831baafac329e610
step_body() {
P=/etc/empty
DIR=/etc
MODE=0644
APPEND=0
OWNER=root:root
CONTENT=0
# write_files item. Variables: P (path), DIR (its directory), MODE (octal), APPEND, OWNER, CONTENT (1:
# step_data prints the bytes). Atomic: a mktemp file beside the target (unpredictable name, 0600 while it is
# written), exact bytes, owner, then mode, then rename. Parent directories are created 0755 like cloud-init's
# ensure_dir.
d=$DIR
[ -d "$d" ] || { umask 022; mkdir -p -- "$d"; }
t=$(mktemp "$d/.capkk.XXXXXX")
trap 'if [ -e "$t" ]; then rm -f "$t"; fi' EXIT
if [ "$APPEND" = 1 ] && [ -e "$P" ]; then cat -- "$P" >> "$t"; fi
if [ "$CONTENT" = 1 ]; then step_data >> "$t"; fi
case "$OWNER" in
  root) ;;
  root:root) if [ -g "$d" ]; then chown -- root:root "$t"; fi ;;
  *) chown -- "$OWNER" "$t" ;;
esac
chmod "$MODE" "$t"
mv -f -- "$t" "$P"
}
step_kept() {
P=/etc/empty
# Whether a write_files item the journal shows done still holds on the host (step.sh's `step_kept`). It does
# not when its file is gone: a reboot empties /run and /tmp, where CABPK puts kubeadm's configuration, and the
# resumed run's kubeadm would find nothing. Nor when this run has already written the same path again (an
# append after its file was rewritten). Variables: P (path). Sets KEPT_PATH for step.sh.
KEPT_PATH=$P
[ -e "$P" ] || [ -L "$P" ] || return 1
case "$RW" in *"$NL$P$NL"*) return 1;; esac
}
ID=831baafac329e610
# A non-command step. Variables: ID (step id); step_body does the work, step_kept says whether a step the
# journal shows done still holds (write-file-kept.sh; else true). Runs under set -e with cloud-init's umask,
# journaled "<id> 0" only after it succeeded; a failure stops the script. A done step that no longer holds runs
# again and is not journaled a second time (one exit code per step: the journal's readers count them).
case "$JD" in *"$NL$ID "[0-9]*) r=$(done_rc "$ID");; *) r=;; esac
if [ -n "$r" ] && step_kept; then echo "@@capkk already $ID $r"; else
t0=$T
(
set -e
umask 022
if [ -n "$r" ]; then echo "journaled done, but $KEPT_PATH is gone: written again"; fi
step_body
)> "$O" 2>&1 9>&-
rc=$?
if [ $rc -eq 0 ] && [ -z "$r" ]; then echo "$ID 0" >> "$J"; fi
if [ $rc -eq 0 ] && [ -n "$r" ] && [ -n "$KEPT_PATH" ]; then RW="$RW$NL$KEPT_PATH$NL"; fi
report "$ID" $rc "$t0"
if [ $rc -ne 0 ]; then mark_sentinel; exit 0; fi
fi
# capkk step 73dc1cd82a5e8ddc
step_body() {
data_hashed() {
base64 -d <<'CAPKK_DATA'
b3BzOiQ2JHNhbHQkaGFzaAo=
CAPKK_DATA
}
data_plain() {
base64 -d <<'CAPKK_DATA'
b3BzOnBsJ2Fpbgo=
CAPKK_DATA
}
data_sudo() {
base64 -d <<'CAPKK_DATA'
b3BzIEFMTD0oQUxMKSBOT1BBU1NXRDpBTEwK
CAPKK_DATA
}
data_keys() {
base64 -d <<'CAPKK_DATA'
c3NoLWVkMjU1MTkgQUFBQSBvcHNAZXhhbXBsZQo=
CAPKK_DATA
}
NAME=ops
UGROUPS=adm,wheel
HASHED=1
PLAIN=1
LOCK=1
SUDO=1
SUDO_FILE=/etc/sudoers.d/90-capkk-ops
KEYS=1
set -- --home-dir /srv/ops --uid 1500 --groups adm,wheel --create-home -- ops
# users item. Variables: NAME, UGROUPS (comma-separated, may be empty), HASHED, PLAIN, LOCK, SUDO, KEYS (1/0),
# SUDO_FILE. Arguments: the useradd arguments. data_hashed / data_plain print "name:password" lines for
# chpasswd, data_sudo the sudoers rules, data_keys the authorized keys.
if [ -n "$UGROUPS" ]; then
  _ifs=$IFS; IFS=,; set -f
  for g in $UGROUPS; do getent group "$g" >/dev/null || groupadd -- "$g"; done
  IFS=$_ifs; set +f
fi
if id -u -- "$NAME" >/dev/null 2>&1; then
  echo 'user exists: not re-created'
  if [ -n "$UGROUPS" ]; then usermod -a -G "$UGROUPS" -- "$NAME"; fi
else
  useradd "$@"
fi
if [ "$HASHED" = 1 ]; then data_hashed | chpasswd -e; fi
if [ "$PLAIN" = 1 ]; then data_plain | chpasswd; fi
if [ "$LOCK" = 1 ]; then usermod --lock -- "$NAME"; fi
if [ "$SUDO" = 1 ]; then
  umask 077
  st=$(mktemp /etc/sudoers.d/.capkk.XXXXXX)
  trap 'rm -f "$st"' EXIT
  data_sudo > "$st"
  chmod 0440 "$st"
  if command -v visudo >/dev/null 2>&1; then visudo -cf "$st"; fi
  mv -f -- "$st" "$SUDO_FILE"
fi
if [ "$KEYS" = 1 ]; then
  h=$(getent passwd "$NAME" | cut -d: -f6)
  [ -n "$h" ]
  g=$(id -gn -- "$NAME")
  mkdir -p -- "$h/.ssh"
  chmod 700 "$h/.ssh"
  chown -- "$NAME:$g" "$h/.ssh"
  ak="$h/.ssh/authorized_keys"
  touch "$ak"
  data_keys | while IFS= read -r k; do [ -z "$k" ] || grep -qxF -- "$k" "$ak" || printf '%s\n' "$k" >> "$ak"; done
  chmod 600 "$ak"
  chown -- "$NAME:$g" "$ak"
fi
}
step_kept() {
KEPT_PATH=
}
ID=73dc1cd82a5e8ddc
# A non-command step. Variables: ID (step id); step_body does the work, step_kept says whether a step the
# journal shows done still holds (write-file-kept.sh; else true). Runs under set -e with cloud-init's umask,
# journaled "<id> 0" only after it succeeded; a failure stops the script. A done step that no longer holds runs
# again and is not journaled a second time (one exit code per step: the journal's readers count them).
case "$JD" in *"$NL$ID "[0-9]*) r=$(done_rc "$ID");; *) r=;; esac
if [ -n "$r" ] && step_kept; then echo "@@capkk already $ID $r"; else
t0=$T
(
set -e
umask 022
if [ -n "$r" ]; then echo "journaled done, but $KEPT_PATH is gone: written again"; fi
step_body
)> "$O" 2>&1 9>&-
rc=$?
if [ $rc -eq 0 ] && [ -z "$r" ]; then echo "$ID 0" >> "$J"; fi
if [ $rc -eq 0 ] && [ -n "$r" ] && [ -n "$KEPT_PATH" ]; then RW="$RW$NL$KEPT_PATH$NL"; fi
report "$ID" $rc "$t0"
if [ $rc -ne 0 ]; then mark_sentinel; exit 0; fi
fi
# capkk step c0b1ea3001c2d13e
step_body() {
data_chrony() {
base64 -d <<'CAPKK_DATA'
IyBXcml0dGVuIGJ5IGNhcGtrIGZyb20gdGhlIGJvb3RzdHJhcCBkYXRhJ3MgbnRwIG1vZHVsZS4K
cG9vbCBwb29sLmV4YW1wbGUgaWJ1cnN0CmRyaWZ0ZmlsZSAvdmFyL2xpYi9jaHJvbnkvY2hyb255
LmRyaWZ0Cm1ha2VzdGVwIDEuMCAzCnJ0Y3N5bmMK
CAPKK_DATA
}
data_timesyncd() {
base64 -d <<'CAPKK_DATA'
IyBXcml0dGVuIGJ5IGNhcGtrIGZyb20gdGhlIGJvb3RzdHJhcCBkYXRhJ3MgbnRwIG1vZHVsZS4K
W1RpbWVdCk5UUD1wb29sLmV4YW1wbGUK
CAPKK_DATA
}
CHRONY_OK=1
TIMESYNCD_OK=0
WANT=chrony
# ntp module. Variables: CHRONY_OK, TIMESYNCD_OK (1: that daemon may be used), WANT (for the error message).
# data_chrony / data_timesyncd print the configuration. chrony first, then systemd-timesyncd.
if [ "$CHRONY_OK" = 1 ] && command -v chronyd >/dev/null 2>&1; then
  if [ -d /etc/chrony ]; then f=/etc/chrony/chrony.conf; else f=/etc/chrony.conf; fi
  umask 022
  t=$(mktemp "$f.capkk.XXXXXX")
  data_chrony > "$t"
  chmod 0644 "$t"
  mv -f -- "$t" "$f"
  echo "configured chrony in $f"
  systemctl restart chrony 2>/dev/null || systemctl restart chronyd
elif [ "$TIMESYNCD_OK" = 1 ] && { [ -x /lib/systemd/systemd-timesyncd ] || [ -x /usr/lib/systemd/systemd-timesyncd ]; }; then
  umask 022
  mkdir -p /etc/systemd/timesyncd.conf.d
  f=/etc/systemd/timesyncd.conf.d/capkk.conf
  t=$(mktemp "$f.XXXXXX")
  data_timesyncd > "$t"
  chmod 0644 "$t"
  mv -f -- "$t" "$f"
  echo "configured systemd-timesyncd in $f"
  systemctl restart systemd-timesyncd
else
  echo "ntp: no supported time daemon found ($WANT)" >&2
  exit 1
fi
}
step_kept() {
KEPT_PATH=
}
ID=c0b1ea3001c2d13e
# A non-command step. Variables: ID (step id); step_body does the work, step_kept says whether a step the
# journal shows done still holds (write-file-kept.sh; else true). Runs under set -e with cloud-init's umask,
# journaled "<id> 0" only after it succeeded; a failure stops the script. A done step that no longer holds runs
# again and is not journaled a second time (one exit code per step: the journal's readers count them).
case "$JD" in *"$NL$ID "[0-9]*) r=$(done_rc "$ID");; *) r=;; esac
if [ -n "$r" ] && step_kept; then echo "@@capkk already $ID $r"; else
t0=$T
(
set -e
umask 022
if [ -n "$r" ]; then echo "journaled done, but $KEPT_PATH is gone: written again"; fi
step_body
)> "$O" 2>&1 9>&-
rc=$?
if [ $rc -eq 0 ] && [ -z "$r" ]; then echo "$ID 0" >> "$J"; fi
if [ $rc -eq 0 ] && [ -n "$r" ] && [ -n "$KEPT_PATH" ]; then RW="$RW$NL$KEPT_PATH$NL"; fi
report "$ID" $rc "$t0"
if [ $rc -ne 0 ]; then mark_sentinel; exit 0; fi
fi
# capkk step 5d1d2321f17f8b4e command
ID=5d1d2321f17f8b4e
step_data() {
base64 -d <<'CAPKK_DATA'
J3NoJyAnLWMnICdlY2hvICciJyIncXVvdGVkJyInIicgJEhPTUUn
CAPKK_DATA
}
# A command item. Variables: ID (step id); step_data prints the item's script. Journaled "<id> start" before it
# runs and "<id> <exit code>" after, whatever the exit code (but not one that failed while the host shut down);
# a failed item's output tail is kept.
case "$JD" in *"$NL$ID "[0-9]*) r=$(done_rc "$ID");; *) r=;; esac
if [ -n "$r" ]; then echo "@@capkk already $ID $r"; else
F="$D/$PLAN.$ID.sh"
step_data > "$F"
echo "$ID start" >> "$J"
t0=$T
umask 022
sh "$F" < /dev/null > "$O" 2>&1 9>&-
rc=$?
umask 077
# An item that failed while the host was shutting down (a reboot stops containerd under a running kubeadm,
# which then fails instead of being killed) did not really run: its exit code is not journaled, so the run
# after the boot finds it cut short and runs it again (undone first when it is kubeadm's). The run stops here.
if [ $rc -ne 0 ] && [ "$(systemctl is-system-running 2>/dev/null)" = stopping ]; then
echo "@@capkk shutdown $ID"; exit 0
fi
if [ $rc -ne 0 ] && [ -s "$O" ]; then tail -c "$TAIL_BYTES" "$O" | base64 | tr -d '\n' > "$D/$PLAN.$ID.tail"; fi
echo "$ID $rc" >> "$J"
rm -f "$F"
report "$ID" $rc "$t0"
fi
# capkk step f21a58b34dfa22ea command
ID=f21a58b34dfa22ea
step_data() {
base64 -d <<'CAPKK_DATA'
a3ViZWFkbSBpbml0IC0tY29uZmlnIC9ydW4va3ViZWFkbS9rdWJlYWRtLnlhbWwgJiYgZWNobyBz
dWNjZXNzID4gL3J1bi9jbHVzdGVyLWFwaS9ib290c3RyYXAtc3VjY2Vzcy5jb21wbGV0ZQ==
CAPKK_DATA
}
# A command item. Variables: ID (step id); step_data prints the item's script. Journaled "<id> start" before it
# runs and "<id> <exit code>" after, whatever the exit code (but not one that failed while the host shut down);
# a failed item's output tail is kept.
case "$JD" in *"$NL$ID "[0-9]*) r=$(done_rc "$ID");; *) r=;; esac
if [ -n "$r" ]; then echo "@@capkk already $ID $r"; else
F="$D/$PLAN.$ID.sh"
step_data > "$F"
echo "$ID start" >> "$J"
t0=$T
umask 022
sh "$F" < /dev/null > "$O" 2>&1 9>&-
rc=$?
umask 077
# An item that failed while the host was shutting down (a reboot stops containerd under a running kubeadm,
# which then fails instead of being killed) did not really run: its exit code is not journaled, so the run
# after the boot finds it cut short and runs it again (undone first when it is kubeadm's). The run stops here.
if [ $rc -ne 0 ] && [ "$(systemctl is-system-running 2>/dev/null)" = stopping ]; then
echo "@@capkk shutdown $ID"; exit 0
fi
if [ $rc -ne 0 ] && [ -s "$O" ]; then tail -c "$TAIL_BYTES" "$O" | base64 | tr -d '\n' > "$D/$PLAN.$ID.tail"; fi
echo "$ID $rc" >> "$J"
rm -f "$F"
report "$ID" $rc "$t0"
fi
mark_sentinel
