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
