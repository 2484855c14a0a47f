# write_files item. Variables: P (path), DIR (its directory), UMASK, MODE (octal), SIMPLE (1: the mode has no
# execute or special bits, the umask yields it), APPEND, OWNER, CONTENT (1: step_data prints the bytes).
# Atomic: a temp file beside the target, exact bytes, owner, then mode, then rename. Parent directories are
# created 0755 like cloud-init's ensure_dir.
d=$DIR
[ -d "$d" ] || { umask 022; mkdir -p -- "$d"; }
umask "$UMASK"
t="$d/.capkk.$$"
trap 'if [ -e "$t" ]; then rm -f "$t"; fi' EXIT
set -C
if true 2>/dev/null > "$t"; then m=; else t=$(mktemp "$d/.capkk.XXXXXX"); m=1; fi
set +C
if [ "$APPEND" = 1 ] && [ -e "$P" ]; then cat -- "$P" >> "$t"; fi
if [ "$CONTENT" = 1 ]; then step_data >> "$t"; fi
case "$OWNER" in
  root) ;;
  root:root) if [ -g "$d" ]; then chown -- root:root "$t"; fi ;;
  *) chown -- "$OWNER" "$t" ;;
esac
if [ "$SIMPLE" = 1 ]; then
  if [ -n "$m" ]; then chmod "$MODE" "$t"; fi
else
  chmod "$MODE" "$t"
fi
mv -f -- "$t" "$P"
