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
