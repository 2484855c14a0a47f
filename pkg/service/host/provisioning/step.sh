# A non-command step. Variables: ID (step id); step_body does the work. Runs under set -e with cloud-init's
# umask, journaled "<id> 0" only after it succeeded; a failure stops the script.
case "$JD" in *"$NL$ID "[0-9]*) r=$(done_rc "$ID");; *) r=;; esac
if [ -n "$r" ]; then echo "@@capkk already $ID $r"; else
t0=$T
(
set -e
umask 022
step_body
)> "$O" 2>&1 9>&-
rc=$?
if [ $rc -eq 0 ]; then echo "$ID 0" >> "$J"; fi
report "$ID" $rc "$t0"
if [ $rc -ne 0 ]; then mark_sentinel; exit 0; fi
fi
