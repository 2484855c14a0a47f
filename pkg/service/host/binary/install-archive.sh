# Variables: F (staged archive), DIR (extract into), PROBE (a file the archive must provide), SHA (its digest),
# STAMPS (stamp directory), ID (artifact id), LABEL.
mkdir -p "$DIR" "$STAMPS"
tar -xzf "$F" -C "$DIR" --no-same-owner
[ -e "$PROBE" ] || { echo "archive $LABEL did not provide $PROBE"; exit 1; }
printf '%s\n' "$SHA" > "$STAMPS/$ID"
rm -f "$F"
echo "extracted $LABEL into $DIR"
CHANGED=1
