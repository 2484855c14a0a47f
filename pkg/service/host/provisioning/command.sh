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
