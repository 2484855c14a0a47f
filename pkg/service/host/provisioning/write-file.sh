# write_files item. Variables: P (path), DIR (its directory), MODE (octal), APPEND, OWNER, CONTENT (1:
# step_data prints the bytes). Atomic: a mktemp file beside the target (unpredictable name, 0600 while it is
# written), exact bytes, owner, then mode, then rename. Parent directories are created 0755 like cloud-init's
# ensure_dir.
d=$DIR
[ -d "$d" ] || { umask 022; mkdir -p -- "$d"; }
t=$(mktemp "$d/.capkk.XXXXXX")
trap 'if [ -e "$t" ]; then rm -f "$t"; fi' EXIT
if [ "$APPEND" = 1 ] && [ -e "$P" ]; then cat -- "$P" >> "$t"; fi
if [ "$CONTENT" = 1 ]; then step_data >> "$t"; fi
case "$OWNER" in
  root) ;;
  root:root) if [ -g "$d" ]; then chown -- root:root "$t"; fi ;;
  *) chown -- "$OWNER" "$t" ;;
esac
chmod "$MODE" "$t"
mv -f -- "$t" "$P"
