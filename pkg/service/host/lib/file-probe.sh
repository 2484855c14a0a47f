# Arguments: pairs PATH LABEL. Prints "@@file:LABEL=<mode> <sha256>" or "@@file:LABEL=missing" per file.
while [ $# -ge 2 ]; do
  if [ -f "$1" ]; then echo "@@file:$2=$(stat -c %a "$1") $(sha256sum "$1" | cut -d' ' -f1)"; else echo "@@file:$2=missing"; fi
  shift 2
done
