P=/var/lib/capkk
D=/var/lib/capkk/provisioning
N=12345
# The command line of every provisioning exec. Variables: P (parent of the state dir), D (state dir), N (script
# length). Saves the script from stdin into a 0600 file under the 0700 state dir, checks it arrived whole (a cut
# connection must never run half a script), runs it from / with stdin at /dev/null, removes it. Hang-ups are
# ignored and every step's output goes to a file, so a dropped connection never interrupts a step.
trap '' HUP; umask 022; mkdir -p "$P" || exit 97; umask 077; mkdir -p "$D" && chmod 700 "$D" && f=$(mktemp "$D/.run.XXXXXX") || exit 97; cat > "$f"
if [ "$(wc -c < "$f")" -eq "$N" ]; then (cd / && sh "$f" < /dev/null); rc=$?; else echo '@@capkk truncated'; rc=98; fi; rm -f "$f"; exit $rc
