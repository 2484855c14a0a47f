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
