# First exec of a run. Arguments: every step id of the plan. Prints the journal and the kept output tails; when
# the sentinel exists (or the journal says provisioned) and this plan's journal is empty or complete, stops.
echo '@@capkk journal'; cat "$J" 2>/dev/null; echo '@@capkk journal-end'
for f in "$D/$PLAN".*.tail; do [ -e "$f" ] || continue; i=${f##*/}; i=${i#"$PLAN".}; echo "@@capkk tail ${i%.tail} $(cat "$f")"; done
if provisioned; then
if [ ! -s "$J" ] || printf '%s\n' "$@" | awk 'NR == FNR { want[$1] = 1; next } $2 ~ /^[0-9]+$/ { delete want[$1] } END { for (k in want) exit 1 }' - "$J"; then
echo '@@capkk sentinel 1'; echo '@@capkk skipall'; exit 0
fi
fi
