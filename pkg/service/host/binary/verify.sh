# Arguments: triples FILE SHA256 LABEL. Every staged file is verified before any is installed; on a mismatch
# all of them are removed.
_all=$(i=0; for a in "$@"; do [ $((i % 3)) = 0 ] && printf '%s\n' "$a"; i=$((i + 1)); done)
while [ $# -ge 3 ]; do
  _a=$(sha256sum "$1" 2>/dev/null | cut -d' ' -f1)
  if [ "$_a" != "$2" ]; then
    printf '%s\n' "$_all" | while IFS= read -r f; do rm -f "$f"; done
    mismatch "$3" "$2" "${_a:-missing}"
  fi
  shift 3
done
