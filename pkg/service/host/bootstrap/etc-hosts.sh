# Variables: BLOCK (base64 of the managed block "# capkk hosts BEGIN" ... "# capkk hosts END").
_n=$(mktemp)
awk '/^# capkk hosts BEGIN$/{s=1;next} /^# capkk hosts END$/{s=0;next} !s' /etc/hosts > "$_n"
printf '%s' "$BLOCK" | base64 -d >> "$_n"
if ! cmp -s "$_n" /etc/hosts; then cat "$_n" > /etc/hosts; echo 'updated /etc/hosts'; CHANGED=1; fi
rm -f "$_n"
